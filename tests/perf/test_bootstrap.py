"""The 95% intervals of the perf statistics (trtspec/perf/stats.py and bootstrap.py docstrings): their
coverage, the verdicts read from them, interleaved blocks, and small samples and degenerate resamples."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from perf.test_stats import run, timed
from trtspec.perf.compare import comparisons, speedup_line
from trtspec.perf.headline import headlines
from trtspec.perf.load import block_schedule
from trtspec.perf.schema import Interval, PerfResults, RequestRecord, Run, Settings, load_results
from trtspec.perf.stats import (NO_DIFFERENCE, al_ci, mean_ci, pair_up, prediction_fit, requests_for, speedup_ci,
                                summarize, token_weighted_al, verdict)


# ---- 95% intervals (stats module docstring) -------------------------------------------------------------

@pytest.mark.parametrize("n", [10, 40])
def test_speedup_interval_covers_the_true_ratio_95_percent_of_the_time(n):
    """200 seeded replications of two runs of n requests (lognormal E2E, true speedup 1.25): the
    interval covers 1.25 in 95% of them within binomial tolerance (sd 1.5%: 90%..99% is > 3 sd);
    likewise the interval of the mean E2E (exp(sigma^2 / 2)) at 40 requests."""
    rng = np.random.default_rng(7)
    sigma, true = 0.4, 1.25
    covered = mean_covered = 0
    for rep in range(200):
        spec = timed(np.exp(rng.normal(0.0, sigma, n)) / true)
        base = timed(np.exp(rng.normal(0.0, sigma, n)))
        s, b = summarize(spec), summarize(base)
        point = s.output_tokens_per_s / b.output_tokens_per_s
        ci = speedup_ci(spec, base, point, seed=rep, reps=1000)
        covered += ci.low <= true <= ci.high
        m = mean_ci([r.e2e_s for r in base], seed=rep, reps=1000)
        mean_covered += m.low <= np.exp(sigma ** 2 / 2) <= m.high
    assert 0.90 <= covered / 200 <= 0.99, covered
    if n == 40:
        assert 0.90 <= mean_covered / 200 <= 0.99, mean_covered


def test_intervals_are_seeded_and_stored_in_the_summary():
    recs = timed(np.random.default_rng(1).uniform(2.0, 4.0, 10))
    s = summarize(recs)
    assert s == summarize(recs)  # same records, same intervals
    assert s.tokens_per_s_ci.low < s.output_tokens_per_s < s.tokens_per_s_ci.high
    assert s.ttft_mean_ci_s.low < s.ttft_s.mean < s.ttft_mean_ci_s.high
    assert s.itl_mean_ci_s.low < s.itl_s.mean < s.itl_mean_ci_s.high
    assert summarize(recs[:1]).tokens_per_s_ci is None  # one request: no interval


def test_the_acceptance_length_interval_covers_the_token_weighted_al():
    """200 seeded runs of 20 requests, per-request AL lognormal around 2.5 and 8-64 tokens: the
    interval of the token-weighted AL (total tokens / total steps) covers its population value
    (1 / E[1 / AL], tokens independent of AL) about 95% of the time."""
    rng = np.random.default_rng(3)
    true = 1.0 / np.mean(1.0 / (2.5 * np.exp(0.3 * rng.standard_normal(2_000_000))))
    hits = 0
    for rep in range(200):
        tokens = rng.integers(8, 65, 20)
        als = 2.5 * np.exp(0.3 * rng.standard_normal(20))
        recs = [RequestRecord(index=i, prompt_id=str(i), start_s=float(i), status="ok", ttft_s=0.1, e2e_s=1.0,
                              output_tokens=int(n), acceptance_length=float(a)) for i, (n, a) in enumerate(zip(tokens, als))]
        ci = al_ci(recs, reps=500)
        assert ci.low < token_weighted_al(zip(tokens, als)) < ci.high
        hits += ci.low <= true <= ci.high
    assert 0.90 <= hits / 200 <= 0.99
    assert al_ci(recs[:1]) is None and al_ci(recs) == al_ci(recs)  # one request: no interval; seeded


def test_verdict_and_prediction_fit():
    assert verdict(Interval(low=0.9, high=1.1)) == NO_DIFFERENCE
    assert verdict(Interval(low=1.02, high=1.3)) == "faster" and verdict(Interval(low=0.7, high=0.95)) == "slower"
    assert verdict(Interval(low=-0.1, high=0.2), null=0.0) == NO_DIFFERENCE
    assert verdict(Interval(low=0.1, high=0.2), null=0.0, higher="higher") == "higher" and verdict(None) is None
    assert prediction_fit(1.0, Interval(low=0.9, high=1.1)) == "inside the measured interval"
    assert prediction_fit(1.32, Interval(low=1.0, high=1.2)) == "10% above the measured interval"
    assert prediction_fit(1.08, Interval(low=0.88, high=1.075)) == "0.5% above the measured interval"
    assert prediction_fit(0.9, Interval(low=1.0, high=1.2)) == "10% below the measured interval"
    assert prediction_fit(0.9, Interval(low=1.0, high=1.2), se=0.06) == \
        "10% below the measured interval, inside its own ±0.12"  # 0.9 + 0.12 reaches 1.0
    assert prediction_fit(0.9, Interval(low=1.0, high=1.2), se=0.05) == "10% below the measured interval"
    # half-width 10% at 10 requests: n = 10 * (0.10 / 0.05)^2 = 40 for ±5%
    assert requests_for(Interval(low=0.9, high=1.1), 1.0, 10) == 40
    assert requests_for(None, 1.0, 10) is None


def test_same_computation_reads_as_no_measurable_difference_and_a_real_gain_as_faster():
    """K=0 against speculation off is one computation twice: equal E2E distributions give an interval
    around 1; a 2x faster run gives one wholly above 1."""
    rng = np.random.default_rng(3)

    def pair(factor):
        spec = timed(rng.uniform(2.0, 4.0, 10) / factor)
        base = timed(rng.uniform(2.0, 4.0, 10))
        mk = lambda recs, on: Run(workload="chat", speculation=on, concurrency=1, started_at="t", completed=True,
                                  requests=recs, summary=summarize(recs))
        return comparisons([mk(spec, True), mk(base, False)])[0]

    same, fast = pair(1.0), pair(2.0)
    assert same.speedup_ci.low < 1.0 < same.speedup_ci.high and same.verdict == NO_DIFFERENCE
    assert fast.speedup_ci.low > 1.0 and fast.verdict == "faster" and fast.requests_for_5pct > 10


def test_a_run_that_served_no_speculation_is_an_aa_control():
    """Every request served K = 0 (the tuned setting is off): speculation and baseline are one
    computation, so the verdict is no difference by construction, even when noise (a load change on
    the box, here a 1.3x one) puts the interval above 1; the note then says the noise exceeds the
    intervals. One request with K > 0 makes it a real comparison again."""
    rng = np.random.default_rng(5)
    spec, base = timed(rng.uniform(2.0, 4.0, 12) / 1.3), timed(rng.uniform(2.0, 4.0, 12))
    for r in spec:
        r.num_draft_tokens = 0
    mk = lambda recs, on: Run(workload="chat", speculation=on, concurrency=1, started_at="t", completed=True,  # noqa: E731
                              requests=recs, summary=summarize(recs))
    row = comparisons([mk(spec, True), mk(base, False)])[0]
    assert row.speedup_ci.low > 1.0 and row.verdict == NO_DIFFERENCE
    assert row.control.startswith("the same computation") and "excludes 1.0" in row.control
    assert "(the same computation, no speculation served: any difference is noise" in speedup_line(row)
    spec[0].num_draft_tokens = 2
    row = comparisons([mk(spec, True), mk(base, False)])[0]
    assert row.verdict == "faster" and row.control is None


def test_results_without_intervals_still_load(tmp_path):
    """results.json written before the intervals (no *_ci, verdict fields) loads, with them None."""
    settings = Settings(url="127.0.0.1:1", model="generate", workloads={"chat": "mt-bench"}, warmup=0, timeout_s=1,
                        max_tokens=8, baseline=True, seed=0)
    runs = [run("chat", True, 1, 1), run("chat", False, 1, 2)]
    data = json.loads(PerfResults(created="now", trtspec_version="0", settings=settings, completed=True, runs=runs,
                                  comparisons=comparisons(runs)).model_dump_json(by_alias=True))
    for r in data["runs"]:
        for k in ("tokens_per_s_ci", "ttft_mean_ci_s", "itl_mean_ci_s"):
            del r["summary"][k]
    for c in data["comparisons"]:
        for k in ("speedup_ci", "verdict", "prediction_fit", "requests_for_5pct"):
            del c[k]
    (tmp_path / "results.json").write_text(json.dumps(data))
    old = load_results(tmp_path / "results.json")
    assert old.runs[0].summary.tokens_per_s_ci is None and old.comparisons[0].speedup_ci is None
    assert old.runs[0].summary.output_tokens_per_s == runs[0].summary.output_tokens_per_s


# ---- interleaved blocks (perf.blocks > 1; stats module docstring) -------------------------------------

def interleaved(spec_e2e, base_e2e, tokens=32) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """Two interleaved c = 1 runs, one request per block: block j sends prompt p{j} in both modes."""
    def run(e2es):
        out, t = [], 0.0
        for j, e in enumerate(e2es):
            out.append(RequestRecord(index=j, prompt_id=f"p{j}", start_s=t, status="ok", ttft_s=e / 10, e2e_s=e,
                                     itl_s=e * 0.9 / (tokens - 1), output_tokens=tokens, block=j))
            t += 2 * e + 0.5  # the other mode's block (and a gap) lies between two of this run's blocks
        return out
    return run(spec_e2e), run(base_e2e)


def test_an_interleaved_runs_window_is_the_sum_of_its_blocks():
    spec, _ = interleaved([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])
    s = summarize(spec)
    assert s.window_s == pytest.approx(6.0) and s.output_tokens_per_s == pytest.approx(96 / 6.0)


def test_pairs_are_same_prompt_same_block_in_order_and_only_successes():
    spec, base = interleaved([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    base[1] = base[1].model_copy(update={"status": "error", "e2e_s": None})
    spec.append(spec[0].model_copy(update={"index": 3, "start_s": 99.0, "e2e_s": 7.0}))  # p0 again in block 0
    base.append(base[0].model_copy(update={"index": 3, "start_s": 99.0, "e2e_s": 8.0}))
    pairs = pair_up(spec, base)
    assert [(s.e2e_s, b.e2e_s) for s, b in pairs] == [(1.0, 1.5), (3.0, 3.5), (7.0, 8.0)]
    assert pair_up(timed([1.0, 2.0]), timed([1.0, 2.0])) is None  # sequential runs: not paired


def test_interleaving_keeps_coverage_under_drift_that_breaks_sequential_runs():
    """200 seeded replications, 16 prompts (lognormal spread, sigma 0.4), true speedup 1.25, and the
    machine's speed drifting as a random walk (steps of sigma 0.15 per block, ~0.6 over a run). With
    the runs interleaved request by request the paired interval covers 1.25 in 90-99% of them (sd
    1.5%); measured one after the other (spec, then base, the drift going on) the unpaired interval
    covers it in under 80%: the drift reads as a speedup the design cannot see. (Seen: 92.5% paired,
    median interval width 1.08x; 54% sequential, width 2.04x.)"""
    rng = np.random.default_rng(11)
    n, true = 16, 1.25
    paired = sequential = 0
    widths = []
    for rep in range(200):
        prompt = np.exp(rng.normal(0.0, 0.4, n))
        drift = np.exp(np.cumsum(rng.normal(0.0, 0.15, 2 * n)))
        noise = np.exp(rng.normal(0.0, 0.05, (2, n)))
        spec, base = interleaved(prompt * drift[:n] * noise[0] / true, prompt * drift[:n] * noise[1])
        point = summarize(spec).output_tokens_per_s / summarize(base).output_tokens_per_s
        ci = speedup_ci(spec, base, point, seed=rep, reps=1000)
        paired += ci.low <= true <= ci.high
        widths.append(ci.high / ci.low)
        seq_spec = timed(prompt * drift[:n] * noise[0] / true)
        seq_base = timed(prompt * drift[n:] * noise[1])
        point = summarize(seq_spec).output_tokens_per_s / summarize(seq_base).output_tokens_per_s
        ci = speedup_ci(seq_spec, seq_base, point, seed=rep, reps=1000)
        sequential += ci.low <= true <= ci.high
    assert 0.90 <= paired / 200 <= 0.99, paired
    assert sequential / 200 < 0.80, sequential
    assert np.median(widths) < 1.15  # pairing removes the prompts' spread: a ±7% interval from 16 pairs


def test_comparisons_of_interleaved_runs_count_their_pairs():
    spec, base = interleaved([1.0, 1.1, 0.9, 1.0], [2.0, 2.1, 1.9, 2.2])
    mk = lambda recs, on: Run(workload="chat", speculation=on, concurrency=1, started_at="t", completed=True,
                              requests=recs, summary=summarize(recs))
    (c,) = comparisons([mk(spec, True), mk(base, False)])
    assert c.paired_requests == 4 and c.verdict == "faster" and c.speedup_ci.low > 1.5


def test_block_schedule_alternates_abba_and_sends_the_same_requests_in_both_modes():
    sched = block_schedule(10, 4)
    assert [(j, on) for j, on, _ in sched] == [(0, True), (0, False), (1, False), (1, True),
                                               (2, True), (2, False), (3, False), (3, True)]
    sent = {on: [i for j, o, r in sched if o == on for i in r] for on in (True, False)}
    assert sent[True] == sent[False] == list(range(10))
    assert all(r == r2 for (j, _, r), (j2, _, r2) in zip(sched[::2], sched[1::2]))


# ---- small samples and degenerate resamples (stats, bootstrap docstrings) ----------------------------

def test_the_widening_uses_students_t_at_every_dof():
    """The widening's t quantile is Student's (scipy's) from 1 degree of freedom up: a Cornish-Fisher
    expansion alone is 44% low at 1 and 10% at 2, too narrow intervals over 2-3 requests. Seen through
    mean_ci over two values: every resampled mean deviates by 0 or ±1, widened by sqrt(2) t(1) / z."""
    t = pytest.importorskip("scipy.stats").t
    from trtspec.confidence import Z95
    from trtspec.perf.bootstrap import t975

    for dof in range(1, 101):
        assert t975(dof) == pytest.approx(t.ppf(0.975, dof), abs=1e-4), dof
    ci = mean_ci([1.0, 3.0])
    half = np.sqrt(2) * t.ppf(0.975, 1) / Z95
    assert (ci.low, ci.high) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-4)


@pytest.mark.parametrize("blocks", [False, True])
def test_zero_token_resamples_count_alike_in_either_run(blocks):
    """A resample of only zero-token successes has no rate: it is dropped whichever run drew it, so
    swapping the runs gives the reciprocal interval (keeping it as a rate 0 for the speculative run but
    an inf dropped for the baseline gave a lower end of 0 one way round, 0.33 the other), and numpy
    warns of no division by zero."""
    def run(tokens):
        return [RequestRecord(index=i, prompt_id=f"p{i}", start_s=float(i), status="ok", ttft_s=0.1, e2e_s=1.0,
                              output_tokens=n, block=i if blocks else None) for i, n in enumerate(tokens)]

    zeros, full = run([0, 0, 30]), run([30, 30, 30])
    point = summarize(zeros).output_tokens_per_s / summarize(full).output_tokens_per_s
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ci = speedup_ci(zeros, full, point)
        swapped = speedup_ci(full, zeros, 1 / point)
        rate = summarize(zeros).tokens_per_s_ci
    assert 0 < ci.low <= point <= ci.high < np.inf
    assert (ci.low, ci.high) == pytest.approx((1 / swapped.high, 1 / swapped.low), rel=1e-9)
    assert rate.low > 0  # a run's own interval drops the zero-token resamples too


def test_a_latency_interval_over_a_few_skewed_requests_stays_at_or_above_zero():
    """Three requests, one queued behind a context phase (TTFT 50, 50, 500 ms): the widened interval of
    the mean is symmetric and reached -203 ms, a mean time no run can have. Its low end is held at 0,
    its high end is the bootstrap's; an interval already above 0 is unchanged."""
    def recs(ttfts):
        return [RequestRecord(index=i, prompt_id=f"p{i}", start_s=float(i), status="ok", ttft_s=t, e2e_s=t + 1.0,
                              itl_s=t / 10, output_tokens=11) for i, t in enumerate(ttfts)]

    skewed = [0.05, 0.05, 0.5]
    assert mean_ci(skewed).low < 0  # the plain widened interval (stats docstring: 2.69x at 3 requests)
    s = summarize(recs(skewed))
    for ci, xs in ((s.ttft_mean_ci_s, skewed), (s.itl_mean_ci_s, [t / 10 for t in skewed])):
        assert ci.low == 0.0 and ci.high == pytest.approx(mean_ci(xs).high)
    even = [0.1, 0.12, 0.11, 0.13, 0.1, 0.12]
    assert summarize(recs(even)).ttft_mean_ci_s == mean_ci(even) and mean_ci(even).low > 0


@pytest.mark.parametrize("rate", [None, 2.0])
def test_a_baseline_without_tokens_gives_no_speedup_rather_than_0x(rate):
    """Every baseline request timed out (speculation off too slow for perf.timeout_s): there is no
    baseline rate, so no comparison, as the report's headline already has none; a row said
    'speedup 0.00x', speculation read as useless when it was the only mode that answered."""
    spec = timed(np.full(6, 2.0))
    base = [RequestRecord(index=i, prompt_id=f"p{i}", start_s=float(i), status="timeout", error="no final response")
            for i in range(6)]
    mk = lambda recs, on: Run(workload="chat", speculation=on, concurrency=None if rate else 1,  # noqa: E731
                              request_rate=rate, started_at="t", completed=True, requests=recs, summary=summarize(recs))
    assert comparisons([mk(spec, True), mk(base, False)]) == []
    assert len(comparisons([mk(spec, True), mk(spec, False)])) == 1


@pytest.mark.parametrize("sampled", [False, True])
def test_a_speculation_run_without_successes_gives_no_speedup_and_no_parity(sampled):
    """Every speculative request failed: there is no rate to divide, as for a failed baseline, and
    the report's headline shows no comparison; results.json and the summary said 'speedup 0.00x',
    and a sampled run's parity 'consistent' over zero outputs."""
    spec = [RequestRecord(index=i, prompt_id=f"p{i}", start_s=float(i), status="error", error="boom")
            for i in range(6)]
    base = timed(np.full(6, 2.0))
    mk = lambda recs, on: Run(workload="chat", speculation=on, concurrency=1, started_at="t",  # noqa: E731
                              completed=True, requests=recs, summary=summarize(recs),
                              sampling={"temperature": 0.8} if sampled else None)
    runs = [mk(spec, True), mk(base, False)]
    assert comparisons(runs) == []
    assert [h.comparison for h in headlines(PerfResults(
        created="t", trtspec_version="0", completed=True, runs=runs,
        settings=Settings(url="u", model="m", workloads={"chat": "c"}, warmup=0, timeout_s=1.0, max_tokens=8,
                          baseline=True, seed=0)))] == [None]


def test_an_interval_end_off_one_is_never_printed_as_1_00x():
    """A 'faster' interval [1.003, 1.30] printed with two decimals reads [1.00x, 1.30x], as if it
    touched 1.0: such an interval gets a third decimal; others keep two."""
    from trtspec.perf.compare import ci_text
    from trtspec.perf.schema import Interval

    assert ci_text(Interval(low=1.003, high=1.3)) == "[1.003x, 1.300x]"
    assert ci_text(Interval(low=0.7, high=0.9996)) == "[0.700x, 1.000x]"  # just below 1: 'slower'
    assert ci_text(Interval(low=0.85, high=1.47)) == "[0.85x, 1.47x]"
    assert ci_text(Interval(low=1.0, high=1.2)) == "[1.00x, 1.20x]"  # exactly 1 is exactly 1
    assert ci_text(None) == "-"
