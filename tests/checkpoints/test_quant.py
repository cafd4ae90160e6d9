"""The offline self-check accepts quantized checkpoints and rejects damage to their quantized parts."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tiny_models import make_eagle_head, make_hf_model
from trtspec.calib.quantize import CalibOptions, quantize_eagle, quantize_hf
from trtspec.checkpoints.validate import validate_checkpoint
from trtspec.errors import TrtspecError

TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, vocab_size=1001)
PROMPTS = [list(range(3, 40)), list(range(100, 130))]
QKV = "transformer.layers.0.attention.qkv."


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("qvalidate")
    make_hf_model("llama", root / "hf", **TINY)
    make_eagle_head(root / "hf", root / "head")
    calib = CalibOptions(prompts=PROMPTS)
    quantize_hf(root / "hf", root / "fp8", "fp8", "fp8", calib, dtype="float16")
    quantize_eagle(root / "hf", root / "head", root / "eagle", "fp8", "fp8", calib, dtype="float16", num_eagle_layers=2)
    return root


def damaged(written, tmp_path, which: str, tensors=None, config=None):
    ckpt = tmp_path / which
    shutil.copytree(written / which, ckpt)
    if tensors:
        t = load_file(str(ckpt / "rank0.safetensors"))
        tensors(t)
        save_file(t, str(ckpt / "rank0.safetensors"))
    if config:
        cfg = json.loads((ckpt / "config.json").read_text())
        config(cfg)
        (ckpt / "config.json").write_text(json.dumps(cfg))
    return ckpt


def test_written_checkpoints_validate(written):
    assert validate_checkpoint(written / "fp8").quant_algo == "FP8"
    assert validate_checkpoint(written / "eagle").kv_cache_quant_algo == "FP8"


@pytest.mark.parametrize("which, tensors, config, needle", [
    ("fp8", lambda t: t.update({QKV + "weight": t[QKV + "weight"].to(torch.float16)}), None,
     f"'{QKV}weight' is torch.float16, expected torch.float8_e4m3fn (quant_algo FP8)"),
    ("fp8", lambda t: t.update({QKV + "weights_scaling_factor": t[QKV + "weights_scaling_factor"].half()}), None,
     f"'{QKV}weights_scaling_factor' is torch.float16, expected torch.float32"),
    ("fp8", lambda t: t.update({QKV + "activation_scaling_factor": torch.ones(())}), None,
     f"'{QKV}activation_scaling_factor' has shape [], expected [1]"),
    ("fp8", lambda t: t.pop("transformer.layers.1.attention.kv_cache_scaling_factor"), None,
     "missing tensor 'transformer.layers.1.attention.kv_cache_scaling_factor'"),
    ("fp8", lambda t: t.update({"lm_head.weights_scaling_factor": torch.ones(1)}), None,
     "unexpected tensor 'lm_head.weights_scaling_factor'"),
    ("fp8", None, lambda c: c["quantization"].update(kv_cache_quant_algo=None),
     "unexpected tensor 'transformer.layers.0.attention.kv_cache_scaling_factor'"),
    ("fp8", None, lambda c: c["quantization"].update(exclude_modules=["*vocab_embedding"]),
     "does not exclude 'lm_head'"),
    ("fp8", None, lambda c: c["quantization"].update(quant_method="modelopt"),
     "quantization.quant_method is not a TensorRT-LLM QuantConfig field"),
    ("fp8", None, lambda c: c["quantization"].update(quant_algo="NVFP4"), "quant_algo='NVFP4'"),
    ("fp8", None, lambda c: c["quantization"].update(quant_algo="W8A8_SQ_PER_CHANNEL"),
     "missing tensor 'transformer.layers.0.attention.dense.prequant_scaling_factor'"),
    ("fp8", None, lambda c: c["quantization"].update(quant_algo="W4A16_AWQ", group_size=128),
     "pre_quant_scale=None: trtspec writes and checks symmetric AWQ with pre-quant scales only"),
    ("eagle", None, lambda c: c["eagle_net_config"].update(quantization={"quant_algo": None}),
     "eagle_net_config.quantization"),
    ("eagle", None, lambda c: [q.update(exclude_modules=["lm_head"])  # what ModelOpt writes
                               for q in (c["quantization"], c["eagle_net_config"]["quantization"])],
     "does not exclude 'eagle_nets.0.lm_head'"),
])
def test_damage_is_named(written, tmp_path, which, tensors, config, needle):
    ckpt = damaged(written, tmp_path, which, tensors, config)
    with pytest.raises(TrtspecError) as e:
        validate_checkpoint(ckpt)
    assert needle in str(e.value)
