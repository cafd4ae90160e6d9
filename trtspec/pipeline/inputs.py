"""What `trtspec run` reads from outside OUT, and which stage reads what.

A stage's input hash (runner.py) covers the fingerprints of the external files it reads, so editing a
prompt file re-runs profile and perf but not convert. Keys name the recipe field that holds the path
(`draft.eagle3`, `workloads.chat`, `draft.train.workloads.code`, ...).
"""

from __future__ import annotations

from pathlib import Path

from ..checkpoints.default_model import CACHE_NAME, default_cache_root
from ..errors import TrtspecError
from ..recipe import GENERAL_HEAD, Recipe
from ..tuning.gpus import PRESETS
from ..workloads.spec import parse_workload_specs


def default_target_dir() -> Path:
    return default_cache_root() / CACHE_NAME


def external_inputs(recipe: Recipe) -> dict[str, str]:
    """{field: path} of every file or directory the recipe reads from outside OUT."""
    found = {}
    if not recipe.uses_default_target:
        found["target"] = recipe.target
    for key in ("hf", "eagle", "eagle3"):
        if recipe.draft is not None and getattr(recipe.draft, key) is not None:
            found[f"draft.{key}"] = getattr(recipe.draft, key)
    for n, s in recipe.workloads.items():  # resolved paths are absolute; packaged names have no "/"
        if "/" in s:
            found[f"workloads.{n}"] = s
    general = recipe.trained_heads().get(GENERAL_HEAD)  # every trained head's prompts are among the general one's
    for spec in parse_workload_specs(general) if general else ():
        if not spec.packaged:
            found[f"draft.train.workloads.{spec.name}"] = spec.source
    q = recipe.quantization
    report = q.report_options() if q is not None else None  # the quality report reads its own prompt sets
    for key, sources in (("quantization.calib", q and q.calib), ("quantization.report.workloads",
                                                                 report and report.workloads)):
        for n, s in (sources or {}).items():
            if "/" in s:
                found[f"{key}.{n}"] = s
    if recipe.tune.cost not in PRESETS:
        found["tune.cost"] = recipe.tune.cost
    if recipe.tune.calibrate is not None:
        found["tune.calibrate"] = str(recipe.tune.calibrate)
    return found


def out_dir(recipe: Recipe, out: Path) -> Path:
    """`out` made absolute, refused inside (or equal to) an input the recipe reads: the run would write
    into its own input, whose fingerprint then changes with every run, so no stage would ever be skipped
    (and a stage could overwrite what it reads)."""
    out = Path(out).expanduser().resolve()
    for key, p in external_inputs(recipe).items():
        if out.is_relative_to(Path(p).resolve()):
            raise TrtspecError(f"out: {out} is inside {key} ({p}), an input of the recipe; pick an output "
                               "directory outside it")
    return out


def missing_inputs(recipe: Recipe) -> list[str]:
    return [f"{k}: {p}" for k, p in external_inputs(recipe).items() if not Path(p).exists()]


# Which external inputs (external_inputs keys) each stage reads: a pattern ending in "." covers
# every key under it, any other names one key. Quantize calibrates on the workloads unless
# quantization.calib names its own sources. DRAFTS: the draft models convert and quantize read (an
# EAGLE-3 head, draft.eagle3, is read where it is by profile and triton), not the prompt files a head
# trains on (draft.train.*, which derive reads).
DRAFTS = ("draft.hf", "draft.eagle")
EXTERNALS = {"derive": ("target", "draft.train."), "convert": ("target", *DRAFTS),
             "quantize": ("target", *DRAFTS, "quantization.", "workloads."),
             "profile": ("workloads.", "draft.eagle3"), "tune": ("tune.",), "triton": ("draft.eagle3",),
             "perf": ("workloads.",)}


def reads(key: str, patterns: tuple[str, ...]) -> bool:
    """Whether an external input `key` is among a stage's EXTERNALS `patterns`."""
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in patterns)


def stage_inputs(recipe: Recipe, stage: str) -> dict[str, Path]:
    """{key: path} of the external inputs `stage` reads; the embedded default target counts as
    `target` (its cached conversion), so a re-converted default re-runs what reads the target."""
    patterns = EXTERNALS.get(stage, ())
    if stage == "quantize" and recipe.quantization is not None and recipe.quantization.calib is not None:
        patterns = tuple(p for p in patterns if p != "workloads.")  # it calibrates on its own sources
    found = {k: Path(p) for k, p in external_inputs(recipe).items() if reads(k, patterns)}
    if recipe.uses_default_target and reads("target", patterns):
        found["target"] = default_target_dir()
    return found
