"""Atomic output directories and content hashes.

Every stage writes into a temporary sibling of its output directory and renames it into place at
the end, so an interrupted or failed run never leaves a half-written artifact behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import TrtspecError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_output_dir(out: Path, overwrite: bool = False) -> None:
    """Refuse a non-empty output directory (unless `overwrite`) or an unwritable parent."""
    if out.exists() and not out.is_dir():
        raise TrtspecError(f"{out}: output path exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise TrtspecError(f"{out}: output directory is not empty (expected a new or empty directory)")
    parent = out.parent if out.parent != Path("") else Path(".")
    probe = parent
    while not probe.exists():  # the nearest existing ancestor must be writable
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise TrtspecError(f"{out}: cannot write here ({probe} is not writable)")


@contextlib.contextmanager
def atomic_dir(out: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success rename it to `out`, on failure delete it."""
    out = Path(out)
    check_output_dir(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the artifact gets ordinary permissions
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write a file through a temporary sibling and a rename: readers never see half a file."""
    path = Path(path)
    if path.is_dir():
        raise TrtspecError(f"{path}: is a directory (expected a file path)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def read_json(path: Path, what: str = "JSON file") -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TrtspecError(f"{path}: {what} not found") from None
    except json.JSONDecodeError as e:
        raise TrtspecError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
