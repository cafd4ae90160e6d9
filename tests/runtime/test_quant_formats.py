"""Quantized TRT-LLM checkpoints without a ModelOpt oracle: INT4 unpacking, TRT-LLM's weight-only
quantization (W8A16 built at load), clear errors for checkpoints the runtime cannot run, and every
format `trtspec quantize` writes runs. The runtime against ModelOpt's fake-quant model, and the
tolerances of that comparison, are test_quant_oracle.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.errors import TrtspecError
from trtspec.runtime.model import Decoder
from trtspec.runtime.quant import unpack_int4_rows, weight_only


# --- Format pieces without a ModelOpt oracle --------------------------------------------------------

def test_int4_unpacking_inverts_modelopt_packing():
    from modelopt.torch.export.quant_utils import pack_int4_in_uint8

    g = torch.Generator().manual_seed(0)
    q = torch.randint(-8, 8, (6, 256), generator=g).float()
    packed = pack_int4_in_uint8(q, torch.ones(6, 2), 128)  # scale 1: the codes themselves
    assert packed.shape == (3, 256)
    assert torch.equal(unpack_int4_rows(packed.view(torch.int8)).float(), q)
    assert torch.equal(unpack_int4_rows(packed).float(), q)


def test_weight_only_quantization_is_trtllm_symmetric_quantize():
    """TRT-LLM quantizes W8A16/W4A16 weights at build time per output channel with s = amax / 128
    (or / 8), C round (half away from zero) and clamp [-128, 127]; s is kept in the weight dtype."""
    s = 1.0 / 128
    w = torch.tensor([[1.0, 0.5, -0.25, 2.5 * s, -2.5 * s, 0.1],
                      [0.0] * 6])
    want = torch.tensor([[127 * s, 0.5, -0.25, 3 * s, -3 * s, round(0.1 * 128) * s], [0.0] * 6])
    assert torch.equal(weight_only(w, 8), want)
    w4 = torch.tensor([[8.0, 4.0, -8.0, 1.5, -1.4, 0.5]])  # s = 1
    assert torch.equal(weight_only(w4, 4), torch.tensor([[7.0, 4.0, -8.0, 2.0, -1.0, 1.0]]))


def _with_config(src: Path, dst: Path, **quant) -> Path:
    dst.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization"] = {**(cfg.get("quantization") or {}), **quant}
    (dst / "config.json").write_text(json.dumps(cfg))
    for f in src.glob("rank*.safetensors"):
        (dst / f.name).symlink_to(f)
    return dst


@pytest.fixture(scope="module")
def plain_ckpt(tmp_path_factory):
    from tiny_models import make_hf_model
    from trtspec.checkpoints.convert import convert_hf

    d = tmp_path_factory.mktemp("plain")
    make_hf_model("llama", d / "hf")
    convert_hf(d / "hf", d / "ckpt", dtype="float16")
    return d / "ckpt"


def test_w8a16_quantizes_float_weights_at_load(plain_ckpt, tmp_path):
    """A W8A16 checkpoint holds float weights (TRT-LLM quantizes them at build time): the runtime
    runs them quantized, close to but not equal to the float model."""
    plain = Decoder(load_checkpoint(plain_ckpt))
    wo = Decoder(load_checkpoint(_with_config(plain_ckpt, tmp_path / "w8a16", quant_algo="W8A16")))
    w = load_checkpoint(plain_ckpt).tensor("transformer.layers.0.mlp.proj.weight")
    assert torch.equal(wo.layers[0].proj.weight, weight_only(w, 8))
    assert torch.equal(wo.lm_head, plain.lm_head) and wo.layers[0].proj.act_quant is None
    prompt = torch.randint(3, 1001, (1, 12), generator=torch.Generator().manual_seed(0))
    a, _ = plain.forward(prompt, plain.new_cache(1, 12))
    b, _ = wo.forward(prompt, wo.new_cache(1, 12))
    assert 1e-4 < (a - b).abs().max() < 0.05 * a.abs().max()


@pytest.mark.parametrize("quant, match", [
    ({"quant_algo": "NVFP4"}, "quant_algo='NVFP4' is not supported by the PyTorch runtime"),
    ({"quant_algo": None, "kv_cache_quant_algo": "NVFP4"}, "kv_cache_quant_algo='NVFP4' is not supported"),
    ({"quant_algo": "FP8"}, "quant_algo='FP8' but tensor 'transformer.layers.0.attention.qkv.weight' is "
                            "float16, expected float8_e4m3fn"),
    ({"quant_algo": "W8A8_SQ_PER_CHANNEL"}, "'transformer.layers.0.attention.qkv.weight' is float16, expected int8"),
    ({"quant_algo": None, "kv_cache_quant_algo": "FP8"},
     "missing tensor 'transformer.layers.0.attention.kv_cache_scaling_factor'"),
    ({"quant_algo": "W4A16_AWQ", "has_zero_point": True}, "has_zero_point"),
])
def test_bad_quantized_checkpoints_are_clear_errors(plain_ckpt, tmp_path, quant, match):
    with pytest.raises(TrtspecError, match=match.replace("(", r"\(").replace("[", r"\[")):
        Decoder(load_checkpoint(_with_config(plain_ckpt, tmp_path / "bad", **quant)))


# --- Every format `trtspec quantize` writes runs (its bit-identity with ModelOpt's export is tested
#     in tests/calib/test_export.py, so test_quant_oracle.py's numerics carry over) ------------------

@pytest.fixture(scope="module")
def hf128(tmp_path_factory):
    from tiny_models import make_hf_model
    from trtspec.checkpoints.convert import convert_hf

    d = tmp_path_factory.mktemp("hf128")
    make_hf_model("llama", d / "hf", hidden_size=128, intermediate_size=256)  # AWQ groups of 128 fit
    convert_hf(d / "hf", d / "float", dtype="float32")
    return d


@pytest.mark.parametrize("fmt, kv", [("fp8", "fp8"), ("int8_sq", "int8"), ("w8a16", None), ("w8a16", "fp8"),
                                     ("w4a16_awq", None)])
def test_trtspec_quantize_checkpoints_run(hf128, fmt, kv):
    from trtspec.calib.quantize import CalibOptions, quantize_hf

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    calib = CalibOptions(prompts=[torch.randint(3, 1001, (24,), generator=g).tolist() for _ in range(4)])
    out = quantize_hf(hf128 / "hf", hf128 / f"{fmt}_{kv}", fmt=fmt, kv_cache=kv, calib=calib, dtype="float16")
    dec, ref = Decoder(load_checkpoint(out)), Decoder(load_checkpoint(hf128 / "float"))
    assert dec.scheme.quant_algo == load_checkpoint(out).config["quantization"]["quant_algo"]
    assert all((w.kv is not None) == (kv is not None) for w in dec.layers)
    assert not torch.equal(dec.layers[0].proj.weight, ref.layers[0].proj.weight)  # W8A16 too: built as TRT-LLM does
    prompts = torch.randint(3, 1001, (2, 16), generator=g)
    ours = dec.forward(prompts, dec.new_cache(2, 16))[0][..., :1001]
    want = ref.forward(prompts, ref.new_cache(2, 16))[0]
    assert 1e-3 < (ours - want).abs().mean() < 0.5 * want.std()  # quantized, and still the same model
