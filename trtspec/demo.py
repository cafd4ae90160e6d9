"""`trtspec demo`: the whole pipeline on the embedded SmolLM2-135M-Instruct, on CPU.

It is `trtspec run` on the recipe shipped in the package (trtspec/recipes/cpu-demo.yaml; the same
file as examples/cpu-demo.yaml, which a test keeps identical), so the demo and the documented recipe
can never drift apart: train a small EAGLE-3 head for SmolLM2 (cached after the first run) ->
FP8 quantization of the target (with a quality report) -> acceptance profiles of the head and of
n-gram drafting on chat (MT-Bench), code (HumanEval) and edit (code-edit) -> the drafter and K per
workload with the cpu cost preset -> a cpu-flavor Triton repository served by the
bundled tritonserver -> perf with a speculation-off baseline -> report.html. A second run skips
every stage whose inputs did not change.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .pipeline.runner import run_recipe
from .pipeline.summary import summary_console
from .pipeline.signals import sigterm_as_interrupt

RECIPE = "cpu-demo.yaml"


def run_demo(out: Path, until: str | None = None, force: str | None = None, dry_run: bool = False):
    console = summary_console()
    with resources.as_file(resources.files("trtspec.recipes").joinpath(RECIPE)) as recipe, sigterm_as_interrupt():
        report = run_recipe(recipe, Path(out), until, force, dry_run, console)
    if report.report is None and not dry_run:
        console.print(f"no report yet (the run stopped before the report stage); outputs under {out}")
    return report
