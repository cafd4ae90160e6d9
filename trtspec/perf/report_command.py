"""`trtspec perf-report`: the Typer command (registered by the CLI with `app.command("perf-report")`).

Light at import (no matplotlib): the work is in trtspec.perf.report, imported when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def perf_report_command(
    results: Path = typer.Argument(..., help="results.json written by `trtspec perf`."),
    tuning: Optional[Path] = typer.Option(None, "--tuning", help="tuning.json whose predictions to compare "
                                                                 "(default: the ones results.json recorded)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output HTML (default: report.html next to RESULTS)."),
):
    """Self-contained HTML report (headline, plots, tables) of a `trtspec perf` results.json."""
    from .report import write_report

    path = write_report(results, out if out is not None else Path(results).with_name("report.html"), tuning)
    typer.echo(f"wrote {path}")
