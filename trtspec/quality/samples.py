"""Which prompts a quality report may use (held out from calibration) and what the checkpoint says
about its own quantization (the manifest's calibration ids and mixed-precision record)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..fsutil import read_json
from ..runtime.generate import resolve_pair
from ..runtime.hf_weights import quantization_record
from ..workloads import base_set
from ..workloads.sample import select


def _base_id(sample_id: str) -> str:
    return re.sub(r"#turn\d+$", "", str(sample_id))


def calibration_ids(ckpt: Path) -> dict[str, set[str]]:
    """Calibration sample ids (record ids, turn suffix dropped) per source, from the checkpoint's
    `trtspec.json` (a pair directory's target/, or the checkpoint itself). Empty when not recorded.
    Keyed by base set (workloads.base_set): code-edit's HumanEval/N quotes humaneval's HumanEval/N."""
    target, _ = resolve_pair(Path(ckpt), None)
    path = Path(target) / "trtspec.json"
    if not path.is_file():
        return {}
    calib = (read_json(path, "trtspec.json manifest").get("options") or {}).get("calibration") or {}
    out: dict[str, set[str]] = {}
    for src in calib.get("sources") or []:
        out.setdefault(base_set(str(src.get("source"))), set()).update(_base_id(i) for i in src.get("ids") or [])
    return out


def held_out_samples(workload, calib_ids: dict[str, set[str]], samples: int | None, seed: int):
    """(samples drawn from the held-out ones, held_out flag, number of calibration samples excluded)."""
    used = calib_ids.get(base_set(workload.source), set())
    held = [s for s in workload.samples if _base_id(s.id) not in used]
    excluded = len(workload.samples) - len(held)
    pool, flag = (held, True) if held else (list(workload.samples), False)
    if not held:
        print(f"warning: workload {workload.name} ({workload.source}): every sample was used for calibration; "
              "reporting on calibration prompts (held_out: false)", file=sys.stderr)
    return select(pool, f"workload {workload.name!r}", None, samples, seed), flag, excluded


def mixed_precision(ckpt: Path) -> dict | None:
    """What `trtspec quantize --exclude/--keep-sensitive` kept in the model dtype (the manifest's
    options.mixed_precision, sensitivity scores left out), or None for a uniform checkpoint."""
    path = Path(ckpt) / "trtspec.json"
    if not path.is_file():
        return None
    mixed = (read_json(path, "trtspec.json manifest").get("options") or {}).get("mixed_precision")
    if not mixed:
        return None
    sens = mixed.get("sensitivity") or {}
    return {k: mixed.get(k) for k in ("excluded_gemms", "total_gemms", "excluded_linears", "exclude_patterns",
                                      "keep_sensitive")} | {"sensitivity_kept": sens.get("kept")}


def quant_block(ckpt: Path) -> dict:
    """The checkpoint's quantization (either format: runtime.hf_weights.quantization_record)."""
    return quantization_record(ckpt) if (Path(ckpt) / "config.json").is_file() else {}
