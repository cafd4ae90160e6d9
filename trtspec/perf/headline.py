"""The numbers at the top of report.html: per workload and load point, tokens/s with and without
speculation, their ratio and the prediction, each measured number with its 95% interval
(trtspec.perf.stats). The rates are the ones the comparisons divide (compare.compared_rates: an
open loop's are per request)."""

from __future__ import annotations

from dataclasses import dataclass

from .compare import compared_rates, served_prediction
from .schema import Interval, PerfResults, Run
from .stats import al_ci, rate_ci, speedup_ci


@dataclass
class Headline:
    """One workload at one load point: the numbers the top of the report shows."""
    workload: str
    load: str
    tokens_per_s: float | None
    baseline_tokens_per_s: float | None
    speedup: float | None
    predicted_speedup: float | None
    acceptance_length: float | None
    predicted_acceptance_length: float | None
    predicted_draft_len: int | None
    tokens_per_s_ci: Interval | None = None
    baseline_tokens_per_s_ci: Interval | None = None
    speedup_ci: Interval | None = None
    requests: int = 0  # successful requests of the smaller of the two runs
    predicted_step_speedup: float | None = None  # tuning.json's, per decode step (predicted_speedup: end to end)
    acceptance_length_ci: Interval | None = None
    predicted_acceptance_length_se: float | None = None  # the profile's standard error (with tuning.json)


def load_label(run) -> str:
    """'c=4' (closed loop) or 'rate=2/s' (open loop): the load point of a Run or Comparison."""
    if run.concurrency is not None:
        return f"c={run.concurrency}"
    if run.request_rate is not None:
        return f"rate={run.request_rate:g}/s"
    return "load=?"


def has_successes(run: Run) -> bool:
    return run.summary.requests_ok > 0


def headlines(results: PerfResults, tuning=None) -> list[Headline]:
    """Per (workload, load point) of the speculation runs: measured tokens/s, the baseline run's
    tokens/s at the same load, speedup = their ratio, the run's token-weighted AL, and the
    prediction of tuning.json (else the one results.json's comparisons recorded)."""
    base = {(r.workload, load_label(r)): r for r in results.runs if not r.speculation}
    comps = {(c.workload, load_label(c)): c for c in results.comparisons}
    out = []
    spec_runs = [r for r in results.runs if r.speculation]
    for r in spec_runs or [r for r in results.runs if not r.speculation]:
        key = (r.workload, load_label(r))
        b = r if not r.speculation else base.get(key)
        tps = r.summary.output_tokens_per_s if r.speculation and has_successes(r) else None
        btps = b.summary.output_tokens_per_s if b is not None and has_successes(b) else None
        if tps is not None and btps is not None:
            tps, btps = compared_rates(r, b)  # open loop: per-request speeds
        speedup = tps / btps if tps is not None and btps else None
        pred_s = pred_step = pred_al = pred_k = pred_se = None
        pred = served_prediction(tuning, r, b if r.speculation else None)
        if pred is not None:
            pred_s, pred_step, pred_al, pred_k = pred.speedup, pred.step_speedup, pred.band.acceptance_length, \
                pred.draft_len
            pred_se = pred.band.acceptance_length_se
        elif key in comps:
            c = comps[key]
            pred_s, pred_step = c.predicted_speedup, c.predicted_step_speedup
            if pred_step is None:  # results.json written before predictions were made end to end: per step
                pred_s, pred_step = None, pred_s
            pred_al, pred_k = c.predicted_acceptance_length, c.predicted_draft_len
        out.append(Headline(r.workload, key[1], tps, btps, speedup, pred_s,
                            r.summary.acceptance_length if r.speculation else None, pred_al, pred_k,
                            run_ci(r, tps) if tps is not None else None, run_ci(b, btps) if btps is not None else None,
                            speedup_ci(r.requests, b.requests, speedup) if speedup else None,
                            min(r.summary.requests_ok, b.summary.requests_ok) if b is not None else 0, pred_step,
                            al_ci(r.requests) if r.speculation else None, pred_se))
    return out


def run_ci(run: Run, tokens_per_s: float) -> Interval | None:
    """The interval of the run's tokens/s as shown: stored, else recomputed (results.json written
    before intervals, or an open loop's per-request speed)."""
    s = run.summary
    stored = s.tokens_per_s_ci if tokens_per_s == s.output_tokens_per_s else None
    return stored or rate_ci(run.requests, tokens_per_s)
