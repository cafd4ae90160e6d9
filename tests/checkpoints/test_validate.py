"""The offline checkpoint self-check accepts what we (and ModelOpt) write and rejects damage."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from tiny_models import make_eagle_head, make_hf_model
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.validate import validate_checkpoint
from trtspec.errors import TrtspecError


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_converted_checkpoints_validate(tmp_path, family):
    make_hf_model(family, tmp_path / "hf", num_key_value_heads=1)
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float16", tp=2)
    assert validate_checkpoint(tmp_path / "ckpt").tp == 2


def test_modelopt_export_validates(tmp_path):
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    model = make_hf_model("qwen2", tmp_path / "hf")
    export_tensorrt_llm_checkpoint(model, "qwen", torch.float16, export_dir=str(tmp_path / "mo"),
                                   inference_tensor_parallel=2)
    validate_checkpoint(tmp_path / "mo")


def test_eagle_checkpoint_validates(tmp_path):
    make_hf_model("llama", tmp_path / "hf")
    make_eagle_head(tmp_path / "hf", tmp_path / "head", num_layers=2)
    convert_eagle(tmp_path / "hf", tmp_path / "head", tmp_path / "ckpt", dtype="float16", tp=2, num_eagle_layers=2)
    validate_checkpoint(tmp_path / "ckpt")


@pytest.mark.parametrize("damage, needle", [
    (lambda t: t.pop("transformer.layers.1.mlp.gate.weight"), "missing tensor 'transformer.layers.1.mlp.gate.weight'"),
    (lambda t: t.update({"transformer.layers.0.attention.dense.weight": torch.zeros(64, 32, dtype=torch.float16)}),
     "'transformer.layers.0.attention.dense.weight' has shape [64, 32], expected [64, 64]"),
    (lambda t: t.update({"transformer.ln_f.weight": torch.zeros(64, dtype=torch.float32)}), "expected torch.float16"),
    (lambda t: t.update({"transformer.layers.0.attention.qkv.bias": torch.zeros(128, dtype=torch.float16)}),
     "unexpected tensor 'transformer.layers.0.attention.qkv.bias'"),
])
def test_damage_is_named(tmp_path, damage, needle):
    make_hf_model("llama", tmp_path / "hf")
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float16")
    f = tmp_path / "ckpt" / "rank0.safetensors"
    tensors = load_file(f)
    damage(tensors)
    save_file(tensors, str(f))
    with pytest.raises(TrtspecError, match="rank0.safetensors") as e:
        validate_checkpoint(tmp_path / "ckpt")
    assert needle in str(e.value)


@pytest.mark.parametrize("mapping", [{"tp_size": 2}, {"world_size": 4, "tp_size": 2, "pp_size": 1}])
def test_world_size_must_be_tp_times_pp(tmp_path, mapping):
    """TRT-LLM's Mapping(**mapping) raises unless world_size (default 1) == tp * pp * cp; trtllm-build
    would fail on this config.json, so the self-check names the field first."""
    import json

    make_hf_model("llama", tmp_path / "hf")
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float16", tp=2)
    cfg_file = tmp_path / "ckpt" / "config.json"
    cfg_file.write_text(json.dumps({**json.loads(cfg_file.read_text()), "mapping": mapping}))
    with pytest.raises(TrtspecError, match=r"config\.json: mapping\.world_size: expected tp_size \* pp_size \* cp_size = 2"):
        validate_checkpoint(tmp_path / "ckpt")


def test_eagle_net_quantization_alone_is_refused(tmp_path):
    """The EAGLE nets' attention takes its quant mode from eagle_net_config.quantization while the
    root quantize() (and the tensors) follow the top-level block: a net-only FP8 KV cache is a mismatch."""
    import json

    make_hf_model("llama", tmp_path / "hf")
    make_eagle_head(tmp_path / "hf", tmp_path / "head", num_layers=1)
    convert_eagle(tmp_path / "hf", tmp_path / "head", tmp_path / "ckpt", dtype="float16", num_eagle_layers=1)
    cfg_file = tmp_path / "ckpt" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["eagle_net_config"]["quantization"] = {"quant_algo": None, "kv_cache_quant_algo": "FP8"}
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(TrtspecError, match="eagle_net_config.quantization .* differs from the top-level"):
        validate_checkpoint(tmp_path / "ckpt")
