"""The memory-fit estimate against hand calculations (Llama-3.1-8B FP8 on one H100), and its warnings.

The plan needs only config.json and the rank files' headers, so a real-size model is a config.json
plus an empty rank0.safetensors here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import save_file

from trtspec.builders import BuildOptions, make_plan
from trtspec.builders.memory import checkpoint_weight_bytes, kv_bytes_per_token
from trtspec.checkpoints.trtllm_ckpt import checkpoint_from_config

LLAMA31_8B = {
    "architecture": "LlamaForCausalLM", "dtype": "bfloat16", "logits_dtype": "float32", "vocab_size": 128256,
    "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_size": 128, "intermediate_size": 14336, "hidden_act": "silu", "norm_epsilon": 1e-05,
    "position_embedding_type": "rope_gpt_neox", "max_position_embeddings": 131072, "rotary_base": 500000.0,
    "rotary_scaling": {"type": "llama3", "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "attn_bias": False, "mlp_bias": False, "use_parallel_embedding": False, "embedding_sharding_dim": 0,
    "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
    "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]},
}


def config_only(path: Path, cfg: dict) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg))
    for r in range(cfg["mapping"]["tp_size"]):
        save_file({}, str(path / f"rank{r}.safetensors"))
    return path


def test_llama31_8b_fp8_on_h100_matches_hand_calculation(tmp_path):
    plan = make_plan(config_only(tmp_path / "l8b", LLAMA31_8B),
                     BuildOptions(max_batch_size=64, max_input_len=4096, max_seq_len=8192))
    m = plan.memory

    # Hand calculation. Llama-3.1-8B has 8.03e9 parameters (model card); the embedding and lm_head
    # (128256 x 4096 = 525.3e6 each) stay bf16 (2 bytes), everything else is FP8 (1 byte).
    embed = 128256 * 4096
    weights = (8.03e9 - 2 * embed) * 1 + 2 * embed * 2                  # ~9.08e9 bytes
    kv_per_token = 2 * 32 * 8 * 128 * 1                                  # K and V, 32 layers, 8 kv heads, fp8
    activations = 8192 * 4096 * 16 * 2                                   # max_num_tokens x hidden x 16, bf16
    gpu = 80 * 1024**3                                                   # H100 80 GB
    runtime = 2 * 1024**3                                                # CUDA context, workspaces
    kv_tokens = 0.9 * (gpu - weights - activations - runtime) / kv_per_token  # ~1.01e6 tokens

    assert m.weights_bytes == pytest.approx(weights, rel=0.10)
    assert m.kv_bytes_per_token == pytest.approx(kv_per_token, rel=0.10)
    assert m.activation_bytes == pytest.approx(activations, rel=0.10)
    assert m.kv_token_capacity == pytest.approx(kv_tokens, rel=0.10)
    assert m.kv_tokens_at_limits == 64 * 8192 and m.kv_fits_at_limits and m.fits
    assert m.full_length_sequences == m.kv_token_capacity // 8192 >= 64
    assert plan.warnings == []


def test_bf16_kv_halves_the_capacity_and_h200_adds_memory(tmp_path):
    cfg = {**LLAMA31_8B, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}}
    opts = BuildOptions(max_batch_size=64, max_input_len=4096, max_seq_len=8192)
    fp8kv = make_plan(config_only(tmp_path / "a", LLAMA31_8B), opts).memory
    bf16kv = make_plan(config_only(tmp_path / "b", cfg), opts).memory
    assert bf16kv.kv_bytes_per_token == 2 * fp8kv.kv_bytes_per_token
    assert bf16kv.kv_token_capacity == pytest.approx(fp8kv.kv_token_capacity / 2, rel=0.01)
    h200 = make_plan(tmp_path / "a", BuildOptions(gpu="h200", max_batch_size=64, max_input_len=4096,
                                                   max_seq_len=8192)).memory
    assert h200.gpu_memory_bytes > 1.7 * fp8kv.gpu_memory_bytes
    assert h200.kv_token_capacity > 1.8 * fp8kv.kv_token_capacity


def test_tensor_parallel_splits_weights_and_kv(tmp_path):
    cfg = {**LLAMA31_8B, "use_parallel_embedding": True, "mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1}}
    opts = BuildOptions(max_batch_size=64, max_input_len=4096, max_seq_len=8192)
    one = make_plan(config_only(tmp_path / "tp1", LLAMA31_8B), opts).memory
    two = make_plan(config_only(tmp_path / "tp2", cfg), opts)
    assert two.memory.weights_bytes == pytest.approx(one.weights_bytes / 2, rel=0.01)
    assert two.memory.kv_bytes_per_token == one.kv_bytes_per_token // 2
    assert two.build().argv()[-1] == "2"  # --workers 2


def test_70b_bf16_does_not_fit_one_h100(tmp_path):
    cfg = {**LLAMA31_8B, "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
           "intermediate_size": 28672, "quantization": {"quant_algo": None, "kv_cache_quant_algo": None}}
    plan = make_plan(config_only(tmp_path / "l70b", cfg), BuildOptions(max_seq_len=8192))
    assert not plan.memory.fits and plan.memory.kv_token_capacity == 0
    assert plan.memory.weights_bytes == pytest.approx(70.6e9 * 2, rel=0.10)  # 70.6e9 parameters in bf16
    assert any("memory: the engines need" in w and "tensor parallelism" in w for w in plan.warnings)


def test_kv_shortfall_warns_with_full_length_sequences(tmp_path):
    cfg = {**LLAMA31_8B, "quantization": {"quant_algo": None, "kv_cache_quant_algo": None}}
    plan = make_plan(config_only(tmp_path / "bf16", cfg), BuildOptions(max_batch_size=256, max_seq_len=32768,
                                                                        max_input_len=16384))
    m = plan.memory
    assert m.fits and not m.kv_fits_at_limits
    assert m.full_length_sequences == m.kv_token_capacity // 32768 < 256
    assert any(f"at most {m.full_length_sequences} full-length sequences" in w for w in plan.warnings)


def test_eagle_counts_every_head_copy_and_its_kv_layers(tmp_path):
    net = {k: LLAMA31_8B[k] for k in ("dtype", "logits_dtype", "vocab_size", "hidden_size", "num_attention_heads",
                                      "num_key_value_heads", "head_size", "intermediate_size", "hidden_act",
                                      "norm_epsilon", "position_embedding_type", "max_position_embeddings",
                                      "rotary_base", "rotary_scaling", "mapping", "quantization")}
    quant = {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head", "*lm_head"]}
    net.update(architecture="LlamaForCausalLM", num_hidden_layers=1, quantization=quant)
    cfg = {**LLAMA31_8B, "architecture": "EagleForCausalLM", "max_draft_len": 63, "num_eagle_layers": 4,
           "max_non_leaves_per_layer": 10, "eagle_net_config": net, "quantization": quant}
    opts = BuildOptions(max_batch_size=64, max_input_len=4096, max_seq_len=8192)
    base = make_plan(config_only(tmp_path / "base", LLAMA31_8B), opts).memory
    eagle = make_plan(config_only(tmp_path / "eagle", cfg), opts).memory
    # Each of the 4 clones: embedding + lm_head in bf16 (2 x 525e6 x 2 B), fc 2H x H and one decoder
    # layer (218.1e6 linear weights) in FP8.
    head = 2 * 128256 * 4096 * 2 + 2 * 4096 * 4096 + 218.1e6
    assert eagle.weights_bytes - base.weights_bytes == pytest.approx(4 * head, rel=0.05)
    assert eagle.kv_bytes_per_token == base.kv_bytes_per_token * 33 // 32  # the drafter layer shares the pool


# Mistral-7B-v0.1 as a TRT-LLM checkpoint config that kept its window (checkpoints.spec writes it).
MISTRAL_7B = {**LLAMA31_8B, "architecture": "MistralForCausalLM", "vocab_size": 32000,
              "max_position_embeddings": 32768, "rotary_base": 10000.0, "rotary_scaling": None,
              "sliding_window": 4096}


@pytest.mark.parametrize("window, max_input_len, per_sequence", [
    (4096, 2048, 4096 + 32),   # decoding: a front block is released once the sequence holds W + one block
    (4000, 2048, 126 * 32),    # W spans 125 blocks (the last one partly), plus the one being filled
    (4096, 16384, 16384),      # a prompt longer than the window is held whole while its context runs
])
def test_a_sliding_window_bounds_the_kv_of_a_sequence(tmp_path, window, max_input_len, per_sequence):
    """TensorRT-LLM keeps at most the window plus a 32-token block of a generating sequence, or its
    whole prompt during the context phase (upstream.trtllm.kv_tokens_per_sequence), not max_seq_len."""
    opts = BuildOptions(max_batch_size=64, max_input_len=max_input_len, max_seq_len=32768)
    windowed = make_plan(config_only(tmp_path / "swa", {**MISTRAL_7B, "sliding_window": window}), opts).memory
    full = make_plan(config_only(tmp_path / "full", {**MISTRAL_7B, "sliding_window": None}), opts).memory
    assert full.kv_tokens_at_limits == 64 * 32768 and full.full_length_sequences == full.kv_token_capacity // 32768
    assert windowed.kv_token_capacity == full.kv_token_capacity  # the pool is what memory leaves either way
    assert windowed.engines[0].kv_tokens_per_sequence == per_sequence
    assert windowed.kv_tokens_at_limits == 64 * per_sequence
    assert windowed.full_length_sequences == windowed.kv_token_capacity // per_sequence


def test_a_window_at_or_above_max_seq_len_changes_nothing(tmp_path):
    opts = BuildOptions(max_batch_size=64, max_input_len=2048, max_seq_len=4096)
    m = make_plan(config_only(tmp_path / "swa", MISTRAL_7B), opts).memory
    assert m.kv_tokens_at_limits == 64 * 4096 and m.engines[0].kv_tokens_per_sequence == 4096


def test_kv_shortfall_with_a_window_counts_the_windowed_sequences(tmp_path):
    cfg = {**MISTRAL_7B, "quantization": {"quant_algo": None, "kv_cache_quant_algo": None}}
    plan = make_plan(config_only(tmp_path / "bf16", cfg), BuildOptions(max_batch_size=2048, max_seq_len=32768,
                                                                        max_input_len=1024))
    m = plan.memory
    assert m.fits and not m.kv_fits_at_limits and m.kv_tokens_at_limits == 2048 * 4128
    assert m.full_length_sequences == m.kv_token_capacity // 4128 < 2048
    assert any("max_batch_size x 4128 tokens per sequence" in w
               and f"at most {m.full_length_sequences} full-length sequences" in w for w in plan.warnings)


def test_group_wise_formats_count_their_scales_and_zeros(tmp_path):
    """TensorRT-LLM 1.x WeightOnlyGroupwiseQuantLinear holds a model-dtype weights_scaling_factor
    [in / group_size, out] per linear (and a zero of that shape with has_zero_point); W4A16 is
    per-channel (WeightOnlyQuantLinear: one scale per output, not counted); 4-bit weights are half a byte."""
    def weights(**quant) -> int:
        return checkpoint_weight_bytes(checkpoint_from_config({**LLAMA31_8B, "quantization": quant}, tmp_path))

    H = 4096
    linear = 32 * (H * (32 + 2 * 8) * 128 + H * H + 3 * H * 14336)
    w4 = weights(quant_algo="W4A16")
    assert weights(quant_algo="FP8") - w4 == linear // 2
    assert weights(quant_algo="W4A16_AWQ", group_size=128, pre_quant_scale=True) - w4 == linear * 2 // 128
    assert weights(quant_algo="W4A16_GPTQ", group_size=128, has_zero_point=True) - w4 == 2 * linear * 2 // 128
    assert weights(quant_algo="W4A8_AWQ", group_size=128) - w4 == linear * 2 // 128


def test_pipeline_stages_split_the_layers_and_hold_embedding_first_lm_head_last(tmp_path):
    """pp = 2 (models/llama/model.py, 1.x): 16 layers per stage, the bf16 embedding on stage 0, ln_f and the
    bf16 lm_head (excluded from FP8) on stage 1; each stage's KV holds its own 16 layers."""
    one = checkpoint_from_config(LLAMA31_8B, tmp_path)
    two = checkpoint_from_config({**LLAMA31_8B, "mapping": {"world_size": 2, "tp_size": 1, "pp_size": 2}}, tmp_path)
    layer = (32 + 2 * 8) * 128 * 4096 + 4096 * 32 * 128 + 3 * 4096 * 14336 + 2 * 4096 * 2  # FP8 linears, bf16 norms
    embed = 128256 * 4096 * 2
    assert checkpoint_weight_bytes(two, 0) == 16 * layer + embed
    assert checkpoint_weight_bytes(two, 1) == 16 * layer + 4096 * 2 + embed
    assert checkpoint_weight_bytes(one) == 32 * layer + 4096 * 2 + 2 * embed
    assert kv_bytes_per_token(two, 0) == kv_bytes_per_token(two, 1) == 2 * 16 * 8 * 128 * 1
    assert kv_bytes_per_token(one) == 2 * 32 * 8 * 128 * 1
