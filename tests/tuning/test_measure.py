"""measure-cost on a device: each timed forward is bracketed by a device synchronize (a GPU queues
kernels, so the wall clock alone would time their launch), and the cost table's `device` text names
the device (the GPU's name on CUDA) and a dtype other than float32."""

from __future__ import annotations

import pytest
import torch

from tiny_models import llama_ckpt
from trtspec.tuning import measure
from trtspec.tuning.options import MeasureConfig


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return llama_ckpt(tmp_path_factory.mktemp("measure"))


@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_timed_forwards_are_synchronized_and_the_device_is_named(ckpt, device, dtype, monkeypatch):
    synced = []
    real = measure.synchronize
    monkeypatch.setattr(measure, "synchronize", lambda d: (synced.append(d), real(d)))
    cfg = MeasureConfig(batches=[1, 2], num_tokens=[1, 3], context=4, repeats=2, warmup=1, device=device, dtype=dtype)
    table = measure.measure_runtime(ckpt, cfg=cfg)
    assert len(table.rows) == 4 and all(r.seconds > 0 for r in table.rows)
    assert len(synced) == 4 * 2 * 2 and {d.type for d in synced} == {device}  # before and after each timed run
    if device == "cuda":
        assert torch.cuda.get_device_name(0) in table.device and table.gpu in ("h100", "h200")
    else:
        assert table.device.startswith(f"torch {torch.__version__} cpu, ") and table.gpu == "cpu"
    want = "bfloat16" if dtype or device == "cuda" else None  # the GPU default is bfloat16
    assert table.device.endswith(f", {want}") if want else "float" not in table.device


def test_a_table_timed_on_a_gpu_is_fitted_from_that_gpus_preset(monkeypatch):
    """The preset the fit starts from: the CPU's (times add) on the CPU; on CUDA the H200's or, for
    any other GPU, the H100's (memory and compute overlap), whatever its name."""
    names = iter(["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: next(names))
    cuda = [torch.device("cuda", 0)]
    assert [measure.preset_for(cuda) for _ in range(3)] == ["h200", "h100", "h100"]
    assert measure.preset_for([torch.device("cpu")]) == "cpu"


def test_filling_the_context_computes_no_logits(tmp_path, monkeypatch):
    """The committed context is filled without logits (as the decoder's is): an EAGLE drafter's fill
    took batch x context x vocab float32 logits, 8 GB at batch 4, 4096 tokens, a 128k vocabulary."""
    from tiny_models import make_eagle_head, make_hf_model
    from trtspec.checkpoints.eagle import convert_eagle
    from trtspec.runtime.eagle_net import EagleNet

    make_hf_model("llama", tmp_path / "hf")
    make_eagle_head(tmp_path / "hf", tmp_path / "head")
    convert_eagle(tmp_path / "hf", tmp_path / "head", tmp_path / "eagle", dtype="float32")
    positions, real = [], EagleNet.logits
    def logits(self, hidden, level=0):
        positions.append(hidden.shape[1])
        return real(self, hidden, level)

    monkeypatch.setattr(EagleNet, "logits", logits)
    cfg = MeasureConfig(batches=[2], num_tokens=[1, 3], context=6, repeats=1, warmup=0)
    table = measure.measure_runtime(tmp_path / "eagle", cfg=cfg)
    assert table.roles() == {"target", "eagle"} and positions and max(positions) <= 3
