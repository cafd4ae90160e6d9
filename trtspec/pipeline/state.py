"""`OUT/run-manifest.json`: what each stage last produced, and from what.

Why hashes of inputs rather than timestamps: a recipe edit that changes nothing a stage reads (say
the perf concurrency) must not re-run a 2-minute quantization, and an edit that does (the draft
layers) must re-run everything after it. A stage's input hash is sha256 over

- its own recipe section(s) (canonical JSON),
- fingerprints of the external files it reads (HF directories, prompt files, cost tables),
- for every stage it reads: that stage's input hash and a fingerprint of its outputs as they are now.

The last item is what propagates changes downstream: a re-run upstream stage has a new input hash,
and an output edited by hand changes its fingerprint, so every reader re-runs.

Fingerprints (fsutil.fingerprint) hash the content of files up to 16 MiB and (size, mtime) of larger
ones: checkpoints of an 8B model are tens of GB and re-reading them on every `trtspec run` would cost
minutes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..fsutil import read_json, write_text_atomic

MANIFEST = "run-manifest.json"
SCHEMA = "trtspec.run/1"


# The code a stage's output depends on besides its inputs: a new release of trtspec or of a library it
# runs (ModelOpt's calibration, transformers' model code, torch's kernels) re-runs the stages. These are
# installed versions: an edit to an editable checkout between releases does not count.
CODE_PACKAGES = ("trtspec", "torch", "transformers", "nvidia-modelopt")


def code_versions() -> dict[str, str | None]:
    """{package: installed version or None}, from the installed metadata (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in CODE_PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RunManifest:
    """The per-stage records of one output directory, written atomically after every stage."""

    def __init__(self, out: Path, recipe_path: Path):
        self.path = Path(out) / MANIFEST
        self.data = {"schema": SCHEMA, "recipe": str(Path(recipe_path).resolve()), "stages": {}}
        if self.path.is_file():
            old = read_json(self.path, "run manifest")
            if isinstance(old, dict) and old.get("schema") == SCHEMA and isinstance(old.get("stages"), dict):
                self.data["stages"] = old["stages"]

    def get(self, stage: str) -> dict | None:
        return self.data["stages"].get(stage)

    def record(self, stage: str, entry: dict) -> None:
        self.data["stages"][stage] = entry
        self.save()

    def forget(self, stage: str) -> None:
        if self.data["stages"].pop(stage, None) is not None:
            self.save()

    def save(self) -> None:
        write_text_atomic(self.path, json.dumps(self.data, indent=2) + "\n")


def outputs_exist(entry: dict | None) -> bool:
    return bool(entry) and entry.get("status") == "ran" and all(Path(p).exists() for p in entry.get("outputs", []))
