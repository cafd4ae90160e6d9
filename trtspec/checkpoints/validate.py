"""Offline self-check of a TRT-LLM checkpoint, without TensorRT-LLM (trtllm.md §10.3).

From `config.json` alone we recompute the tensor names, per-rank shapes and dtypes that
TRT-LLM's model classes will ask for, and compare them with every `rank{r}.safetensors`. TRT-LLM
fails on a missing tensor, only warns on an extra one, and silently changes the engine's precision
on a dtype mismatch (§2.5); all three are errors here. Quantized checkpoints (FP8, W8A8 SmoothQuant,
W8A16, W4A16 AWQ, FP8/INT8 KV cache) are checked against the layout in quant.py.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TrtspecError
from ..upstream.modelopt import LEGACY_KV_SCALE_SUFFIXES
from ..upstream.trtllm import EAGLE_CONFIG_DEFAULT_NUM_LAYERS
from .layout import TensorPlan, decoder_plans, eagle_plans, shard_for
from .quant import check_exclusions, check_gate_pairs, check_group_size, quant_plans
from .trtllm_ckpt import TrtllmCheckpoint, load_checkpoint
from .writer import TORCH_DTYPES


def expected_plans(ckpt: TrtllmCheckpoint) -> list[TensorPlan]:
    where = str(ckpt.path / "config.json")
    if ckpt.is_eagle:
        plans = eagle_plans(ckpt.spec, ckpt.eagle_spec, int(ckpt.config.get("num_eagle_layers", EAGLE_CONFIG_DEFAULT_NUM_LAYERS)))
        net_q = ckpt.config["eagle_net_config"].get("quantization") or {}
        top_q = ckpt.config.get("quantization") or {}
        quantized = any(q.get(k) for q in (top_q, net_q) for k in ("quant_algo", "kv_cache_quant_algo"))
        if quantized and net_q != top_q:
            raise TrtspecError(f"{where}: eagle_net_config.quantization {net_q} differs from the top-level "
                               f"quantization {top_q}; the EAGLE nets' attention takes its quant mode from it "
                               "(trtllm.md §4.6), so both must be the same block")
    else:
        plans = decoder_plans(ckpt.spec, bool(ckpt.config.get("use_parallel_embedding", False)))
    scheme = ckpt.quant
    scheme.check_written(where)
    check_exclusions(scheme, ckpt.config, where)
    check_group_size(plans, scheme, ckpt.tp, where)
    check_gate_pairs(plans, scheme, where)
    return quant_plans(plans, scheme, lambda n: shard_for(n, *ckpt.spec_for(n), scheme.quant_algo))


def validate_checkpoint(path: Path) -> TrtllmCheckpoint:
    """Raise TrtspecError on the first tensor that TRT-LLM would reject or misread."""
    path = Path(path)
    ckpt = load_checkpoint(path)
    if ckpt.dtype not in TORCH_DTYPES:
        raise TrtspecError(f"{path / 'config.json'}: field 'dtype' is {ckpt.dtype!r}, expected one of {list(TORCH_DTYPES)}")
    dtype = TORCH_DTYPES[ckpt.dtype]
    plans = {p.name: p for p in expected_plans(ckpt)}
    tolerated = LEGACY_KV_SCALE_SUFFIXES if ckpt.kv_cache_quant_algo else ()
    for r, rank in enumerate(ckpt.ranks):
        f = path / f"rank{r}.safetensors"
        missing = sorted(set(plans) - set(rank))
        if missing:
            raise TrtspecError(f"{f}: missing tensor '{missing[0]}' ({len(missing)} missing in all)")
        extra = sorted(n for n in set(rank) - set(plans) if not n.endswith(tolerated))
        if extra:
            raise TrtspecError(f"{f}: unexpected tensor '{extra[0]}' (not part of a {ckpt.config['architecture']} "
                               "with this config.json)")
        for name, plan in plans.items():
            want = plan.shard.rank_shape(plan.shape, ckpt.tp)
            info = rank[name]
            if info.shape != want:
                raise TrtspecError(f"{f}: tensor '{name}' has shape {list(info.shape)}, expected {list(want)}")
            want_dtype = plan.dtype or dtype
            if info.dtype != want_dtype:
                why = "config.json dtype" if plan.dtype is None else f"quant_algo {ckpt.quant_algo or ckpt.kv_cache_quant_algo}"
                raise TrtspecError(f"{f}: tensor '{name}' is {info.dtype}, expected {want_dtype} ({why})")
    return ckpt
