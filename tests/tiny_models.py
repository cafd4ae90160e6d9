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


def make_eagle_head(base_dir: Path, out: Path, seed: int = 1, num_layers: int = 1, with_fc_bias: bool = True,
                    with_embed: bool = True, fmt: str = "safetensors", extra: dict | None = None) -> dict:
    """A random SafeAILab-style EAGLE-1 head for the HF model in `base_dir`: `embed_tokens`, `fc`
    (2H -> H), `layers.{j}` of a Llama decoder (no input_layernorm in layer 0), plus a config.json.
    Returns the tensors written."""
    import json

    from safetensors.torch import save_file

    base = json.loads((Path(base_dir) / "config.json").read_text())
    H, I, V = base["hidden_size"], base["intermediate_size"], base["vocab_size"]
    nh, nkv = base["num_attention_heads"], base.get("num_key_value_heads", base["num_attention_heads"])
    hd = base.get("head_dim") or H // nh
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=0.2):
        return (torch.randn(*shape, generator=g) * scale).contiguous()

    t = {"fc.weight": rnd(H, 2 * H)}
    if with_fc_bias:
        t["fc.bias"] = rnd(H)
    if with_embed:
        t["embed_tokens.weight"] = rnd(V, H, scale=1.0)
    for j in range(num_layers):
        p = f"layers.{j}."
        t[p + "self_attn.q_proj.weight"] = rnd(nh * hd, H)
        t[p + "self_attn.k_proj.weight"] = rnd(nkv * hd, H)
        t[p + "self_attn.v_proj.weight"] = rnd(nkv * hd, H)
        t[p + "self_attn.o_proj.weight"] = rnd(H, nh * hd)
        t[p + "mlp.gate_proj.weight"] = rnd(I, H)
        t[p + "mlp.up_proj.weight"] = rnd(I, H)
        t[p + "mlp.down_proj.weight"] = rnd(H, I)
        t[p + "post_attention_layernorm.weight"] = 1.0 + rnd(H, scale=0.05)
        if j > 0:
            t[p + "input_layernorm.weight"] = 1.0 + rnd(H, scale=0.05)
    t.update(extra or {})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {k: base[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                "num_key_value_heads", "vocab_size", "rms_norm_eps", "max_position_embeddings",
                                "rope_theta", "hidden_act") if k in base}
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=num_layers)
    (out / "config.json").write_text(json.dumps(cfg))
    if fmt == "safetensors":
        save_file(t, str(out / "model.safetensors"))
    else:
        torch.save(t, out / "pytorch_model.bin")
    return t


def save_tiny_tokenizer(out: Path, vocab_size: int = 1001, rename: dict[int, str] | None = None) -> None:
    """A word-level tokenizer over tokens 't0'..'t{V-1}' (ids 0..2 are <unk>, <s>, </s>), saved
    as an HF fast tokenizer in `out`. `rename` swaps the text of some ids (to make a mismatch)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"t{i}": i for i in range(3, vocab_size)})
    for i, text in (rename or {}).items():
        vocab = {k: v for k, v in vocab.items() if v != i}
        vocab[text] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(out))


def scale_layer_outputs(model, scale: float):
    """Layers that write only `scale` of their output into the residual stream: a near-bigram model
    (next token ~ argmax lm_head . embed(token)) that a bigram draft or EAGLE head predicts often
    but not always. scale 0 gives the pure bigram model itself."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(scale)
    return model
