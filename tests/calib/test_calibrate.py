"""Calibration on a device (`quantization.device`, `trtspec quantize --device`).

The forward passes run where the option says; the calibrated model (weights and the quantizers'
statistics) comes back to the CPU, so the export is the same code whatever device calibrated. On
this CPU box the explicit `cpu` path must write the very checkpoint the default writes; the CUDA
variant compares a GPU-calibrated checkpoint with the CPU one where a GPU is present.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from cli_helpers import run_cli
from tiny_models import make_hf_model, save_tiny_tokenizer
from trtspec.calib.calibrate import calib_device
from trtspec.errors import TrtspecError

PROMPTS = "chat={}"


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    d = tmp_path_factory.mktemp("calib_device")
    make_hf_model("llama", d / "hf")
    save_tiny_tokenizer(d / "hf")
    lines = [json.dumps({"id": f"p{i}", "prompt": " ".join(f"t{w}" for w in range(5 + i, 30 + i))}) for i in range(4)]
    (d / "chat.jsonl").write_text("\n".join(lines) + "\n")
    return d


def quantize(capsys, hf, out, *extra):
    code, stdout, err = run_cli(capsys, "quantize", "--hf", hf / "hf", "--out", out, "--format", "fp8",
                                "--kv-cache", "fp8", "--calib", PROMPTS.format(hf / "chat.jsonl"),
                                "--calib-samples", 4, "--calib-seq-len", 16, "--no-report", *extra)
    return code, stdout + err


def test_explicit_cpu_writes_the_default_checkpoint(hf, tmp_path, capsys):
    torch.set_num_threads(1)
    for name, extra in (("default", ()), ("cpu", ("--device", "cpu"))):
        code, out = quantize(capsys, hf, tmp_path / name, *extra)
        assert code == 0, out
    a, b = (load_file(tmp_path / n / "rank0.safetensors") for n in ("default", "cpu"))
    assert a.keys() == b.keys() and all(torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)) for k in a)
    manifest = json.loads((tmp_path / "cpu" / "trtspec.json").read_text())
    assert manifest["options"]["calibration"]["device"] == "cpu"


def test_a_device_that_is_not_one_is_refused_by_flag(hf, tmp_path, capsys):
    code, out = quantize(capsys, hf, tmp_path / "x", "--device", "tpu")
    assert code != 0 and "--device" in out and "'tpu' is not a device" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_by_field():
    with pytest.raises(TrtspecError, match="quantization.device: 'cuda' but torch sees no CUDA device"):
        calib_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_calibration_matches_cpu(hf, tmp_path, capsys):
    for name in ("cpu", "cuda"):
        code, out = quantize(capsys, hf, tmp_path / name, "--device", name)
        assert code == 0, out
    cpu, gpu = (load_file(tmp_path / n / "rank0.safetensors") for n in ("cpu", "cuda"))
    assert cpu.keys() == gpu.keys()
    for k in cpu:
        if k.endswith("weights_scaling_factor") or not k.endswith("scaling_factor"):
            continue  # weights (and their scales) do not depend on where the activations were observed
        assert torch.allclose(cpu[k], gpu[k], rtol=1e-3), k  # activation / KV amax: float summation order only
    assert all(torch.equal(cpu[k].view(torch.uint8), gpu[k].view(torch.uint8))
               for k in cpu if k.endswith(".weight") or k.endswith("weights_scaling_factor"))
