"""Running a plan: write `build_plan.json` + `build.sh`, and run `trtllm-build` when it is here.

The whole output directory is atomic (DESIGN.md "Atomic outputs"): everything, engines included,
is written into a temporary sibling and renamed into place only when every build succeeded and its
engine config was read back. A failed, timed-out or interrupted build leaves nothing at `out`.

Each `trtllm-build` runs in its own process group (it spawns per-rank worker processes with
`--workers`), with the output directory as its working directory (the plan's engine and timing-cache
paths are relative to it). Its output is streamed line by line to the caller and to
`logs/<engine>.log`. On timeout or Ctrl-C the whole group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import TrtspecError
from ..fsutil import atomic_dir, write_json
from ..upstream import trtllm
from .manifest import MANIFEST_FILE, EngineManifest, compare_with_plan, read_engine, to_dict
from .engine import EngineBuild
from .options import DEFAULT_BUILD_TIMEOUT_S
from .plan import BuildPlan
from .script import PLAN_FILE, write_plan_files

LineSink = Callable[[str, str], None]


@dataclass
class BuildResult:
    out: Path
    built: bool                                  # False: plan and script only
    manifests: list[EngineManifest] = field(default_factory=list)
    message: str = ""


def _print_line(name: str, line: str) -> None:
    print(f"[{name}] {line}", flush=True)


def find_trtllm_build() -> str | None:
    return shutil.which(trtllm.TRTLLM_BUILD)


def build(plan: BuildPlan, out: Path, dry_run: bool = False, timeout: float = DEFAULT_BUILD_TIMEOUT_S,
          overwrite: bool = False, on_line: LineSink | None = None, kill_grace: float = 10.0) -> BuildResult:
    """Write the plan to `out`; unless `dry_run` or without trtllm-build on PATH, build the engines
    and write `engine_manifest.json`. Raises TrtspecError on a failed or timed-out build."""
    out = Path(out)
    tool = None if dry_run else find_trtllm_build()
    sink = on_line or _print_line
    with atomic_dir(out, overwrite) as tmp:
        write_plan_files(plan, tmp)
        if tool is None:
            why = "--dry-run" if dry_run else f"{trtllm.TRTLLM_BUILD} is not on PATH"
            return BuildResult(out, False, message=(
                f"wrote {out / PLAN_FILE} and {out / 'build.sh'} ({why}); engines need an H100 host with "
                f"TensorRT-LLM {trtllm.TRTLLM_VERSION_LABEL}: run build.sh there (it expects the checkpoints at "
                f"the same absolute paths)"))
        (tmp / "logs").mkdir()
        for b in plan.builds:
            (tmp / b.engine_dir).mkdir(parents=True, exist_ok=True)
            run_one(tool, b, tmp, out, timeout, sink, kill_grace)
        manifests = []
        for b in plan.builds:
            m = read_engine(tmp / b.engine_dir, b.name, b.engine_dir)
            m.drift = compare_with_plan(m, b)
            manifests.append(m)
        write_json(tmp / MANIFEST_FILE, to_dict(manifests, PLAN_FILE))
    drift = [f"{m.name}: {d}" for m in manifests for d in m.drift]
    msg = f"built {', '.join(b.engine_dir for b in plan.builds)} under {out}; manifest {out / MANIFEST_FILE}"
    if drift:
        msg += "; the builder changed planned settings: " + "; ".join(drift)
    return BuildResult(out, True, manifests, msg)


def run_one(tool: str, b: EngineBuild, cwd: Path, out: Path, timeout: float, sink: LineSink,
            kill_grace: float) -> None:
    """Run one trtllm-build with exactly the plan's arguments; raise TrtspecError unless it exits 0."""
    argv = [tool, *b.argv()[1:]]
    tail: collections.deque[str] = collections.deque(maxlen=20)
    with open(cwd / "logs" / f"{b.name}.log", "w", encoding="utf-8") as log:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
                                    start_new_session=True)
        except OSError as e:
            raise TrtspecError(f"{tool}: cannot run ({e.strerror})") from None

        def pump() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.rstrip("\n")
                log.write(raw)
                log.flush()
                tail.append(line)
                sink(b.name, line)

        reader = threading.Thread(target=pump, name=f"trtllm-build-{b.name}", daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc, kill_grace)
            reader.join(5)
            raise TrtspecError(f"{trtllm.TRTLLM_BUILD} for the {b.name} engine timed out after {timeout:g} s; its "
                               f"process group was killed and nothing was written to {out}") from None
        except BaseException:
            kill_group(proc, kill_grace)
            raise
        kill_group(proc, 0)  # stragglers that outlived the leader would hold the pipe open
        reader.join(5)
    if rc != 0:
        last = next((t for t in reversed(tail) if t.strip()), "")
        how = f"was killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc}"
        raise TrtspecError(f"{trtllm.TRTLLM_BUILD} for the {b.name} engine {how} (last output: {last!r}); nothing "
                           f"was written to {out}")


def kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, wait `grace` seconds, then SIGKILL whatever is left of it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if sig == signal.SIGKILL and grace > 0:
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
