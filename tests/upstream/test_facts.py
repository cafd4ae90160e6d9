"""Each upstream fact is stated once, in trtspec.upstream, and nowhere else in the package."""

from __future__ import annotations

import ast
from pathlib import Path

import trtspec
from trtspec.upstream import trtllm

PACKAGE = Path(trtspec.__file__).parent
UPSTREAM = PACKAGE / "upstream"
# Exact string values that are upstream names: a copy of one outside trtspec.upstream is a second statement.
NAMES = (trtllm.EAGLE_ARCHITECTURE, trtllm.TRTLLM_VERSION_LABEL, trtllm.TRTLLM_VERSION_PREFIX, trtllm.TRTLLM_BUILD)


def _module_constants(path: Path) -> set[str]:
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        else:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else []
        out |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()}
    return out


def _outside_upstream() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if UPSTREAM not in p.parents]


def test_the_package_init_holds_no_facts():
    assert _module_constants(UPSTREAM / "__init__.py") == set()


def test_no_upstream_fact_is_defined_twice():
    seen: dict[str, str] = {}
    for path in sorted(UPSTREAM.glob("*.py")):
        for name in _module_constants(path):
            assert name not in seen, f"{name} is defined in {seen.get(name)} and {path.name}"
            seen[name] = path.name
    for path in _outside_upstream():
        again = _module_constants(path) & set(seen)
        assert not again, f"{path.relative_to(PACKAGE)} defines {sorted(again)}, stated in trtspec.upstream"


def test_no_module_spells_an_upstream_name_itself():
    for path in _outside_upstream():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in NAMES:
                raise AssertionError(f"{path.relative_to(PACKAGE)}:{node.lineno} spells {node.value!r}; "
                                     "import it from trtspec.upstream")
