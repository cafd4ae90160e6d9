"""Execute tensor plans into `rank{r}.safetensors`, one tensor in memory at a time, and write the
side files every trtspec checkpoint carries (tokenizer files, `trtspec.json` manifest)."""

from __future__ import annotations

import datetime as _dt
import shutil
from pathlib import Path

import torch
from rich.progress import Progress

from .. import __version__
from ..upstream import trtllm
from ..upstream.transformers import TOKENIZER_FILES
from ..errors import TrtspecError
from ..fsutil import sha256_file, write_json
from .layout import TensorPlan
from .safetensors_io import StreamingWriter, WeightSource
from .sharding import split

# config.json dtype -> torch dtype: the tensors a checkpoint is written in, and what the runtime computes in.
TORCH_DTYPES = {name: getattr(torch, name) for name in trtllm.DTYPES}
# HF tensors that are not weights of the network (buffers some exporters save).
IGNORABLE_SUFFIXES = ("rotary_emb.inv_freq",)
# Dtypes checked for NaN/Inf (float8 has no isfinite kernel; already-quantized tensors pass as they are).
_WIDE_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def validate_sources(plans: list[TensorPlan], sources: dict[str, WeightSource],
                     allowed_unused: dict[str, set[str]] | None = None) -> None:
    """Every HF tensor a plan reads must exist with the expected shape, and every tensor in the
    inputs must be used (an extra tensor means the config and the weights disagree)."""
    used: dict[str, set[str]] = {k: set() for k in sources}
    for plan in plans:
        for s in plan.sources:
            weights = sources[s.model]
            if s.name not in weights:
                raise TrtspecError(f"{weights.where}: missing tensor '{s.name}' (needed for '{plan.name}')")
            got = weights.shape(s.name)
            if tuple(got) != s.shape:
                raise TrtspecError(
                    f"{weights.where}: tensor '{s.name}' has shape {list(got)}, expected {list(s.shape)} "
                    "(from config.json)")
            check_weight_dtype(weights, s.name)
            used[s.model].add(s.name)
    for model, weights in sources.items():
        allowed = (allowed_unused or {}).get(model, set())
        extra = sorted(n for n in weights.names() - used[model] - allowed
                       if not n.endswith(IGNORABLE_SUFFIXES))
        if extra:
            raise TrtspecError(
                f"{weights.where}: unexpected tensor '{extra[0]}' ({len(extra)} unexpected in all; "
                "does config.json match the weights?)")


def check_weight_dtype(weights: WeightSource, name: str) -> None:
    """An unquantized HF weight is a float16/bfloat16/float32/float64 tensor: an integer, bool or
    float8 one (a corrupt file, or an already-quantized export) would be cast into nonsense."""
    dtype = weights.dtype(name)
    if dtype not in _WIDE_FLOATS:
        raise TrtspecError(f"{weights.where}: tensor '{name}' is {str(dtype).removeprefix('torch.')}, expected an "
                           "unquantized float16, bfloat16 or float32 weight")


def materialize(plan: TensorPlan, sources: dict[str, WeightSource], dtype: torch.dtype) -> torch.Tensor:
    """The full tensor of `plan` in its dtype (`plan.dtype`, else the model dtype `dtype`)."""
    dtype = plan.dtype or dtype
    if not plan.sources:
        return torch.zeros(plan.shape, dtype=dtype)
    parts = [finite(sources[s.model].get(s.name), s.name, sources[s.model].where, dtype) for s in plan.sources]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)


def finite(t: torch.Tensor, name: str, where: object, dtype: torch.dtype) -> torch.Tensor:
    """`t` in `dtype`, refusing NaN/Inf by tensor name. No tensor a Llama-family plan reads may be
    non-finite (masks with -inf are buffers, never read here), and TRT-LLM would build a NaN engine
    from one; a float32 value beyond float16's range that the cast turns into Inf is named too."""
    if t.dtype in _WIDE_FLOATS and not torch.isfinite(t).all():
        bad = int((~torch.isfinite(t)).sum())
        raise TrtspecError(f"{where}: tensor '{name}' has {bad} non-finite value(s) (NaN or Inf)")
    out = t.to(dtype)
    if out.dtype in _WIDE_FLOATS and not torch.isfinite(out).all():
        raise TrtspecError(f"{where}: tensor '{name}' has values beyond the range of {str(dtype).replace('torch.', '')} "
                           f"(largest magnitude {float(t.abs().max()):.4g}); convert with a wider dtype")
    return out


def write_ranks(out: Path, plans: list[TensorPlan], sources: dict[str, WeightSource], tp: int,
                dtype: str, label: str = "converting") -> None:
    """Write `rank{r}.safetensors` for r < tp. Each source tensor is read once; all rank files are
    written side by side so peak memory is one full tensor plus its shards."""
    tdtype = TORCH_DTYPES[dtype]
    writers = [StreamingWriter(out / f"rank{r}.safetensors",
                               [(p.name, p.dtype or tdtype, p.shard.rank_shape(p.shape, tp)) for p in plans])
               for r in range(tp)]
    try:
        with Progress(transient=True) as progress:
            task = progress.add_task(label, total=len(plans))
            for plan in plans:
                full = materialize(plan, sources, tdtype)
                for r, w in enumerate(writers):
                    w.write(plan.name, split(full, plan.shard, r, tp))
                del full
                progress.advance(task)
    finally:
        for w in writers:
            w._file.close()
    for w in writers:
        w.close()


def copy_tokenizer(src_dir: Path, out: Path, skip_existing: bool = False) -> list[str]:
    """Copy the tokenizer and generation-config files (TRT-LLM ignores them; trtspec uses them).
    skip_existing: leave files `out` already has (ModelOpt's HF export writes its own
    generation_config.json)."""
    copied = []
    for name in TOKENIZER_FILES:
        if skip_existing and (out / name).exists():
            continue
        if (Path(src_dir) / name).is_file():
            shutil.copy2(Path(src_dir) / name, out / name)
            copied.append(name)
    return copied


def source_record(role: str, model_dir: Path, weights: WeightSource) -> dict:
    files = [Path(model_dir) / "config.json", *weights.files()]
    return {"role": role, "path": str(Path(model_dir).resolve()),
            "sha256": {f.name: sha256_file(f) for f in files if f.is_file()}}


def write_manifest(out: Path, kind: str, sources: list[dict], options: dict) -> None:
    write_json(out / "trtspec.json", {
        "trtspec_version": __version__,
        "kind": kind,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "trtllm_version": trtllm.TRTLLM_VERSION,
        "sources": sources,
        "options": options,
    })
