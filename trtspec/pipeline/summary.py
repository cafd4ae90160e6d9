"""What `trtspec run` prints at its end (and before the error of a failed or interrupted stage): the
stage table and, after perf, the measured speedup per workload next to the tuner's prediction."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..perf.compare import VERDICT_STYLE, ci_text, speedup_line
from ..perf.schema import load_results

STATUS_STYLE = {"failed": "red", "interrupted": "red", "n/a": "dim", "skipped": "cyan", "skip": "cyan",
                "missing": "yellow"}


@dataclass
class Row:
    stage: str
    status: str  # ran | skipped | failed | interrupted | n/a | run (dry run) | skip (dry run)
    seconds: float | None = None
    output: str = ""
    note: str = ""


@dataclass
class RunReport:
    rows: list[Row] = field(default_factory=list)
    results: Path | None = None
    report: Path | None = None


# Columns for the summary when the output is not a terminal (a CI log, `make demo | tee`): rich's
# default of 80 folds the 12-column speedup table into ellipses. COLUMNS, when set, still wins.
LOG_WIDTH = 160


def summary_console() -> Console:
    """The console `trtspec run` and the demo print to: the terminal's width, or LOG_WIDTH when not a terminal."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = LOG_WIDTH
    return console


def print_summary(report: RunReport, title: str, con: Console) -> None:
    table = Table(title=title)
    for col in ("stage", "status", "time", "output", "note"):
        table.add_column(col, overflow="fold")
    long_notes = []
    for r in report.rows:
        style = STATUS_STYLE.get(r.status)
        note = r.note
        if len(note) > 90:
            long_notes.append((r.stage, note))
            note = note[:87] + "..."
        table.add_row(r.stage, f"[{style}]{r.status}[/]" if style else r.status,
                      "" if r.seconds is None else f"{r.seconds:.1f} s", r.output, note)
    con.print(table)
    for name, note in long_notes:
        con.print(f"{name}: {note}", soft_wrap=True, highlight=False)
    if report.results is not None:
        print_speedups(report.results, con)
    if report.report is not None:
        con.print(f"report: {report.report}", soft_wrap=True, highlight=False)


def print_speedups(results_path: Path, console: Console) -> list:
    """Measured speedup (perf, speculation on vs off) with its 95% interval next to the tuner's
    prediction, per workload; coloured only when the interval excludes 1 (trtspec.perf.stats)."""
    results = load_results(results_path)
    table = Table(title="speedup per workload: measured (perf) vs predicted (tune)")
    for col in ("workload", "load", "tok/s spec", "tok/s base", "measured", "95% CI", "verdict", "predicted",
                "per step", "AL meas.", "AL pred.", "K"):
        table.add_column(col, justify="right")

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    for c in results.comparisons:
        load = f"c={c.concurrency}" if c.concurrency is not None else f"{c.request_rate:g} req/s"
        style = VERDICT_STYLE.get(c.verdict or "")
        measured = f(c.speedup, ".2f") + "x"
        table.add_row(c.workload, load, f(c.tokens_per_s, ".1f"), f(c.baseline_tokens_per_s, ".1f"),
                      f"[{style}]{measured}[/]" if style else measured, ci_text(c.speedup_ci), c.verdict or "-",
                      f(c.predicted_speedup, ".2f") + ("x" if c.predicted_speedup else ""),
                      f(c.predicted_step_speedup, ".2f") + ("x" if c.predicted_step_speedup else ""),
                      f(c.acceptance_length, ".2f"), f(c.predicted_acceptance_length, ".2f"),
                      f(c.predicted_draft_len, "d"))
    console.print(table)
    for c in results.comparisons:
        console.print(speedup_line(c), soft_wrap=True, highlight=False, markup=False)
    return results.comparisons
