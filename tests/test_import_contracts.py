"""The package's import layers, stated as import-linter contracts in pyproject.toml.

The first test runs `lint-imports` on the package as it is. The others put back, in a copy of the
package, an arrow the contracts exist to forbid and check that `lint-imports` then fails: a
contract that cannot fail is no contract.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    """lint-imports with the repository's pyproject.toml, importing `trtspec` from `root`."""
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(root), "HOME": str(root)}
    return subprocess.run([str(LINT), "--config", str(REPO / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, env=env, timeout=120)


def test_the_package_keeps_its_import_contracts():
    r = _lint(REPO)
    assert r.returncode == 0, r.stdout + r.stderr


# (module to edit, the import put back, the contract that must break)
ARROWS = [
    ("runtime/model.py", "from ..builders import plan as _plan", "Layers follow the data flow"),
    ("calib/calibrate.py", "from ..tuning import acceptance as _acceptance", "Layers follow the data flow"),
    ("pipeline/stages.py", "from ..tuning import command as _command", "Only the command line imports command modules"),
    ("checkpoints/convert.py", "from . import eagle as _eagle", "No import cycles"),
    ("runtime/eagle.py", "from . import eagle2 as _eagle2", "No import cycles"),
]


@pytest.mark.parametrize("module,line,contract", ARROWS, ids=[a[0] for a in ARROWS])
def test_lint_imports_fails_when_a_forbidden_arrow_is_put_back(tmp_path, module, line, contract):
    shutil.copytree(REPO / "trtspec", tmp_path / "trtspec", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path / "trtspec" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    r = _lint(tmp_path)
    assert r.returncode != 0, f"lint-imports accepted {line!r} in {module}:\n{r.stdout}"
    assert f"{contract} BROKEN" in r.stdout, r.stdout
    assert "Contracts: 2 kept, 1 broken." in r.stdout, r.stdout
