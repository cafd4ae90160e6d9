"""Offline self-check of a TRT-LLM checkpoint, without TensorRT-LLM (trtllm.md §10.3).

From `config.json` alone we recompute the tensor names, per-rank shapes and dtype that
TRT-LLM's model classes will ask for, and compare them with every `rank{r}.safetensors`. TRT-LLM
fails on a missing tensor, only warns on an extra one, and silently changes the engine's precision
on a dtype mismatch (§2.5); all three are errors here.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TrtspecError
from .eagle import eagle_plans
from .layout import TensorPlan, decoder_plans
from .trtllm_ckpt import TrtllmCheckpoint, load_checkpoint
from .writer import TORCH_DTYPES


def expected_plans(ckpt: TrtllmCheckpoint) -> list[TensorPlan]:
    if ckpt.is_eagle:
        return eagle_plans(ckpt.spec, ckpt.eagle_spec, int(ckpt.config.get("num_eagle_layers", 1)))
    return decoder_plans(ckpt.spec, bool(ckpt.config.get("use_parallel_embedding", False)))


def validate_checkpoint(path: Path) -> TrtllmCheckpoint:
    """Raise TrtspecError on the first tensor that TRT-LLM would reject or misread."""
    ckpt = load_checkpoint(path)
    if ckpt.dtype not in TORCH_DTYPES:
        raise TrtspecError(f"{path / 'config.json'}: field 'dtype' is {ckpt.dtype!r}, expected one of {list(TORCH_DTYPES)}")
    if ckpt.config.get("quantization", {}).get("quant_algo"):
        raise TrtspecError(f"{path / 'config.json'}: quantized checkpoints are not validated yet")
    dtype = TORCH_DTYPES[ckpt.dtype]
    plans = {p.name: p for p in expected_plans(ckpt)}
    for r, rank in enumerate(ckpt.ranks):
        f = path / f"rank{r}.safetensors"
        missing = sorted(set(plans) - set(rank))
        if missing:
            raise TrtspecError(f"{f}: missing tensor '{missing[0]}' ({len(missing)} missing in all)")
        extra = sorted(set(rank) - set(plans))
        if extra:
            raise TrtspecError(f"{f}: unexpected tensor '{extra[0]}' (not part of a {ckpt.config['architecture']} "
                               "with this config.json)")
        for name, plan in plans.items():
            want = plan.shard.rank_shape(plan.shape, ckpt.tp)
            info = rank[name]
            if info.shape != want:
                raise TrtspecError(f"{f}: tensor '{name}' has shape {list(info.shape)}, expected {list(want)}")
            if info.dtype != dtype:
                raise TrtspecError(f"{f}: tensor '{name}' is {info.dtype}, expected {dtype} (config.json dtype)")
    return ckpt
