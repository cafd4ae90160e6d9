"""The numbers at the top of report.html: per workload and load point, tokens/s with and without
speculation, their ratio and the prediction, each measured number with its 95% interval
(trtspec.perf.stats). The measured numbers are compare.comparisons' (an open loop's rates are per
request), so the report and results.json's comparisons cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass

from .compare import comparisons, per_request, served_prediction
from .schema import Interval, PerfResults, Run
from .stats import al_ci, rate_ci


@dataclass
class Headline:
    """One workload at one load point: the numbers the top of the report shows (None: not measured
    or not predicted there)."""
    workload: str
    load: str
    tokens_per_s: float | None = None
    baseline_tokens_per_s: float | None = None
    speedup: float | None = None
    predicted_speedup: float | None = None
    acceptance_length: float | None = None
    predicted_acceptance_length: float | None = None
    predicted_draft_len: int | None = None
    tokens_per_s_ci: Interval | None = None
    baseline_tokens_per_s_ci: Interval | None = None
    speedup_ci: Interval | None = None
    # the requests the speedup interval resampled: the interleaved pairs, else the successful requests
    # of the smaller run (what compare.comparisons sizes a ±5% claim with)
    requests: int = 0
    paired: bool = False  # `requests` counts interleaved pairs (compare.claim_unit)
    predicted_step_speedup: float | None = None  # tuning.json's, per decode step (predicted_speedup: end to end)
    acceptance_length_ci: Interval | None = None
    predicted_acceptance_length_se: float | None = None  # the profile's standard error (with tuning.json)
    per_request: bool = False  # an open loop's compared rates: tokens / E2E, not tokens / window
    verdict: str | None = None  # the comparison's (compare.comparisons: an A/A one reads no difference)
    control: str | None = None  # the comparison's note when no speculation was served (compare.control_note)


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
        h = Headline(r.workload, key[1])
        if c is not None:
            h.tokens_per_s, h.baseline_tokens_per_s, h.speedup = c.tokens_per_s, c.baseline_tokens_per_s, c.speedup
            h.speedup_ci, h.acceptance_length_ci = c.speedup_ci, c.acceptance_length_ci
            h.verdict, h.control = c.verdict, c.control
            h.paired = c.paired_requests is not None
            h.requests = c.paired_requests if h.paired else \
                min(r.summary.requests_ok, b.summary.requests_ok)
            h.per_request = per_request(r)
        else:
            h.tokens_per_s = r.summary.output_tokens_per_s if r.speculation and has_successes(r) else None
            h.baseline_tokens_per_s = b.summary.output_tokens_per_s if b is not None and has_successes(b) else None
            h.acceptance_length_ci = al_ci(r.requests) if r.speculation else None
            h.requests = min(r.summary.requests_ok, b.summary.requests_ok) if b is not None else 0
        h.acceptance_length = r.summary.acceptance_length if r.speculation else None
        h.tokens_per_s_ci = run_ci(r, h.tokens_per_s) if h.tokens_per_s is not None else None
        h.baseline_tokens_per_s_ci = run_ci(b, h.baseline_tokens_per_s) if h.baseline_tokens_per_s is not None else None
        _predict(h, served_prediction(tuning, r, b if r.speculation else None), stored.get(key))
        out.append(h)
    return out


def _predict(h: Headline, pred, stored) -> None:
    """The headline's prediction: tuning.json's (compare.served_prediction), else results.json's."""
    if pred is not None:
        h.predicted_speedup, h.predicted_step_speedup = pred.speedup, pred.step_speedup
        h.predicted_acceptance_length, h.predicted_draft_len = pred.acceptance_length, pred.draft_len
        h.predicted_acceptance_length_se = pred.acceptance_length_se
    elif stored is not None:
        h.predicted_speedup, h.predicted_step_speedup = stored.predicted_speedup, stored.predicted_step_speedup
        if h.predicted_step_speedup is None:  # results.json written before predictions were made end to end
            h.predicted_speedup, h.predicted_step_speedup = None, h.predicted_speedup
        h.predicted_acceptance_length, h.predicted_draft_len = stored.predicted_acceptance_length, \
            stored.predicted_draft_len


def run_ci(run: Run, tokens_per_s: float) -> Interval | None:
    """The interval of the run's tokens/s as shown: stored, else recomputed (results.json written
    before intervals, or an open loop's per-request speed)."""
    s = run.summary
    stored = s.tokens_per_s_ci if tokens_per_s == s.output_tokens_per_s else None
    return stored or rate_ci(run.requests, tokens_per_s)
