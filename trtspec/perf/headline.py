"""The numbers at the top of report.html: per workload and load point, tokens/s with and without
speculation, their ratio and the prediction, each measured number with its 95% interval
(trtspec.perf.stats). The measured numbers are compare.comparisons' (an open loop's rates are per
request), so the report and results.json's comparisons cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass

from .compare import Prediction, comparisons, per_request, recorded_prediction, resampled_requests, served_prediction
from .incomplete import cut_short
from .schema import Comparison, Interval, PerfResults, Run
from .stats import al_ci, pair_up, rate_ci


@dataclass
class Headline:
    """One workload at one load point: the numbers the top of the report shows (None: not measured
    there). What speculation on vs off says (speedup, its interval, verdict, control note,
    interleaved pairs) is `comparison`'s, compare.comparisons' row, read there rather than copied
    here; None unless a speculation run and a baseline run at this load both have successful
    requests. `prediction` is tuning.json's (compare.served_prediction), else the one results.json
    recorded; rows without a comparison have one too (a run without baseline still shows its K)."""
    workload: str
    load: str
    comparison: Comparison | None = None
    prediction: Prediction = Prediction()
    # the comparison's compared rates (an open loop's are per request: `per_request`), else each run's throughput
    tokens_per_s: float | None = None
    baseline_tokens_per_s: float | None = None
    tokens_per_s_ci: Interval | None = None
    baseline_tokens_per_s_ci: Interval | None = None
    acceptance_length: float | None = None  # the speculative run's, with its interval
    acceptance_length_ci: Interval | None = None
    requests: int = 0  # compare.resampled_requests (without a comparison: the smaller run's successes)
    per_request: bool = False  # an open loop's compared rates: tokens / E2E, not tokens / window
    cut: str | None = None  # why there is no comparison: a half cut short (perf.incomplete.cut_short)


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
    """Per (workload, load point) of the speculation runs (else of the baseline runs): the measured
    numbers of the comparison with the baseline at the same load (compare.comparisons, recomputed from
    the runs, so results.json written before intervals gets them too), each run's tokens/s interval,
    and the prediction of tuning.json (else the one results.json's comparisons recorded)."""
    measured = {(c.workload, load_label(c)): c for c in comparisons(results.runs, tuning)}
    stored = {(c.workload, load_label(c)): c for c in results.comparisons}
    base = {(r.workload, load_label(r)): r for r in results.runs if not r.speculation}
    spec_runs = [r for r in results.runs if r.speculation]
    out = []
    for r in spec_runs or list(base.values()):
        key = (r.workload, load_label(r))
        b = base.get(key) if r.speculation else r
        c = measured.get(key) if r.speculation and has_successes(r) and b is not None and has_successes(b) else None
        pred = served_prediction(tuning, r, b if r.speculation else None)
        h = Headline(r.workload, key[1], c, pred if pred is not None else recorded_prediction(stored.get(key)))
        h.cut = cut_short(r, b) if r.speculation and (b is not None or results.settings.baseline) else None
        if c is not None:
            h.tokens_per_s, h.baseline_tokens_per_s = c.tokens_per_s, c.baseline_tokens_per_s
            h.acceptance_length_ci, h.per_request = c.acceptance_length_ci, per_request(r)
            h.requests = resampled_requests(r, b, pair_up(r.requests, b.requests))
        else:
            h.tokens_per_s = r.summary.output_tokens_per_s if r.speculation and has_successes(r) else None
            h.baseline_tokens_per_s = b.summary.output_tokens_per_s if b is not None and has_successes(b) else None
            h.acceptance_length_ci = al_ci(r.requests) if r.speculation else None
            h.requests = min(r.summary.requests_ok, b.summary.requests_ok) if b is not None else 0
        h.acceptance_length = r.summary.acceptance_length if r.speculation else None
        h.tokens_per_s_ci = run_ci(r, h.tokens_per_s) if h.tokens_per_s is not None else None
        h.baseline_tokens_per_s_ci = run_ci(b, h.baseline_tokens_per_s) if h.baseline_tokens_per_s is not None else None
        out.append(h)
    return out


def run_ci(run: Run, tokens_per_s: float) -> Interval | None:
    """The interval of the run's tokens/s as shown: stored, else recomputed (results.json written
    before intervals, or an open loop's per-request speed)."""
    s = run.summary
    stored = s.tokens_per_s_ci if tokens_per_s == s.output_tokens_per_s else None
    return stored or rate_ci(run.requests, tokens_per_s)
