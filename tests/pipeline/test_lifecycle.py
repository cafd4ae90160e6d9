"""The lifecycle of `trtspec run` around its stages: where it may write, and what is left when it is
stopped from outside (a `kill`, `timeout`) or its server fails to start.

On test_runner.py's tiny models and recipe (a 2-layer target, its first layer as the draft, a JSONL
workload), without engines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import run_cli
from pipeline.test_runner import tiny, write_recipe  # noqa: F401 (tiny: the fixture)
from serve_helpers import procs_mentioning
from trtspec.errors import TrtspecError
from trtspec.pipeline.runner import run_recipe

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def stages(out: Path) -> dict:
    try:
        return json.loads((out / "run-manifest.json").read_text())["stages"]
    except (OSError, ValueError):
        return {}


def test_an_output_directory_inside_an_input_is_refused_before_any_work(tmp_path, capsys):
    """Inside the target, the run would fingerprint its own outputs as the target's: every stage
    would re-run on every run, and a stage could write over what it reads."""
    (tmp_path / "hf").mkdir()
    recipe, out = write_recipe(tmp_path, build=None), tmp_path / "hf" / "out"
    code, _, err = run_cli(capsys, "run", recipe, "--out", out, "--dry-run")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: --out: {out} is inside target ({tmp_path / 'hf'})"), err
    with pytest.raises(TrtspecError, match="inside target"):
        run_recipe(recipe, tmp_path / "hf")  # the input itself
    assert not out.exists() and list((tmp_path / "hf").iterdir()) == []


def test_sigterm_during_perf_stops_the_server(tiny, tmp_path):
    """`kill` (or `timeout`) of `trtspec run` while perf measures: the run ends non-zero, perf is not
    recorded as ran, and no tritonserver or python-backend stub outlives it (they run in a session
    of their own, which no signal to the run reaches)."""
    pytest.importorskip("tritonclient.grpc")
    perf = {"concurrency": [1], "requests": 500, "warmup": 0, "max_tokens": 64, "timeout_s": 60}
    recipe = write_recipe(tiny, build=None, triton={"flavor": "cpu", "start_timeout_s": 120, "drain_timeout_s": 1},
                          perf=perf)
    out = tmp_path / "out"
    log = open(tmp_path / "run.log", "w")  # a file, not a pipe: a full pipe would block the run's progress output
    proc = subprocess.Popen([sys.executable, "-c", "from trtspec.cli import main; main()", "run", str(recipe),
                             "--out", str(out)], stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        deadline = time.monotonic() + 300
        while stages(out).get("serve", {}).get("status") != "ran" and proc.poll() is None:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        assert proc.poll() is None, (tmp_path / "run.log").read_text()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        log_tail = (tmp_path / "run.log").read_text()[-3000:]
        assert code != 0, log_tail
        deadline = time.monotonic() + 10
        while procs_mentioning(str(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert procs_mentioning(str(out)) == [], f"processes outlived `trtspec run` (exit {code}):\n{log_tail}"
        assert stages(out)["perf"]["status"] in ("failed", "interrupted") and not (out / "perf").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()  # gone before the sweep below, which would otherwise find it (its group is ours)
        log.close()
        for pid in procs_mentioning(str(out)):  # what a failed assertion left: this test's server only
            try:
                if os.getpgid(pid) != os.getpgid(0):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_a_server_that_fails_to_start_shows_its_log_and_is_not_left_running(tiny, tmp_path, capsys):
    """The error stays one line naming the stage; what went wrong is in the server's log, whose first
    errors and last lines are printed before it on stderr (as `trtspec serve` does). The broken config is the
    first model polled: its error is far above the tail (the other models load and unload after it)."""
    pytest.importorskip("tritonclient.grpc")
    perf = {"concurrency": [1], "requests": 2, "warmup": 0, "max_tokens": 8, "timeout_s": 60}
    recipe = write_recipe(tiny, build=None, triton={"flavor": "cpu", "start_timeout_s": 120}, perf=perf)
    out = tmp_path / "out"
    run_recipe(recipe, out, until="triton")
    with open(out / "triton-repo" / "generate" / "config.pbtxt", "a") as f:
        f.write("not a config {{{\n")  # tritonserver refuses to load the repository
    code, stdout, err = run_cli(capsys, "run", recipe, "--out", out)
    log, error = err.strip().rsplit("\n", 1)  # the log block goes to stderr, as `trtspec serve` prints it
    assert code == 2 and error.startswith("error: stage serve failed: tritonserver exited with status"), err
    assert log.startswith("--- tritonserver log (first errors) ---") and log.endswith("\n---"), err
    assert "--- tritonserver log" not in stdout
    errors = log.split("--- tritonserver log (first errors) ---")[1].split("--- tritonserver log (last lines)")[0]
    assert "Poll failed for model directory 'generate'" in errors, err
    s = stages(out)
    assert s["serve"]["status"] == "failed" and s["triton"]["status"] == "ran" and "perf" not in s
    assert procs_mentioning(str(out)) == []


def test_an_interrupted_run_stops_the_server_then_prints_its_summary_and_exits_130(tiny, tmp_path, capsys,
                                                                                   monkeypatch):
    """Ctrl-C (or SIGTERM, which takes its path) in a stage: the server the run started is stopped
    first, then the stage table shows what ran and the stage that was cut; the exit status is 130."""
    import dataclasses

    from trtspec.pipeline import runner

    events = []

    class Server:
        def stop(self):
            events.append("server stopped")

    def cut(ctx):
        ctx.server = Server()  # as the serve stage leaves it for perf
        raise KeyboardInterrupt

    monkeypatch.setitem(runner.STAGES, "tune", dataclasses.replace(runner.STAGES["tune"], run=cut))
    summary = runner.Runner.print_summary
    monkeypatch.setattr(runner.Runner, "print_summary", lambda self, r: (events.append("summary"), summary(self, r)))
    monkeypatch.setenv("COLUMNS", "200")
    code, stdout, _ = run_cli(capsys, "run", write_recipe(tiny, build=None), "--out", tmp_path / "out")
    assert code == 130 and events == ["server stopped", "summary"]
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in stdout.splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}
    assert rows == {"derive": "ran", "convert": "ran", "quantize": "n/a", "build": "n/a", "profile": "ran",
                    "tune": "interrupted"}, stdout
    assert stages(tmp_path / "out")["tune"]["status"] == "interrupted"
