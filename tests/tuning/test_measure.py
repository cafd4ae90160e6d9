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
        assert torch.cuda.get_device_name(0) in table.device
    else:
        assert table.device.startswith(f"torch {torch.__version__} cpu, ")
    want = "bfloat16" if dtype or device == "cuda" else None  # the GPU default is bfloat16
    assert table.device.endswith(f", {want}") if want else "float" not in table.device
