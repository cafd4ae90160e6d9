"""Speculation on vs off per workload and load point, next to what the tuner predicted.

The prediction is the tuned band the repository served: its `generate` model picks one per request
by the requests in flight at its arrival (serving_rules.pick_band: the largest tuned band <= that,
else the smallest; EAGLE engines and llmapi serve one band to all) and names it in the request's
route label (serving_rules.band_label), which perf records; where labels are
missing, the band the run's load picks by the same rule (`load_of`: its concurrency, or what an open
loop's Poisson arrivals found, Little's law). So a measured speedup is compared with the number the
served K came from, made end to end with the baseline's measured time to first token and, under
concurrency, the time its decode stood still for other requests' context phases
(stats.end_to_end_prediction, stats.stall_s: the tuner prices decode steps, tokens/s counts whole
requests). Open-loop runs compare per-request speeds (`compared_rates`).
Sampled runs (temperature > 0) get a distribution check
of their outputs against the baseline's (trtspec.perf.parity).
Each row carries the speedup's 95% interval and what it allows to say (trtspec.perf.stats: verdict,
whether the prediction lies inside the interval, requests a ±5% claim would need).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..confidence import interval_text, pm_text
from ..options import Sampling
from ..triton_repo.models.serving_rules import band_concurrency, label_band, pick_band
from .order import gap_note, order_label, ttft_gap
from .parity import ALPHA, chi2_homogeneity, ks_2samp
from .sampling import accept_rule
from .schema import Comparison, Parity, Run
from .stats import (NO_DIFFERENCE, al_ci, end_to_end_prediction, inflight, pair_up, per_request_tokens_per_s,
                    prediction_fit, requests_for, speedup_ci, stall_s, verdict)


def load_predictions(path: Path | None):
    """tuning.json, or None without one."""
    if path is None:
        return None
    # lazy: tuning_schema pulls torch (via tuning.cost -> checkpoints), ~1.3 s a run without tuning.json skips
    from ..tuning.tuning_schema import load_tuning

    return load_tuning(Path(path))


def _draft_len(band) -> int:
    if band.draft_len is not None:
        return int(band.draft_len)
    return len(band.eagle_choices) if band.eagle_choices else 0


@dataclass(frozen=True)
class Prediction:
    """What tuning.json predicts for a run: the draft length of the band the repository served it
    with, and that band's per-step speedup made end to end with the baseline run's TTFT (None
    without one). When the requests' route labels name several bands (an open loop's load varies; a
    closed loop's first requests arrive alone), `draft_len` is that of the band that served most of
    them and the step speedup, AL and its standard error are the mix's (`mixed`); `served` then
    counts requests per band concurrency. All None: nothing predicted (the report's rows without
    tuning.json or a recorded prediction)."""
    speedup: float | None = None
    step_speedup: float | None = None
    acceptance_length: float | None = None
    acceptance_length_se: float | None = None
    draft_len: int | None = None
    served: dict[int, int] | None = None


def load_of(run: Run) -> float | None:
    """Requests in flight during `run`, itself included: its concurrency (closed loop), else what its
    Poisson arrivals found (stats.inflight: 1 + Little's law's mean)."""
    return run.concurrency if run.concurrency is not None else inflight(run.requests)


def served_bands(bands, run: Run) -> dict[int, list[int]] | None:
    """{band concurrency: the output tokens of each successful request it served}, read from the
    requests' route labels (serving_rules.label_band: the repository's generate picks a band per
    request, by the load at its arrival, or serves one band to all); None unless every label names
    `run`'s workload, one of `bands` and, where it says, that band's K (not so: another server, an
    older results.json, a workload the repository routes to its default, a tuning.json other than
    the repository's)."""
    by_c = {band_concurrency(b): b for b in bands}
    served: dict[int, list[int]] = {}
    for r in run.requests:
        if r.status != "ok":
            continue
        parsed = label_band(r.route)
        if parsed is None or parsed[0] != run.workload or parsed[1] not in by_c:
            return None
        if parsed[2] is not None and parsed[2] != _draft_len(by_c[parsed[1]]):
            return None
        served.setdefault(parsed[1], []).append(r.output_tokens)
    return dict(sorted(served.items())) or None


def mixed(bands, served: dict[int, list[int]]) -> tuple[float, float | None, float | None]:
    """(step speedup, AL, AL's standard error) of requests served by several bands (`served_bands`).
    Each request decodes its t tokens in its band's steps, so times add. Band b's t_b tokens take
    t_b * base_b without speculation (base_b: its baseline step, tuning.json's; bands priced batched
    differ) and that over its step speedup s_b with it, so the step speedup of the whole is the
    harmonic mean of the s_b weighted by w_b = t_b * base_b: sum(w_b) / sum(w_b / s_b). AL, tokens
    per step, is likewise T / sum(t_b / AL_b), as the measured AL weighs requests (stats.
    token_weighted_al). Its standard error is the delta method's sum d_b * SE_b, the bands' errors
    taken as fully correlated: every band's AL is replayed from the same profiled prompts (bands
    that chose the same setting have the same AL and SE, which this then keeps exactly). Requests
    that returned no tokens at all count one each (an approximation that only a broken run needs)."""
    by_c = {band_concurrency(b): b for b in bands}
    tokens = {c: sum(ts) for c, ts in served.items()}
    if sum(tokens.values()) == 0:
        tokens = {c: len(ts) for c, ts in served.items()}
    t = sum(tokens.values())
    w = {c: k * by_c[c].baseline_step_time_s for c, k in tokens.items()}
    step = sum(w.values()) / sum(w[c] / by_c[c].speedup for c in served)
    als = {c: by_c[c].acceptance_length for c in served}
    al = t / sum(k / als[c] for c, k in tokens.items())
    ses = {c: by_c[c].acceptance_length_se for c in served}
    se = None if any(v is None for v in ses.values()) else \
        sum(al * al * k / (t * als[c] ** 2) * ses[c] for c, k in tokens.items())
    return step, al, se


def served_prediction(tuning, run: Run, base: Run | None) -> Prediction | None:
    """The prediction for `run` (module docstring); None without tuning.json or a tuned workload.
    The one place the report and the comparisons take it from. The band is the one the requests'
    route labels name (`served_bands`; several: `mixed`), else the one the run's load picks, and an
    open loop's stall only what the baseline's decodes met queued at their start (stats.stall_s)."""
    wt = tuning.workloads.get(run.workload) if tuning is not None else None
    if wt is None or not wt.bands:
        return None
    served = served_bands(wt.bands, run)
    if served is None:
        band = pick_band(wt.bands, load_of(run))
        step, al, se = band.speedup, band.acceptance_length, band.acceptance_length_se
    else:
        most = max(served, key=lambda c: (len(served[c]), -c))
        band = next(b for b in wt.bands if band_concurrency(b) == most)
        step, al, se = mixed(wt.bands, served)  # one band: its own numbers
    mix = {c: len(rs) for c, rs in served.items()} if served is not None and len(served) > 1 else None
    end_to_end = None
    if base is not None:
        stall = stall_s(base.requests, load_of(base) or 1, open_loop=run.concurrency is None)
        end_to_end = end_to_end_prediction(step, base.summary.ttft_s.mean, base.summary.e2e_s.mean, stall)
    return Prediction(end_to_end, step, al, se, _draft_len(band), mix)


def predicted_al_pm(al: float | None, se: float | None, draft_len: int | None) -> str:
    """' ±0.26' after a predicted AL: 1.96 standard errors of the profile's AL (tuning.json); '' after
    no speculation's AL of exactly 1 and without a prediction; ' ±?' where the standard error is
    unknown (a workload profiled on one prompt, a mix of bands one of which has none, a results.json
    from before they were recorded), as the tuner's table prints it (confidence.pm_text)."""
    return "" if al is None else pm_text(se, exact=draft_len == 0 and al == 1.0)


def recorded_prediction(c: Comparison | None) -> Prediction:
    """The prediction results.json recorded with a comparison (`comparisons` wrote it from
    `served_prediction`), what the report shows without tuning.json; empty without one. One written
    before predictions were made end to end has a single number, per step, in predicted_speedup."""
    if c is None:
        return Prediction()
    speedup, step = c.predicted_speedup, c.predicted_step_speedup
    if step is None:
        speedup, step = None, speedup
    return Prediction(speedup, step, c.predicted_acceptance_length, c.predicted_acceptance_length_se,
                      c.predicted_draft_len, c.predicted_served_bands)


def served_off(run: Run) -> bool:
    """Whether `run` served no speculation at all: every successful request reported K = 0
    (num_draft_tokens; the tuned setting is off). It and its baseline are then the same computation,
    an A/A comparison (`control_note`)."""
    ok = [r for r in run.requests if r.status == "ok"]
    return bool(ok) and all(r.num_draft_tokens == 0 for r in ok)


def control_note(ci) -> str:
    """What an A/A comparison says: its verdict is no difference by construction, and an interval that
    excludes 1.0 anyway (1 run in 20 by chance at 95%, more when the box's load changed during the
    run) says this run's noise is larger than its intervals, the other rows' included."""
    note = "the same computation, no speculation served: any difference is noise"
    if verdict(ci) not in (None, NO_DIFFERENCE):
        note += ("; its interval excludes 1.0 all the same, so this run's noise exceeds its intervals (a load "
                 "change on the box?), the other rows' too")
    return note


def decode_speedup(spec: Run, base: Run) -> float | None:
    """The measured speedup of what follows the first token: the baseline's mean ITL over the
    speculative run's (ITL = (E2E - TTFT) / (tokens - 1), perf.metrics.itl), what the tuner's
    per-step speedup predicts before it is made end to end."""
    b, s = base.summary.itl_s.mean, spec.summary.itl_s.mean
    return b / s if b and s else None


def per_request(run: Run) -> bool:
    """Whether `run`'s comparison divides per-request speeds (an open loop: `compared_rates`)."""
    return run.concurrency is None and run.request_rate is not None


def compared_rates(spec: Run, base: Run) -> tuple[float, float]:
    """The two tokens/s a speedup divides. Closed loop: each run's throughput (tokens / window), which
    the tuner's concurrency bands predict. Open loop: both runs are offered the same arrivals, so
    below saturation both throughputs are the arrival rate's whatever speculation does (requests
    twice as fast read as ~1.0x); what it changes is how fast each request completes, so the rates
    are per request, sum(tokens) / sum(E2E) over the successful requests (a ratio of sums, weighting
    long answers as the tuner's token-weighted tokens/s does; trtllm-bench's per-user output
    throughput is the mean of each request's tokens / latency instead, bench/dataclasses/reporting.py;
    the speedup's bootstrap resamples exactly this ratio, stats.speedup_ci)."""
    if not per_request(spec):
        return spec.summary.output_tokens_per_s, base.summary.output_tokens_per_s
    return per_request_tokens_per_s(spec.requests), per_request_tokens_per_s(base.requests)


def resampled_requests(r: Run, b: Run, pairs: list | None) -> int:
    """The requests a speedup interval resamples, and a ±5% claim is sized with: the interleaved
    pairs (`pairs`, stats.pair_up), else the successful requests of the smaller run."""
    return len(pairs) if pairs is not None else min(r.summary.requests_ok, b.summary.requests_ok)


def comparisons(runs: list[Run], tuning=None) -> list[Comparison]:
    """One row per (workload, load point) that has both a speculation and a baseline run, the baseline
    with tokens to divide by: a baseline that timed out or failed throughout has no rate, and a
    speedup of 0.00x would read as speculation being useless (its errors are the runs' to show).
    Likewise a speculation run without a successful request: it has no rate either (the report's
    headline shows none), and its parity would read 'consistent' over no outputs at all. And a load
    point either of whose halves was cut short (`completed: false`): a half-measured speedup is no
    result (the report says why in its place: perf.incomplete.cut_short)."""
    def key(r: Run):
        return (r.workload, r.concurrency, r.request_rate)

    base = {key(r): r for r in runs if not r.speculation}
    out = []
    for r in runs:
        b = base.get(key(r)) if r.speculation else None
        if b is None or r.summary.requests_ok == 0 or not (r.completed and b.completed):
            continue
        tps, btps = compared_rates(r, b)
        if btps <= 0:
            continue
        speedup = tps / btps
        ci, pairs = speedup_ci(r.requests, b.requests, speedup), pair_up(r.requests, b.requests)
        n = resampled_requests(r, b, pairs)
        aa = served_off(r)
        row = Comparison(workload=r.workload, concurrency=r.concurrency, request_rate=r.request_rate,
                         tokens_per_s=tps, baseline_tokens_per_s=btps, speedup=speedup,
                         acceptance_length=r.summary.acceptance_length, speedup_ci=ci,
                         verdict=NO_DIFFERENCE if aa else verdict(ci), control=control_note(ci) if aa else None,
                         requests_for_5pct=requests_for(ci, speedup, n),
                         paired_requests=None if pairs is None else len(pairs), acceptance_length_ci=al_ci(r.requests))
        if r.sampling is not None:
            row.sampling = Sampling.model_validate(r.sampling).label()
            row.accept_rule = accept_rule(tuning, r.workload)
            row.parity = parity(r, b)
        row.decode_speedup = decode_speedup(r, b)
        if r.sent_first:  # recorded since the order alternates (perf.order)
            row.order = order_label(r.sent_first)
            row.order_ttft_gap_s, row.order_ttft_gap_ci_s = ttft_gap(r.requests, b.requests, r.sent_first)
        pred = served_prediction(tuning, r, b)
        if pred is not None:
            row.predicted_step_speedup, row.predicted_speedup = pred.step_speedup, pred.speedup
            row.predicted_acceptance_length = pred.acceptance_length
            row.predicted_acceptance_length_se = pred.acceptance_length_se
            row.predicted_served_bands = pred.served
            row.predicted_draft_len = pred.draft_len
            row.prediction_fit = prediction_fit(row.predicted_speedup, ci)
        out.append(row)
    return out


def parity(spec: Run, base: Run) -> Parity:
    """The two runs' outputs compared as distributions (lengths, word frequencies), and how many
    speculative outputs equal their prompt's baseline text (same prompt, same seed)."""
    rs = [x for x in spec.requests if x.status == "ok"]
    bs = [x for x in base.requests if x.status == "ok"]
    d, lengths_p = ks_2samp([x.output_tokens for x in rs], [x.output_tokens for x in bs])
    chi, dof, words_p = chi2_homogeneity(Counter(spec.output_words or {}), Counter(base.output_words or {}))
    base_text = {x.prompt_id: x.output_sha256 for x in bs}
    same = sum(base_text.get(x.prompt_id) == x.output_sha256 for x in rs) / len(rs) if rs else 0.0
    return Parity(requests=len(rs), baseline_requests=len(bs), lengths_ks=d, lengths_p=lengths_p, words_chi2=chi,
                  words_dof=dof, words_p=words_p, identical_outputs=same,
                  consistent=lengths_p >= ALPHA and words_p >= ALPHA)


VERDICT_STYLE = {"faster": "green", "slower": "red"}  # rich styles; no measurable difference stays neutral


def step_differs(end_to_end: float | None, per_step: float | None) -> bool:
    """Whether the per-step prediction is worth printing beside the end-to-end one (they differ to
    the printed digits, or there is no end-to-end one)."""
    return per_step is not None and (end_to_end is None or f"{per_step:.2f}" != f"{end_to_end:.2f}")


def prediction_text(end_to_end: float, per_step: float | None) -> str:
    """'1.93x end to end (2.61x per step)', or '1.93x' when the two agree to the printed digits."""
    if not step_differs(end_to_end, per_step):
        return f"{end_to_end:.2f}x"
    return f"{end_to_end:.2f}x end to end ({per_step:.2f}x per step)"


def ratio_fmt(ci) -> str:
    """The format of a speedup interval's ends: two decimals, three where an end off 1.0 would round
    to 1.00x ([1.003x, 1.30x] is 'faster'; printed [1.00x, 1.30x] it would read as touching 1)."""
    near = ci is not None and any(v != 1.0 and f"{v:.2f}" == "1.00" for v in (ci.low, ci.high))
    return ".3f" if near else ".2f"


def ci_text(ci, fmt: str | None = None, suffix: str = "x") -> str:
    """'[0.85x, 1.47x]', or '-' without an interval; fmt default: ratio_fmt's."""
    return "-" if ci is None else interval_text(ci, fmt or ratio_fmt(ci), suffix=suffix)


def speedup_line(c: Comparison) -> str:
    """One comparison as a sentence: measured speedup with its interval, the verdict, the prediction's
    fit, the measured AL with its interval against the predicted AL, and the requests a ±5% claim
    would need (what `trtspec perf` and the pipeline summary print)."""
    load = f"c={c.concurrency}" if c.concurrency is not None else f"{c.request_rate:g} req/s"
    text = f"{c.workload} {load}: {c.speedup:.2f}x {ci_text(c.speedup_ci)}"
    if c.paired_requests is not None:
        text += f" over {c.paired_requests} interleaved pairs"
    text += f", {c.verdict}" if c.verdict else " (too few requests for an interval)"
    text += f" ({c.control})" if c.control else ""
    if c.predicted_speedup is not None:
        text += f"; predicted {prediction_text(c.predicted_speedup, c.predicted_step_speedup)}" + (
            f", {c.prediction_fit}" if c.prediction_fit else "")
        if c.predicted_served_bands:
            text += " (over the bands served: " + ", ".join(
                f"c={k} x{n}" for k, n in c.predicted_served_bands.items()) + ")"
        if c.decode_speedup is not None and c.predicted_step_speedup is not None:
            text += f"; after the first token {c.decode_speedup:.2f}x measured (ITL ratio)"
    if c.acceptance_length is not None and c.acceptance_length_ci is not None:
        text += f"; AL {c.acceptance_length:.2f} {ci_text(c.acceptance_length_ci, suffix='')} measured"
        if c.predicted_acceptance_length is not None:
            al, se = c.predicted_acceptance_length, c.predicted_acceptance_length_se
            text += (f", {al:.2f}{predicted_al_pm(al, se, c.predicted_draft_len)} predicted "
                     f"({prediction_fit(al, c.acceptance_length_ci, se)})")
    if c.requests_for_5pct is not None:
        text += f"; a ±5% claim needs ~{c.requests_for_5pct} {claim_unit(c.paired_requests is not None)}"
    return text + (f"; {order_note(c)}" if order_note(c) else "")


def order_note(c: Comparison) -> str | None:
    """The comparison's order-gap sentence when that gap is measurable (perf.order.gap_note), else None."""
    return gap_note(c.order_ttft_gap_s, c.order_ttft_gap_ci_s, c.order)



def claim_unit(paired: bool) -> str:
    """What a ±5% claim's count counts: interleaved spec/baseline pairs, else requests of each run."""
    return "pairs" if paired else "requests per run"
