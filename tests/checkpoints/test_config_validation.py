"""Config fields are read typed and range-checked in one place; each error names file and field."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tiny_models import hf_config
from trtspec.checkpoints.config_fields import ConfigFields
from trtspec.checkpoints.spec import spec_from_hf, spec_from_trtllm, trtllm_config
from trtspec.checkpoints.trtllm_ckpt import checkpoint_from_config
from trtspec.checkpoints.writer import finite
from trtspec.errors import TrtspecError


def write_hf(tmp_path, family="llama", **changes):
    cfg = hf_config(family).to_dict()
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


HF_BAD = [
    (dict(rms_norm_eps="tiny"), "rms_norm_eps: expected a positive number, got 'tiny'"),
    (dict(rms_norm_eps=0), "rms_norm_eps: expected a positive number, got 0"),
    (dict(max_position_embeddings=[256]), "max_position_embeddings: expected a positive integer, got [256]"),
    (dict(max_position_embeddings=-5), "max_position_embeddings: expected a positive integer, got -5"),
    (dict(rope_scaling="llama3"), "rope_scaling: expected an object"),
    (dict(rope_scaling={"rope_type": "linear", "factor": "x"}), "rope_scaling.factor: expected a positive number"),
    (dict(rope_scaling={"rope_type": 3}), "rope_scaling.rope_type: expected a string, got 3"),
    (dict(hidden_size=64.9), "hidden_size: expected a positive integer, got 64.9"),
    (dict(hidden_size=True), "hidden_size: expected a positive integer, got True"),
    (dict(intermediate_size="96"), "intermediate_size: expected a positive integer, got '96'"),
    (dict(num_attention_heads=0), "num_attention_heads: expected a positive integer, got 0"),
    (dict(num_attention_heads=3, num_key_value_heads=1, head_dim=None),
     "hidden_size: 64 is not divisible by num_attention_heads=3"),
    (dict(num_key_value_heads=3), "num_key_value_heads: 3 does not divide num_attention_heads=4"),
    (dict(num_key_value_heads=8), "num_key_value_heads: 8 does not divide num_attention_heads=4"),
    (dict(head_dim=16.5), "head_dim: expected a positive integer, got 16.5"),
    (dict(rope_theta="1e4"), "rope_theta: expected a positive number, got '1e4'"),
    (dict(attention_bias="false"), "attention_bias: expected true or false, got 'false'"),
    (dict(mlp_bias=1), "mlp_bias: expected true or false, got 1"),
    (dict(hidden_act=["silu"]), "hidden_act: expected a string"),
    (dict(sliding_window=-1), "sliding_window: expected a positive integer, got -1"),
    (dict(vocab_size=None), "missing field 'vocab_size'"),
    (dict(architectures=[["LlamaForCausalLM"]]), "unsupported architecture ['LlamaForCausalLM']"),
    (dict(architectures="LlamaForCausalLM"), "architectures: expected a list such as [\"LlamaForCausalLM\"], got "),
]


@pytest.mark.parametrize("changes,expected", HF_BAD, ids=[f"{next(iter(c))}={c[next(iter(c))]!r}" for c, _ in HF_BAD])
def test_hf_config_field_errors(tmp_path, changes, expected):
    with pytest.raises(TrtspecError) as e:
        spec_from_hf(write_hf(tmp_path, **changes))
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'config.json'}: {expected}") and "\n" not in msg, msg


def test_hf_config_not_an_object(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(TrtspecError, match=r"config\.json: config: expected a JSON object, got a JSON list"):
        spec_from_hf(tmp_path)


def test_hf_config_nulls_and_integral_floats_are_fine(tmp_path):
    """Null means absent (HF writes `head_dim: null`), except num_key_value_heads, whose null is
    num_attention_heads as in transformers; 64.0 is 64, only 64.9 is refused."""
    (tmp_path / "a").mkdir()
    cfg = json.loads((write_hf(tmp_path / "a", "mistral", hidden_size=64.0)).joinpath("config.json").read_text())
    cfg.update(head_dim=None, rope_scaling=None, num_key_value_heads=None, max_position_embeddings=None)
    (tmp_path / "a" / "config.json").write_text(json.dumps(cfg))
    spec = spec_from_hf(tmp_path / "a")
    assert (spec.hidden_size, spec.head_size, spec.num_kv_heads, spec.max_position_embeddings) == (64, 16, 4, 131072)
    assert isinstance(spec.hidden_size, int)


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
def test_fields_a_config_leaves_out_take_transformers_defaults(tmp_path, family):
    """The oracle is transformers reading the same file: the KV heads, head size, RoPE base, positions
    and norm epsilon it takes for each field left out (Mistral's 8 KV heads, Qwen3's head_dim 128)."""
    from transformers import AutoConfig

    optional = ("num_key_value_heads", "head_dim", "rope_theta", "max_position_embeddings", "rms_norm_eps",
                "sliding_window")
    # 64 query heads: Qwen's default 32 KV heads differ from "as many as the query heads"
    d = write_hf(tmp_path, family, num_attention_heads=64, hidden_size=512, **{k: None for k in optional})
    spec, ref = spec_from_hf(d), AutoConfig.from_pretrained(d)
    head = getattr(ref, "head_dim", None) or ref.hidden_size // ref.num_attention_heads
    assert (spec.num_kv_heads, spec.head_size, spec.rope_theta, spec.max_position_embeddings, spec.norm_eps) == (
        ref.num_key_value_heads, head, ref.rope_theta, ref.max_position_embeddings, ref.rms_norm_eps)
    if family == "mistral":  # a window left out is transformers' 4096, which the runtime applies
        assert spec.sliding_window == ref.sliding_window == 4096
    else:
        assert spec.sliding_window is None


def test_default_rope_type_is_written_as_no_scaling(tmp_path):
    """transformers names unscaled RoPE rope_type "default"; TensorRT-LLM versions whose
    RotaryScalingType lacks the name refuse it, and every version reads null as unscaled."""
    spec = spec_from_hf(write_hf(tmp_path, "llama", rope_scaling={"rope_type": "default"}))
    assert spec.rope_scaling is None
    assert trtllm_config(spec, "float32", 1, parallel_embedding=True)["rotary_scaling"] is None
    scaled = spec_from_hf(write_hf(tmp_path, "llama", rope_scaling={"rope_type": "linear", "factor": 2.0}))
    assert scaled.rope_scaling["rope_type"] == "linear"
    from trtspec.checkpoints.spec import SUPPORTED_ROPE_TYPES
    from trtspec.upstream import trtllm

    assert set(SUPPORTED_ROPE_TYPES) - {"default"} <= set(trtllm.ROTARY_SCALING_TYPES)  # every type written is read


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
def test_good_configs_round_trip(tmp_path, family):
    spec = spec_from_hf(write_hf(tmp_path, family))
    back = spec_from_trtllm(trtllm_config(spec, "float32", 1, parallel_embedding=True), "cfg")
    assert (back.hidden_size, back.num_heads, back.num_kv_heads, back.head_size, back.norm_eps,
            back.rope_theta, back.max_position_embeddings) == (
        spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_size, spec.norm_eps,
        spec.rope_theta, spec.max_position_embeddings)


def trt_cfg(tmp_path, **changes):
    cfg = trtllm_config(spec_from_hf(write_hf(tmp_path)), "float32", 1, parallel_embedding=True)
    cfg.update(changes)
    return cfg


@pytest.mark.parametrize("changes,expected", [
    (dict(norm_epsilon="tiny"), "cfg.json: norm_epsilon: expected a positive number, got 'tiny'"),
    (dict(rotary_base=math.inf), "cfg.json: rotary_base: expected a positive number, got inf"),
    (dict(rotary_scaling="llama3"), "cfg.json: rotary_scaling: expected an object"),
    (dict(head_size=16.5), "cfg.json: head_size: expected a positive integer, got 16.5"),
    (dict(num_key_value_heads=3), "cfg.json: num_key_value_heads: 3 does not divide num_attention_heads=4"),
    (dict(qk_layernorm="no"), "cfg.json: qk_layernorm: expected true or false, got 'no'"),
])
def test_trtllm_config_field_errors(tmp_path, changes, expected):
    with pytest.raises(TrtspecError) as e:
        spec_from_trtllm(trt_cfg(tmp_path, **changes), "cfg.json")
    assert str(e.value).startswith(expected), str(e.value)


def test_nested_block_is_named_by_its_path(tmp_path):
    with pytest.raises(TrtspecError, match=r"^cfg\.json: eagle_net_config\.hidden_size: expected a positive "):
        spec_from_trtllm(trt_cfg(tmp_path, hidden_size="wide"), "cfg.json", prefix="eagle_net_config.")
    with pytest.raises(TrtspecError, match=r"^cfg\.json: mapping\.tp_size: expected a positive integer, got 1\.5"):
        ConfigFields({"tp_size": 1.5}, "cfg.json", "mapping.").int("tp_size", 1)


@pytest.mark.parametrize("value,dtype,expected", [
    (math.nan, torch.float32, "tensor 'w' has 1 non-finite value(s) (NaN or Inf)"),
    (-math.inf, torch.bfloat16, "tensor 'w' has 1 non-finite value(s) (NaN or Inf)"),
    (1e6, torch.float16, "tensor 'w' has values beyond the range of float16 (largest magnitude 1e+06)"),
])
def test_non_finite_weights_are_named(value, dtype, expected):
    t = torch.ones(4, 4)
    t[1, 2] = value
    with pytest.raises(TrtspecError) as e:
        finite(t, "w", "model.safetensors", dtype)
    assert str(e.value).startswith(f"model.safetensors: {expected}"), str(e.value)


def test_finite_weights_pass_and_fp8_is_not_checked():
    assert finite(torch.ones(3), "w", "f", torch.float16).dtype == torch.float16
    fp8 = torch.ones(3).to(torch.float8_e4m3fn)
    assert finite(fp8, "w", "f", torch.float8_e4m3fn) is not None


@pytest.mark.parametrize("changes,expected", [
    (dict(dtype="float8"), "dtype: expected one of float32, float16, bfloat16, got 'float8'"),
    (dict(logits_dtype="fp32"), "logits_dtype: expected one of float32, float16, bfloat16, got 'fp32'"),
])
def test_checkpoint_dtypes_are_ones_the_memory_estimate_sizes(tmp_path, changes, expected):
    """builders/memory.py sizes weights, KV and logits by these: an unknown one is refused at load,
    not silently counted as 2 bytes."""
    with pytest.raises(TrtspecError) as e:
        checkpoint_from_config(trt_cfg(tmp_path, **changes), tmp_path)
    assert str(e.value) == f"{tmp_path / 'config.json'}: {expected}"
