"""A recipe's paths, made absolute against the recipe file's directory (trtspec.recipe.load_recipe).

Every path field goes through one rule, `resolve`, which also refuses the path texts no stage could
read as written, naming the field:

- an empty path: resolved, it would be the recipe's own directory, which exists, so the run would
  not report it missing and a stage would fail later on a directory it never meant to read;
- a workload source with a comma: the stages carry workloads as `NAME=SOURCE,NAME=SOURCE` lists
  (trtspec.workloads.spec), which would cut the path in two. Renaming a file is cheaper than a
  second list syntax.
"""

from __future__ import annotations

from pathlib import Path

from .errors import TrtspecError
from .quality.options import QualityReportOptions
from .tuning.gpus import PRESETS
from .workloads.packaged import PACKAGED
from .workloads.spec import parse_workload_specs

DEFAULT_TARGET = "default"


def resolve(base: Path, value: str | None, field: str, source: bool = False) -> str | None:
    """`value` made absolute against `base`; names and None pass as they are. source: a workload
    source (a comma would split it)."""
    if value is None or value in PACKAGED or value == DEFAULT_TARGET:
        return value
    check_path(value, field, source)
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p).resolve())


def check_path(value: str, field: str, source: bool = False) -> None:
    """The path texts no stage could read as written (module docstring), refused naming the field.
    Also run when the recipe is validated (Recipe._consistent), before checks that would read such
    a source's comma as a list separator and misname the problem."""
    if not value.strip():
        raise TrtspecError(f"{field}: empty path (it would mean the recipe's own directory); give a path")
    if source and "," in value:
        raise TrtspecError(f"{field}: {value!r}: a workload path cannot contain ',' (workload lists are "
                           "comma-separated NAME=SOURCE entries); rename the file or link it under a name without one")


def _resolve_entries(base: Path, entries: str, field: str) -> str:
    """A NAME=SOURCE[,NAME=SOURCE...] list (trtspec.workloads.spec's syntax, which the recipe has
    validated) with each source resolved; an entry written as a bare SOURCE stays bare."""
    parts, out = entries.split(","), []
    for spec, entry in zip(parse_workload_specs(parts), parts):
        source = resolve(base, spec.source, field, source=True)
        out.append(source if spec.source == entry.strip() else f"{spec.name}={source}")
    return ",".join(out)


def _sources(base: Path, sources: dict[str, str], field: str) -> dict[str, str]:
    return {n: resolve(base, s, f"{field}.{n}", source=True) for n, s in sources.items()}


def resolve_paths(recipe, base: Path, where: str = "recipe"):
    """A copy of a trtspec.recipe.Recipe (not imported: it imports this module) with every path field
    made absolute against `base`, the recipe file's directory; a refused path is one line naming
    `where` (the file) and the field."""
    try:
        return _resolved(recipe, base)
    except TrtspecError as e:
        raise TrtspecError(f"{where}: {e}") from None


def _resolved(recipe, base: Path):
    r = recipe.model_copy(deep=True)
    r.target = resolve(base, r.target, "target")
    if r.draft is not None:
        for kind in ("hf", "eagle", "eagle3"):
            setattr(r.draft, kind, resolve(base, getattr(r.draft, kind), f"draft.{kind}"))
    r.workloads = _sources(base, r.workloads, "workloads")
    if r.draft is not None and r.draft.train is not None and r.draft.train.workloads:
        r.draft.train.workloads = _resolve_entries(base, r.draft.train.workloads, "draft.train.workloads")
    if r.quantization is not None and r.quantization.calib is not None:
        r.quantization.calib = _sources(base, r.quantization.calib, "quantization.calib")
    if isinstance(r.quantization and r.quantization.report, QualityReportOptions):
        rep = r.quantization.report
        rep.workloads = _sources(base, rep.workloads, "quantization.report.workloads")
    if r.tune.cost not in PRESETS:
        r.tune.cost = resolve(base, r.tune.cost, "tune.cost")
    if r.tune.calibrate is not None:  # a perf --sweep results.json (trtspec.tuning.calibrate)
        r.tune.calibrate = Path(resolve(base, str(r.tune.calibrate), "tune.calibrate"))
    return r
