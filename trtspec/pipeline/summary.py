"""What `trtspec run` prints at its end (and before the error of a failed or interrupted stage): the
stage table and, after perf, the measured speedup per workload next to the tuner's prediction."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..confidence import PM_MEANS, UNKNOWN_PM, interval_text
from ..perf.compare import VERDICT_STYLE, ci_text, predicted_al_pm, speedup_line
from ..perf.headline import load_label, run_ci
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
    prediction, per workload; coloured only when the interval excludes 1 (trtspec.perf.stats). Every
    measured number carries its interval under it and the predicted AL its ± (as report.html's
    headline: perf.headline.run_ci): a bare number would read as exact next to the speedup's interval."""
    results = load_results(results_path)
    runs = {(r.workload, load_label(r), r.speculation): r for r in results.runs}
    table = Table(title="speedup per workload: measured (perf) vs predicted (tune)",
                  caption=f"[ ]: 95% intervals over requests; predicted AL {PM_MEANS} over the profiled prompts"
                  f" ({UNKNOWN_PM.strip()}: unknown)")
    for col in ("workload", "load", "tok/s spec", "tok/s base", "speedup", "verdict", "pred.\n(per step)",
                "AL meas.", "AL pred.", "K"):
        table.add_column(col, justify="right", overflow="fold")  # wrapped at spaces, never cut short with '…'

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    for c in results.comparisons:
        load = f"c={c.concurrency}" if c.concurrency is not None else f"{c.request_rate:g} req/s"
        spec, base = (runs.get((c.workload, load_label(c), on)) for on in (True, False))
        style = VERDICT_STYLE.get(c.verdict or "")
        measured = f(c.speedup, ".2f") + "x"
        table.add_row(c.workload, load, with_ci(c.tokens_per_s, spec and run_ci(spec, c.tokens_per_s), ".1f"),
                      with_ci(c.baseline_tokens_per_s, base and run_ci(base, c.baseline_tokens_per_s), ".1f"),
                      (f"[{style}]{measured}[/]" if style else measured)
                      + ("\n" + ci_text(c.speedup_ci) if c.speedup_ci else UNKNOWN_PM),
                      c.verdict or "-",
                      f(c.predicted_speedup, ".2f") + ("x" if c.predicted_speedup else "")
                      + (f"\n({c.predicted_step_speedup:.2f}x)" if c.predicted_step_speedup else ""),
                      with_ci(c.acceptance_length, c.acceptance_length_ci, ".2f"),
                      f(c.predicted_acceptance_length, ".2f") + predicted_al_pm(
                          c.predicted_acceptance_length, c.predicted_acceptance_length_se, c.predicted_draft_len),
                      f(c.predicted_draft_len, "d"))
    console.print(table)
    for c in results.comparisons:
        console.print(speedup_line(c), soft_wrap=True, highlight=False, markup=False)
    return results.comparisons


def with_ci(x: float | None, ci, spec: str) -> str:
    """A measured number with its 95% interval on the line under it (one column stays narrow enough
    for the table to fit 100 columns); '±?' where it has none (one successful request), '-' unmeasured."""
    if x is None:
        return "-"
    return format(x, spec) + ("\n" if ci is not None else " ") + interval_text(ci, spec)
