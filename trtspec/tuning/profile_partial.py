"""The partial file of an unfinished profile: each workload's samples as soon as it is done.

A profile of real models runs for tens of minutes; without this, an interruption loses all of it.
After each workload the profiler rewrites `PARTIAL` atomically with the samples finished so far and
the hash of everything that decides them (the measurement conditions: checkpoints, quantization,
dtype, workload manifests with their sample ids and file hashes, max_k, tree_top_k, version, the
profile schema the samples are recorded for; and `resume_key`: the models' files and the devices).
A rerun with the same inputs reuses the finished workloads; a partial file from other inputs (or an
unreadable one) is ignored and overwritten. profile.json itself is unchanged by this.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..fsutil import fingerprint, write_text_atomic

FORMAT = "trtspec-profile-partial/1"


def partial_path(out: Path) -> Path:
    """profile.json -> profile.partial.json, next to it."""
    out = Path(out)
    return out.with_name(f"{out.stem}.partial.json")


def conditions_hash(conditions: dict) -> str:
    return hashlib.sha256(json.dumps(conditions, sort_keys=True, default=str).encode()).hexdigest()


def resume_key(ckpt: Path, draft: str | None, eagle3_head: str | None, devices) -> dict:
    """What the conditions name only by path: the content of the checkpoints and head (fsutil.fingerprint)
    and the devices. A cut profile followed by a re-converted or re-quantized checkpoint, a derived
    draft of other layers or a retrained head (all written to the same paths) must start afresh, not
    resume with samples of the models that were there before; so must one moved to another device."""
    paths = {"target": ckpt, "draft": draft, "eagle3_head": eagle3_head}
    return {"files": {k: fingerprint(Path(p)) for k, p in paths.items() if p is not None},
            "devices": [str(d) for d in devices]}


def load_partial(path: Path | None, digest: str, progress=None) -> dict[str, list[dict]]:
    """The finished workloads' samples recorded in `path` for these conditions ({} when none)."""
    if path is None or not Path(path).is_file():
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        ok = data["format"] == FORMAT and data["conditions_sha256"] == digest
        workloads = data["workloads"] if ok else {}
    except (OSError, ValueError, KeyError, TypeError):
        ok, workloads = False, {}
    if not ok or not isinstance(workloads, dict):
        if progress:
            progress(f"ignoring {path}: written for other inputs (or unreadable); profiling from the start")
        return {}
    return workloads


def save_partial(path: Path | None, digest: str, workloads: dict[str, list[dict]]) -> None:
    if path is not None:
        write_text_atomic(path, json.dumps({"format": FORMAT, "conditions_sha256": digest,
                                            "workloads": workloads}) + "\n")
