"""scripts/gpu_checks.sh, the GPU checks' runner, on this CPU: what it can try without a GPU (its
env step reports what is imported; the tests step selects the CUDA variants, which skip here; an
unknown step is refused). Whether the checks pass on an H100 is for a session that has one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_checks(tmp_path, *steps) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    return subprocess.run(["bash", "scripts/gpu_checks.sh", *steps], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)


def test_env_reports_the_imported_versions_and_an_unknown_step_is_refused(tmp_path):
    if (ROOT / ".gpu" / "whl").is_dir():
        pytest.skip(".gpu/whl holds the device's (Python 3.12) wheels: the runner would install them")
    done = run_checks(tmp_path, "env")
    assert done.returncode == 0, done.stderr
    env = (tmp_path / "out" / "env.txt").read_text()
    import transformers

    assert f"transformers {transformers.__version__}" in env and "\ncuda " in env
    bad = run_checks(tmp_path, "nonsense")
    assert bad.returncode == 2 and "unknown step 'nonsense'" in bad.stdout
