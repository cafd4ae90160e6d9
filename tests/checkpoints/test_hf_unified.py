"""The unified HF checkpoint view, and what our export carries for the pinned PyTorch backend
(the keys and tensors recorded in upstream.trtllm, "PyTorch backend: ModelOpt unified HF checkpoints")."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tiny_models import make_hf_model
from trtspec.calib.hf_export import quantize_hf_unified
from trtspec.calib.quantize import CalibOptions
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.hf_unified import HfUnifiedCheckpoint, LINEARS, load_hf_unified, open_checkpoint
from trtspec.checkpoints.trtllm_ckpt import TrtllmCheckpoint
from trtspec.errors import TrtspecError
from trtspec.runtime.model import Decoder
from trtspec.upstream import trtllm
from trtspec.upstream.modelopt import HF_QUANT_METHOD

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-unified")
    make_hf_model("llama", root / "hf")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 1000, (24,), generator=g).tolist() for _ in range(4)]
    quantize_hf_unified(root / "hf", root / "fp8kv", CalibOptions(prompts=prompts, samples=4), "fp8", "fp8")
    return root


def copy_of(exported, tmp_path):
    shutil.copytree(exported / "fp8kv", tmp_path / "c")
    return tmp_path / "c"


def test_export_carries_what_the_backend_reads(exported):
    d = exported / "fp8kv"
    q = json.loads((d / trtllm.HF_QUANT_CONFIG_FILE).read_text())["quantization"]
    assert {"quant_algo", "kv_cache_quant_algo", "exclude_modules"} <= set(q) <= {*trtllm.HF_QUANT_CONFIG_KEYS}
    assert q["quant_algo"] == "FP8" and q["quant_algo"] in trtllm.PYTORCH_QUANT_ALGOS
    assert q["kv_cache_quant_algo"] == "FP8" and "lm_head" in q["exclude_modules"]
    assert json.loads((d / "config.json").read_text())["quantization_config"]["quant_method"] == HF_QUANT_METHOD
    t = load_file(d / "model.safetensors")
    for i in range(2):
        for lin in LINEARS:
            p = f"model.layers.{i}.{lin}."
            assert t[p + "weight"].dtype == torch.float8_e4m3fn
            for s in trtllm.HF_FP8_LINEAR_TENSORS[1:]:
                assert t[p + s].dtype == torch.float32 and t[p + s].shape == ()
        for s in trtllm.HF_KV_SCALE_TENSORS:
            assert t[f"model.layers.{i}.self_attn.{s}"].shape == ()
    assert t["lm_head.weight"].dtype == torch.float16


def test_open_checkpoint_picks_the_format(exported, tmp_path):
    assert isinstance(open_checkpoint(exported / "fp8kv"), HfUnifiedCheckpoint)
    convert_hf(exported / "hf", tmp_path / "trt", dtype="float32")
    assert isinstance(open_checkpoint(tmp_path / "trt"), TrtllmCheckpoint)


@pytest.mark.parametrize("drop,expect", [
    ("model.layers.1.mlp.down_proj.input_scale", "missing tensor 'model.layers.1.mlp.down_proj.input_scale'"),
    ("model.layers.0.self_attn.v_proj.v_scale", "missing tensor 'model.layers.0.self_attn.v_proj.v_scale'"),
])
def test_missing_tensor_is_named(exported, tmp_path, drop, expect):
    d = copy_of(exported, tmp_path)
    t = load_file(d / "model.safetensors")
    del t[drop]
    save_file(t, d / "model.safetensors")
    with pytest.raises(TrtspecError, match=expect):
        load_hf_unified(d)


def test_wrong_dtype_is_named(exported, tmp_path):
    d = copy_of(exported, tmp_path)
    t = load_file(d / "model.safetensors")
    t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"].float()
    save_file(t, d / "model.safetensors")
    with pytest.raises(TrtspecError, match="'model.layers.0.mlp.up_proj.weight' is float32, expected float8_e4m3fn"):
        load_hf_unified(d)


def test_bad_quant_config_is_named(exported, tmp_path):
    d = copy_of(exported, tmp_path)
    (d / trtllm.HF_QUANT_CONFIG_FILE).write_text(json.dumps({"quant_algo": "FP8"}))
    with pytest.raises(TrtspecError, match="expected an object with a 'quantization' object"):
        load_hf_unified(d)


def test_runtime_refuses_other_formats_by_field(exported, tmp_path):
    d = copy_of(exported, tmp_path)
    qfile = d / trtllm.HF_QUANT_CONFIG_FILE
    cfg = json.loads(qfile.read_text())
    cfg["quantization"]["quant_algo"] = "FP8_BLOCK_SCALES"
    qfile.write_text(json.dumps(cfg))
    with pytest.raises(TrtspecError, match=r"hf_quant_config.json: quantization.quant_algo='FP8_BLOCK_SCALES' is not "):
        Decoder(load_hf_unified(d))


def test_tensors_checked_per_format(exported, tmp_path):
    """A config that names another format than the tensors carry is refused by tensor name."""
    d = copy_of(exported, tmp_path)
    qfile = d / trtllm.HF_QUANT_CONFIG_FILE
    cfg = json.loads(qfile.read_text())
    cfg["quantization"]["quant_algo"] = "W4A16_AWQ"
    qfile.write_text(json.dumps(cfg))
    with pytest.raises(TrtspecError, match="'model.layers.0.self_attn.q_proj.weight' is float8_e4m3fn, expected uint8"):
        load_hf_unified(d)


def test_cost_model_sees_the_same_model_in_both_formats(exported, tmp_path):
    """The tuner's cost model reads the view's TRT-LLM-vocabulary config: the HF FP8 + FP8-KV
    checkpoint and the TRT-LLM one of the same model and format give the same shape."""
    from trtspec.calib import CalibOptions as C, quantize_hf
    from trtspec.tuning.cost import shapes_from_checkpoint

    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 1000, (24,), generator=g).tolist() for _ in range(4)]
    quantize_hf(exported / "hf", tmp_path / "trt", fmt="fp8", kv_cache="fp8", calib=C(prompts=prompts, samples=4))
    hf, trt = shapes_from_checkpoint(exported / "fp8kv")["target"], shapes_from_checkpoint(tmp_path / "trt")["target"]
    assert hf.model_copy(update={"name": "m"}) == trt.model_copy(update={"name": "m"})
    assert hf.compute_dtype == "fp8"


def test_engine_flow_readers_name_the_format(exported):
    """trtllm-build plans and validation read TRT-LLM checkpoints only: one line saying what this is."""
    from trtspec.checkpoints.trtllm_ckpt import load_checkpoint

    with pytest.raises(TrtspecError, match=r"fp8kv: a ModelOpt unified HF checkpoint \(hf_quant_config.json\), for the "
                                           r"PyTorch backend; this needs a TensorRT-LLM checkpoint"):
        load_checkpoint(exported / "fp8kv")
