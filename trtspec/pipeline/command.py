"""`trtspec run`: the Typer command over `trtspec.pipeline.runner.run_recipe` (registered by cli.py).

Top-level imports stay light: the stages import torch, ModelOpt and tritonclient only when they run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def run_command(
    recipe: Path = typer.Argument(..., help="Recipe YAML (see examples/ and README 'trtspec run')."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: out/<recipe name>)."),
    until: Optional[str] = typer.Option(None, "--until", help="Stop after this stage: derive, convert, quantize, "
                                                              "build, profile, tune, triton, serve, perf, report."),
    force: Optional[str] = typer.Option(None, "--force", help="Re-run this stage and every stage after it."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate the recipe and print the plan (run / skip per "
                                                          "stage); run nothing."),
):
    """Run every stage of a recipe, skipping stages whose inputs did not change since the last run."""
    from ..options import flag_context
    from .runner import run_recipe
    from .signals import sigterm_as_interrupt

    # flag_context: run_recipe names its arguments; sigterm_as_interrupt: a kill stops the server as Ctrl-C does
    with flag_context(None, params={"until": "--until", "force": "--force", "out": "--out"}), sigterm_as_interrupt():
        run_recipe(recipe, out if out is not None else Path("out") / recipe.stem, until, force, dry_run)
