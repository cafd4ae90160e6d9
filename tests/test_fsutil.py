"""Atomic writers clean the temporary siblings of writers that died, and only those."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trtspec.fsutil import atomic_dir, remove_stale_siblings, write_text_atomic
from tiny_models import make_hf_model, save_tiny_tokenizer

TRTSPEC = str(Path(sys.executable).with_name("trtspec"))


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def siblings(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.tmp-"))


def test_next_write_removes_a_dead_writers_siblings_only(tmp_path):
    out = tmp_path / "ckpt"
    stale_dir = tmp_path / f".ckpt.tmp-{dead_pid()}-abc123_x"
    stale_dir.mkdir()
    (stale_dir / "rank0.safetensors").write_bytes(b"x" * 100)
    live = tmp_path / f".ckpt.tmp-{os.getpid()}-live1"  # a live process (this one) is writing it
    live.mkdir()
    other_target = tmp_path / f".ckpt2.tmp-{dead_pid()}-zz"  # another target's sibling
    other_target.mkdir()
    old_style = tmp_path / ".ckpt.tmp-k3j2h1"  # not our pid pattern: never judged
    old_style.mkdir()
    with atomic_dir(out) as tmp:
        assert tmp.name.startswith(f".ckpt.tmp-{os.getpid()}-")
        (tmp / "config.json").write_text("{}")
    assert (out / "config.json").is_file()
    assert not stale_dir.exists()
    assert live.is_dir() and other_target.is_dir() and old_style.is_dir()


def test_write_text_atomic_removes_a_dead_writers_file(tmp_path):
    out = tmp_path / "profile.json"
    stale = tmp_path / f".profile.json.tmp-{dead_pid()}-q1w2"
    stale.write_text("half")
    write_text_atomic(out, "{}\n")
    assert out.read_text() == "{}\n" and siblings(out) == []


def test_a_locked_sibling_is_kept_even_when_its_pid_looks_dead(tmp_path):
    """A writer in another PID namespace has a pid we cannot see; its flock still protects it."""
    import fcntl

    sib = tmp_path / f".ckpt.tmp-{dead_pid()}-ns1"
    sib.mkdir()
    fd = os.open(sib, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        holder = subprocess.run([sys.executable, "-c", "import sys; from trtspec.fsutil import remove_stale_siblings;"
                                 "print(len(remove_stale_siblings(sys.argv[1])))", str(tmp_path / "ckpt")],
                                capture_output=True, text=True, check=True)
        assert holder.stdout.strip() == "0" and sib.is_dir()
    finally:
        os.close(fd)
    assert remove_stale_siblings(tmp_path / "ckpt") == [sib] and not sib.exists()


def aged(path: Path, seconds: float) -> Path:
    """Set the mtime of `path` and everything in it `seconds` in the past."""
    then = time.time() - seconds
    for p in [*path.rglob("*"), path] if path.is_dir() else [path]:
        os.utime(p, (then, then), follow_symlinks=False)
    return path


def test_old_style_siblings_of_the_target_are_removed_once_quiet(tmp_path):
    """Earlier versions named siblings `.NAME.tmp-RANDOM` (tempfile's 8 characters, no PID, no lock):
    the next write of the same target removes those that have not changed for OLD_STYLE_QUIET_S,
    and nothing else (fresh ones, other targets' ones, names tempfile never makes)."""
    from trtspec.fsutil import OLD_STYLE_QUIET_S

    hour = OLD_STYLE_QUIET_S + 60
    stale = tmp_path / ".ckpt.tmp-k3j2h1_9"
    stale.mkdir()
    (stale / "rank0.safetensors").write_bytes(b"x" * 100)
    aged(stale, hour)
    stale_file = tmp_path / ".profile.json.tmp-a1b2c3d4"
    stale_file.write_text("half")
    aged(stale_file, hour)
    fresh = tmp_path / ".ckpt.tmp-q9w8e7r6"  # an old-version writer may still be at it
    fresh.mkdir()
    inner_change = tmp_path / ".ckpt.tmp-z0z0z0z0"  # the directory is old, a file in it was just written
    inner_change.mkdir()
    (inner_change / "rank1.safetensors").write_bytes(b"y")
    os.utime(inner_change, (time.time() - hour,) * 2)
    others = [tmp_path / ".ckpt2.tmp-k3j2h1_9", tmp_path / ".ckpt.tmp-K3J2H1_9", tmp_path / ".ckpt.tmp-k3j2h1_99",
              tmp_path / ".ckpt.tmp-k3j2-1_9", tmp_path / "ckpt.tmp-k3j2h1_9"]
    for o in others:
        o.mkdir()
        aged(o, hour)
    with atomic_dir(tmp_path / "ckpt") as tmp:
        (tmp / "config.json").write_text("{}")
    write_text_atomic(tmp_path / "profile.json", "{}\n")
    assert not stale.exists() and not stale_file.exists()
    assert fresh.is_dir() and inner_change.is_dir() and all(o.is_dir() for o in others)


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    root = tmp_path_factory.mktemp("killed")
    # big enough that writing the checkpoint takes a while (the kill must land mid-write)
    make_hf_model("llama", root / "hf", vocab_size=32000, hidden_size=256, intermediate_size=512)
    save_tiny_tokenizer(root / "hf", vocab_size=32000)
    with open(root / "chat.jsonl", "w") as f:
        for i in range(8):
            f.write(json.dumps({"prompt": " ".join(f"t{3 + (i * 7 + j) % 900}" for j in range(40))}) + "\n")
    return root


def kill_while_writing(args: list[str], out: Path, attempts: int = 3) -> None:
    """Start `trtspec ARGS`, kill -9 it as soon as its temporary sibling appears; retried when the
    run happened to finish before the kill landed."""
    for _ in range(attempts):
        proc = subprocess.Popen([TRTSPEC, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while proc.poll() is None and not siblings(out):
                time.sleep(0.001)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait()
        if proc.returncode == -signal.SIGKILL and siblings(out):
            assert not out.exists()
            return
        if out.exists():
            import shutil

            shutil.rmtree(out)
    pytest.fail(f"trtspec {args[0]} finished before it could be killed mid-write")


@pytest.mark.parametrize("stage", ["convert", "quantize"])
def test_kill_9_then_rerun_leaves_no_litter(tiny_hf, tmp_path, stage):
    out = tmp_path / "ckpt"
    args = [stage, "--hf", str(tiny_hf / "hf"), "--out", str(out)]
    if stage == "quantize":
        args += ["--format", "fp8", "--calib", f"chat={tiny_hf / 'chat.jsonl'}", "--calib-samples", "4",
                 "--calib-seq-len", "32", "--no-report"]
    kill_while_writing(args, out)
    rerun = subprocess.run([TRTSPEC, *args], capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert rerun.returncode == 0, rerun.stderr
    assert (out / "config.json").is_file()
    assert siblings(out) == []
