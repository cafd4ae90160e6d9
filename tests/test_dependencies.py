"""Every third-party module trtspec imports is a declared dependency in pyproject.toml.

`import click` in cli.main() once turned every usage error into `ModuleNotFoundError` on an install
without import-linter (the test extra pulls click in, so running the code under test cannot catch
it): this reads the imports statically and maps each to its installed distribution instead.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Modules of the Triton python backend and of the repository itself, importable only inside tritonserver's
# stub, where trtspec/triton_repo/models/*.py run (they are copied into the model repository).
# ngram_pool: trtspec/runtime/ngram_pool.py, shipped next to an n-gram spec_decode (triton_repo.models.NGRAM_POOL).
BACKEND_PROVIDED = {"triton_python_backend_utils", "serving_rules", "word_rules", "trtspec_triton_common",
                    "trtspec_triton_pool", "ngram_pool"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {_norm(re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0]) for d in deps}


def top_level_imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def undeclared(files: dict[str, str], deps: set[str]) -> list[str]:
    """`module (file)` for each third-party import whose distribution is not in `deps`."""
    dists = md.packages_distributions()
    bad = []
    for path, source in sorted(files.items()):
        for mod in sorted(top_level_imports(source)):
            if mod in sys.stdlib_module_names or mod == "trtspec" or mod in BACKEND_PROVIDED:
                continue
            if not {_norm(d) for d in dists.get(mod, [])} & deps:
                bad.append(f"{mod} ({path}; distribution {dists.get(mod)})")
    return bad


def test_every_third_party_import_is_declared():
    files = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "trtspec").rglob("*.py")}
    assert len(files) > 50
    assert undeclared(files, declared()) == []


def test_an_undeclared_import_is_caught():
    """click is installed here (import-linter needs it) but is no dependency of trtspec."""
    assert "click" in md.packages_distributions()
    bad = undeclared({"trtspec/cli.py": "import typer\n\ndef main():\n    import click\n"}, declared())
    assert len(bad) == 1 and bad[0].startswith("click (trtspec/cli.py")


def test_typer_needs_no_click():
    """What cli.py relies on: the installed typer does not require click (it vendors its own)."""
    requires = md.requires("typer") or []
    assert not any(_norm(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) == "click" for r in requires)
