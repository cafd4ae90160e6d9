"""Tiny random HF models of every supported family, saved as ordinary HF directories."""

from __future__ import annotations

from pathlib import Path

import torch

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def hf_config(family: str, **overrides):
    import transformers as tf

    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=1001, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=False)
    if family == "llama":
        common.update(rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32})
        cls, arch = tf.LlamaConfig, "LlamaForCausalLM"
    elif family == "mistral":
        common.update(sliding_window=None)
        cls, arch = tf.MistralConfig, "MistralForCausalLM"
    elif family == "qwen2":
        common.update(tie_word_embeddings=True)
        cls, arch = tf.Qwen2Config, "Qwen2ForCausalLM"
    elif family == "qwen3":
        common.update(head_dim=24)
        cls, arch = tf.Qwen3Config, "Qwen3ForCausalLM"
    else:
        raise ValueError(family)
    common.update(overrides)
    return cls(architectures=[arch], **common)


def make_hf_model(family: str, out: Path, seed: int = 0, dtype=torch.float32, **overrides):
    """Build and save a random model; returns the transformers model (eval, fp32)."""
    import transformers as tf

    torch.manual_seed(seed)
    cfg = hf_config(family, **overrides)
    model = tf.AutoModelForCausalLM.from_config(cfg).eval()
    # Random init gives nearly flat logits; scale up so greedy decoding is not decided by ties.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    model.to(dtype).save_pretrained(out, safe_serialization=True)
    return model
