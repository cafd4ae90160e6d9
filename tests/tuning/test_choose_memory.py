"""What the drafter choice counts per served instance (tuning/choose.py gpu_weight_bytes): the
weights one GPU holds, by the same rule as builders.memory's estimate of a checkpoint."""

from __future__ import annotations

import pytest

from trtspec.builders.memory import checkpoint_weight_bytes
from trtspec.checkpoints.trtllm_ckpt import checkpoint_from_config
from trtspec.tuning.choose import GIB, gpu_weight_bytes
from trtspec.tuning.cost import shape_from_spec
from trtspec.tuning.synthetic import llama31_8b_shapes

from tests.builders.test_memory import LLAMA31_8B

AWQ = {"quant_algo": "W4A16_AWQ", "group_size": 128, "has_zero_point": False, "pre_quant_scale": True}
GPTQ = {"quant_algo": "W4A16_GPTQ", "group_size": 64, "has_zero_point": True}


def config(tp: int, quant: dict | None = None, **extra) -> dict:
    cfg = {**LLAMA31_8B, "mapping": {"world_size": tp, "tp_size": tp, "pp_size": 1}, **extra}
    return {**cfg, "quantization": quant} if quant is not None else cfg


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("quant, extra", [
    (None, {}),  # FP8 weights, bf16 embedding and lm_head
    (AWQ, {}), (GPTQ, {}), ({"quant_algo": "W4A16"}, {}), ({}, {"use_parallel_embedding": True}),
])
def test_an_instance_counts_what_builders_memory_counts_per_gpu(tmp_path, tp, quant, extra):
    """A Llama-3.1-8B-shaped target: the cost model's shape counts the bytes builders.memory counts
    for rank 0 of its checkpoint (embedding, lm_head, norms, group scales), at each tp."""
    cfg = config(tp, quant, **extra)
    ckpt = checkpoint_from_config(cfg, tmp_path)
    shape = shape_from_spec(ckpt.spec, cfg, "target", "t", "cfg")
    assert gpu_weight_bytes(shape) == pytest.approx(checkpoint_weight_bytes(ckpt), rel=1e-12)


def test_llama31_8b_fp8_is_its_weights_on_each_gpu():
    """Hand count: FP8 linears (1 byte) plus bf16 embedding, lm_head and norms; TP=2 halves every
    sharded tensor and keeps a whole embedding (use_parallel_embedding false) on each GPU."""
    target = llama31_8b_shapes()["target"]
    H, V, L = 4096, 128256, 32
    per_layer = H * (32 + 2 * 8) * 128 + H * H + 3 * H * 14336
    tp1 = L * per_layer + L * 2 * H * 2 + 2 * V * H * 2 + H * 2
    assert gpu_weight_bytes(target) == tp1 and tp1 / GIB == pytest.approx(8.46, abs=0.005)
    tp2 = L * per_layer / 2 + L * 2 * H * 2 + V * H * 2 + V * H * 2 / 2 + H * 2
    assert gpu_weight_bytes(target.model_copy(update={"tp": 2})) == tp2
