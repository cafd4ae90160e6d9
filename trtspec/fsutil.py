"""Atomic output directories and content hashes.

Every stage writes into a temporary sibling of its output directory and renames it into place at
the end, so an interrupted or failed run never leaves a half-written artifact behind.

A run killed outright (kill -9, OOM) cannot delete its sibling, so the next atomic write of the same
target does: siblings are named `.NAME.tmp-PID-RANDOM` and stay locked (flock) while their writer
lives, and a sibling is removed only when its name has our pattern, its PID is not a live process
and its lock can be taken (the lock also covers a writer in another PID namespace).

Versions before that named siblings `.NAME.tmp-RANDOM` (tempfile's 8 characters, no PID, no lock),
and a kill -9 of those left litter no rerun removed. They are removed too, by the same next write
of the same target, but with the only evidence such a sibling offers: nothing in it has changed for
OLD_STYLE_QUIET_S (and its lock is free). Current writers never create that name, so a sibling
of that form belongs to a run of an older trtspec, and one quiet for an hour is not being written.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
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
    if not probe.is_dir():
        raise TrtspecError(f"{out}: cannot write here ({probe} is a file, not a directory)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise TrtspecError(f"{out}: cannot write here ({probe} is not writable)")


def check_inputs_kept(out: Path, inputs: dict[str, Path | None]) -> None:
    """Refuse an output directory that is, or holds, one of `inputs` ({argument name: path}):
    replacing it (overwrite) would delete that input. Errors name the argument in backticks."""
    target = Path(out).resolve()
    for name, path in inputs.items():
        if path is not None and (target == Path(path).resolve() or target in Path(path).resolve().parents):
            raise TrtspecError(f"`{name}`: {path} is or lies inside the output directory {out}, which `overwrite` "
                               "would replace (deleting it); write the output elsewhere")


OLD_STYLE_QUIET_S = 3600.0  # an old-style sibling (no PID, no lock) untouched this long is stale
_OLD_STYLE_SUFFIX = r"[a-z0-9_]{8}"  # tempfile's random names: 8 of [a-z0-9_], never a '-'


def _tmp_prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


def _last_change(entry: Path) -> float:
    """The newest mtime of `entry` and (a directory) everything in it, links not followed."""
    newest = entry.lstat().st_mtime
    if entry.is_dir():
        for root, dirs, files in os.walk(entry):
            for name in dirs + files:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def _stale(entry: Path, pid: str | None, now: float) -> bool:
    """Whether a sibling's writer is gone, judged before its lock: a PID that is not alive (current
    names), or no change for OLD_STYLE_QUIET_S (old-style names, which carry no PID)."""
    if pid is not None:
        return not _pid_alive(int(pid))
    try:
        return now - _last_change(entry) >= OLD_STYLE_QUIET_S
    except OSError:  # vanished meanwhile
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _lock(path: Path, blocking: bool = True) -> int | None:
    """An exclusive flock on `path` (file or directory): its fd, or None when another process holds it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def remove_stale_siblings(target: Path) -> list[Path]:
    """Delete the temporary siblings of `target` left by writers that died (see the module docstring).

    Only `.NAME.tmp-PID-RANDOM` entries whose PID is not alive, and old-style `.NAME.tmp-RANDOM`
    entries quiet for OLD_STYLE_QUIET_S, are removed, and only when their lock is free; a sibling
    being written by any live process is left alone. Returns what was removed."""
    target = Path(target)
    pattern = re.compile(re.escape(_tmp_prefix(target)) + r"(?:(\d+)-[A-Za-z0-9_]+|" + _OLD_STYLE_SUFFIX + ")")
    removed, now = [], time.time()
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if not m or entry.is_symlink() or not _stale(entry, m.group(1), now):
            continue
        try:
            fd = _lock(entry, blocking=False)
        except OSError:  # vanished meanwhile, or unreadable: not ours to judge
            continue
        if fd is None:
            continue
        try:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
        finally:
            os.close(fd)
    return removed


def _tmp_sibling(target: Path, make) -> tuple[Path, int]:
    """Clean `target`'s stale siblings, then create (with `make`, mkdtemp or mkstemp) and lock a new one."""
    remove_stale_siblings(target)
    tmp = make(prefix=f"{_tmp_prefix(target)}{os.getpid()}-", dir=target.parent)
    return Path(tmp), _lock(Path(tmp))


def _mkstemp_path(**kw) -> str:
    fd, tmp = tempfile.mkstemp(**kw)
    os.close(fd)
    return tmp


@contextlib.contextmanager
def atomic_dir(out: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success rename it to `out`, on failure delete it."""
    out = Path(out)
    check_output_dir(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp, lock = _tmp_sibling(out, tempfile.mkdtemp)
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the artifact gets ordinary permissions
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(lock)


def check_output_file(path: Path) -> None:
    """Refuse an output file path that is a directory or lies under a file (call it before a long
    run, so the run does not fail only when it writes)."""
    path = Path(path)
    if path.is_dir():
        raise TrtspecError(f"{path}: is a directory (expected a file path)")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise TrtspecError(f"{path}: cannot write here ({blocker} is a file, not a directory)")


def write_text_atomic(path: Path, text: str) -> None:
    """Write a file through a temporary sibling and a rename: readers never see half a file."""
    path = Path(path)
    check_output_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, lock = _tmp_sibling(path, _mkstemp_path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(lock)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def read_text(path: Path, what: str, syntax: str = "text") -> str:
    """A UTF-8 input file's text; every way reading it fails is one line naming the path (`what` the
    file is, `syntax` what it should parse as)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: a file given for its folder
        raise TrtspecError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise TrtspecError(f"{path}: is a directory (expected the {what})") from None
    except OSError as e:
        raise TrtspecError(f"{path}: cannot read the {what} ({e.strerror})") from None
    except UnicodeDecodeError:
        raise TrtspecError(f"{path}: not valid {syntax} (not UTF-8 text)") from None


def read_json(path: Path, what: str = "JSON file") -> dict:
    text = read_text(path, what, "JSON")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TrtspecError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


# Files larger than this are fingerprinted by (size, mtime), not content (pipeline/state.py says why).
CONTENT_LIMIT = 16 << 20


def _file_digest(path: Path, st: os.stat_result) -> str:
    if st.st_size > CONTENT_LIMIT:
        return f"size={st.st_size},mtime={st.st_mtime_ns}"
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def fingerprint(path: Path) -> str | None:
    """A digest of a file or a directory tree (relative names + file digests); None if missing.
    Symlinked folders are followed (an HF cache snapshot is links into blobs/), each real folder
    once; a file that cannot be read (a dangling link: a half-downloaded snapshot) is an error
    naming it, not a crash of the run."""
    path = Path(path)
    if not path.exists():
        return None
    h = hashlib.sha256()
    if path.is_file():
        h.update(_readable_digest(path).encode())
        return h.hexdigest()
    seen = set()
    for root, dirs, files in os.walk(path, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:  # a link back to a folder already hashed (a cycle)
            dirs.clear()
            continue
        seen.add(real)
        dirs.sort()
        for name in sorted(files):
            p = Path(root) / name
            h.update(f"{p.relative_to(path).as_posix()}\0{_readable_digest(p)}\n".encode())
    return h.hexdigest()


def _readable_digest(p: Path) -> str:
    try:
        return _file_digest(p, p.stat())
    except OSError as e:
        broken = p.is_symlink() and not p.exists()
        why = f"broken symbolic link to {os.readlink(p)}" if broken else f"cannot read it ({e.strerror})"
        raise TrtspecError(f"{p}: {why}; fix or remove it (an interrupted download?)") from None
