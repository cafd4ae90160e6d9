"""results.json, requests.csv and summary.csv in --out, rewritten after every run.

Each file goes through a temporary sibling and a rename (trtspec.fsutil.write_text_atomic), so a
reader, or a run killed mid-write, never sees half a file, and a failure mid-way leaves the results
of every finished run (results.json says `completed: false` and why). The CSVs are flat views of
the same records for spreadsheets, the sweep's runs (perf.sweep) included, each named by its
`setting`; results.json is the source of truth.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..fsutil import write_text_atomic
from .schema import PerfResults, Run, SweepRun, dump_results

RESULTS = "results.json"
REQUESTS_CSV = "requests.csv"
SUMMARY_CSV = "summary.csv"
RUN_KEYS = ("workload", "speculation", "concurrency", "request_rate")
SETTING = "setting"  # a sweep run's setting label (perf.sweep), last so that the other columns keep their places
REQUEST_FIELDS = ("index", "prompt_id", "start_s", "status", "error", "ttft_s", "e2e_s", "itl_s", "responses",
                  "output_tokens", "acceptance_length", "num_draft_tokens", "route", "output_sha256")
REQUEST_COLUMNS = RUN_KEYS + REQUEST_FIELDS + ("chunk_gaps_s", SETTING)
STAT_COLUMNS = tuple(f"{m}_{p}" for m in ("ttft_s", "itl_s", "e2e_s") for p in ("mean", "p50", "p90", "p99"))
CI_FIELDS = ("tokens_per_s_ci", "ttft_mean_ci_s", "itl_mean_ci_s")  # 95% intervals (trtspec.perf.stats)
CI_COLUMNS = tuple(f"{f}_{end}" for f in CI_FIELDS for end in ("low", "high"))
SUMMARY_COLUMNS = RUN_KEYS + ("completed", "error", "requests_ok", "errors", "timeouts", "window_s",
                              "requests_per_s", "output_tokens", "output_tokens_per_s", "acceptance_length") \
    + STAT_COLUMNS + CI_COLUMNS + (SETTING,)


def _csv(columns: tuple[str, ...], rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def _keyed_runs(results: PerfResults) -> list[tuple[dict, Run | SweepRun]]:
    """(CSV key columns, run) of the plain runs, then of the sweep's (no request rate; its setting)."""
    out = [({k: getattr(run, k) for k in RUN_KEYS}, run) for run in results.runs]
    for run in results.sweep.runs if results.sweep is not None else []:
        out.append(({"workload": run.workload, "speculation": run.setting.speculation, "concurrency": run.concurrency,
                     "request_rate": None, SETTING: run.setting.label}, run))
    return out


def request_rows(results: PerfResults) -> list[dict]:
    rows = []
    for key, run in _keyed_runs(results):
        for r in run.requests:
            row = {**key, **{c: getattr(r, c) for c in REQUEST_FIELDS}}
            row["chunk_gaps_s"] = " ".join(repr(g) for g in r.chunk_gaps_s)
            rows.append(row)
    return rows


def summary_rows(results: PerfResults) -> list[dict]:
    rows = []
    for key, run in _keyed_runs(results):
        s = run.summary
        row = dict(key)
        row.update(completed=run.completed, error=run.error)
        row.update({c: getattr(s, c) for c in SUMMARY_COLUMNS[len(RUN_KEYS) + 2:] if hasattr(s, c)})
        for m in ("ttft_s", "itl_s", "e2e_s"):
            for p in ("mean", "p50", "p90", "p99"):
                row[f"{m}_{p}"] = getattr(getattr(s, m), p)
        for f in CI_FIELDS:
            ci = getattr(s, f)
            row[f"{f}_low"], row[f"{f}_high"] = (ci.low, ci.high) if ci is not None else (None, None)
        rows.append(row)
    return rows


def write_results(results: PerfResults, out: Path) -> Path:
    """Write the three files into `out` (created if missing); returns the results.json path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / REQUESTS_CSV, _csv(REQUEST_COLUMNS, request_rows(results)))
    write_text_atomic(out / SUMMARY_CSV, _csv(SUMMARY_COLUMNS, summary_rows(results)))
    write_text_atomic(out / RESULTS, dump_results(results))  # last: its presence means the CSVs match it
    return out / RESULTS
