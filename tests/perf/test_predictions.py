"""The comparison rows and their tuned-band prediction (trtspec/perf/compare.py): the band rule, the
end-to-end prediction with the stalls of other requests' context phases, open loops, and the speedup
sentence with its acceptance lengths."""

from __future__ import annotations

import random

import numpy as np
import pytest

from closed_loop import closed_loop, open_loop
from perf.test_stats import run
from trtspec.perf.compare import comparisons, speedup_line
from trtspec.perf.headline import headlines
from trtspec.perf.schema import PerfResults, RequestRecord, Run, Settings
from trtspec.perf.stats import al_ci, end_to_end_prediction, inflight, prediction_fit, stall_s, summarize
from trtspec.triton_repo.models.serving_rules import pick_band


class Band:
    def __init__(self, concurrency, draft_len, speedup, al, al_se=None, base_step=0.01):
        self.concurrency, self.draft_len, self.eagle_choices = concurrency, draft_len, None
        self.speedup, self.acceptance_length, self.acceptance_length_se = speedup, al, al_se
        self.baseline_step_time_s = base_step


class Tuning:
    def __init__(self, workloads):
        self.workloads = workloads


class WorkloadBands:
    def __init__(self, bands):
        self.bands = bands


def test_band_rule_matches_generate_pick_band():
    bands = [Band(16, 1, 1.1, 1.5), Band(1, 4, 2.0, 3.0), Band(4, 2, 1.5, 2.2)]
    assert [pick_band(bands, c).concurrency for c in (1, 2, 3, 4, 8, 16, 64)] == [1, 1, 1, 4, 4, 16, 16]
    assert pick_band([Band(4, 2, 1.5, 2.2)], 1).concurrency == 4  # below every band: the smallest


def test_comparisons_pair_spec_with_baseline_and_predict_from_the_served_band():
    runs = [run("chat", True, 1, 1), run("chat", False, 1, 2), run("chat", True, 8, 3), run("chat", False, 8, 4),
            run("code", True, 1, 5)]  # code has no baseline: no row
    for r in runs[2].requests:
        r.route = None  # no route labels: the band its load picks (pick_band(bands, 8): 4)
    tuning = Tuning({"chat": WorkloadBands([Band(1, 4, 2.0, 3.0), Band(4, 2, 1.5, 2.2)])})
    rows = comparisons(runs, tuning)
    assert [(r.workload, r.concurrency) for r in rows] == [("chat", 1), ("chat", 8)]
    for row, (spec, base) in zip(rows, [(runs[0], runs[1]), (runs[2], runs[3])]):
        assert row.speedup == pytest.approx(spec.summary.output_tokens_per_s / base.summary.output_tokens_per_s)
        assert row.acceptance_length == spec.summary.acceptance_length
    assert (rows[0].predicted_draft_len, rows[0].predicted_step_speedup) == (4, 2.0)
    b = runs[1].summary  # the prediction is made end to end with the baseline's own TTFT and E2E
    assert rows[0].predicted_speedup == pytest.approx(end_to_end_prediction(2.0, b.ttft_s.mean, b.e2e_s.mean))
    assert rows[0].decode_speedup == pytest.approx(b.itl_s.mean / runs[0].summary.itl_s.mean)
    assert 1.0 < rows[0].predicted_speedup < 2.0
    assert (rows[1].predicted_draft_len, rows[1].predicted_acceptance_length) == (2, 2.2)
    assert comparisons(runs)[0].predicted_speedup is None


def test_the_prediction_is_the_mix_of_the_bands_the_route_labels_name():
    spec, base = run("chat", True, None, 1), run("chat", False, None, 2)
    spec.request_rate = base.request_rate = 2.0
    ok = [r for r in spec.requests if r.status == "ok"]
    for i, r in enumerate(ok):  # a quarter of the requests found 4 in flight at their arrival
        r.route = "chat@4:K=2" if i % 4 == 0 else "chat@1:K=4:ngram:n=2"
        r.output_tokens = 40 if i % 4 == 0 else 10  # the c=4 requests wrote longer answers
    n4 = len(ok[::4])
    n1, t4, t1 = len(ok) - n4, 40 * n4, 10 * (len(ok) - n4)
    bands = [Band(1, 4, 2.0, 3.0, 0.2), Band(4, 2, 1.5, 2.2, 0.1)]
    row = comparisons([spec, base], Tuning({"chat": WorkloadBands(bands)}))[0]
    assert row.predicted_served_bands == {1: n1, 4: n4}
    # decode times add: the harmonic mean of the per-step speedups weighted by the bands' tokens, and
    # of the ALs (tokens per step); a plain mean over requests would weigh the long c=4 answers 1/4
    assert row.predicted_step_speedup == pytest.approx((t1 + t4) / (t1 / 2.0 + t4 / 1.5))
    assert row.predicted_acceptance_length == pytest.approx((t1 + t4) / (t1 / 3.0 + t4 / 2.2))
    assert row.predicted_step_speedup < len(ok) / (n1 / 2.0 + n4 / 1.5)
    assert 0.1 < row.predicted_acceptance_length_se < 0.2 and row.predicted_draft_len == 4  # the commonest band's K
    # bands priced batched: a c=4 baseline step twice as long makes its tokens weigh twice in time
    slow = [Band(1, 4, 2.0, 3.0, 0.2), Band(4, 2, 1.5, 2.2, 0.1, base_step=0.02)]
    row = comparisons([spec, base], Tuning({"chat": WorkloadBands(slow)}))[0]
    assert row.predicted_step_speedup == pytest.approx((t1 + 2 * t4) / (t1 / 2.0 + 2 * t4 / 1.5))
    assert row.predicted_acceptance_length == pytest.approx((t1 + t4) / (t1 / 3.0 + t4 / 2.2))  # AL: tokens only
    same = [Band(1, 4, 2.0, 3.0, 0.2), Band(4, 4, 2.0, 3.0, 0.2)]  # one setting in both bands: its SE is kept
    for r in ok[::4]:
        r.route = "chat@4:K=4:ngram:n=2"
    row = comparisons([spec, base], Tuning({"chat": WorkloadBands(same)}))[0]
    assert row.predicted_served_bands == {1: n1, 4: n4}
    assert row.predicted_acceptance_length_se == pytest.approx(0.2) and row.predicted_step_speedup == pytest.approx(2.0)
    # labels the tuning cannot have written: another band, another K, the default route of an unknown workload
    for label in ("chat@2:K=3", "chat@4:K=3", "default@1:K=4"):
        ok[0].route = label
        row = comparisons([spec, base], Tuning({"chat": WorkloadBands(bands)}))[0]
        assert row.predicted_served_bands is None and row.predicted_step_speedup in (2.0, 1.5)  # the load's band


def test_end_to_end_prediction_keeps_the_first_token():
    """Speculation shortens what follows the first token: a 2x step speedup on requests of 3 s whose
    first token takes 1 s is (1 + 2) / (1 + 2 / 2) = 1.5x end to end."""
    assert end_to_end_prediction(2.0, 1.0, 3.0) == pytest.approx(1.5)
    assert end_to_end_prediction(2.0, 0.0, 3.0) == pytest.approx(2.0)
    assert end_to_end_prediction(1.0, 1.0, 3.0) == pytest.approx(1.0)  # K=0 against off stays 1
    assert end_to_end_prediction(0.8, 1.0, 3.0) == pytest.approx(3.0 / (1.0 + 2.0 / 0.8))  # a slowdown dilutes too
    assert end_to_end_prediction(2.0, None, 3.0) == 2.0 and end_to_end_prediction(2.0, 3.0, 3.0) == 2.0
    assert end_to_end_prediction(None, 1.0, 3.0) is None


def _records(done) -> list[RequestRecord]:
    return [RequestRecord(index=i, prompt_id=str(i), start_s=r.start, status="ok", ttft_s=r.ttft, e2e_s=r.e2e,
                          chunk_gaps_s=[b - a for a, b in zip(r.chunk_times, r.chunk_times[1:])],
                          output_tokens=r.tokens) for i, r in enumerate(done)]


@pytest.mark.parametrize("c, prefill, chunks", [(1, 0.2, 1), (4, 0.2, 1), (4, 0.004, 1), (8, 0.5, 1), (4, 0.2, 4)])
def test_the_prediction_counts_the_other_requests_context_phases_under_concurrency(c, prefill, chunks):
    """Against a simulated in-flight-batching engine (tests/closed_loop.py): 100 steps of 10 ms, or
    50 steps of 12.5 ms carrying 2 tokens each (a 1.6x step speedup); context phases whole or in
    chunks run beside the decode steps. The baseline's own gaps give the time its decode stood still
    for the others' context phases, and the prediction lands on the simulated speedup; without it,
    long prompts under concurrency are over-predicted."""
    base = closed_loop(c, prefill, steps=100, step=0.010, requests=400, chunks=chunks)
    spec = closed_loop(c, prefill, steps=50, step=0.0125, tokens_per_step=2, requests=400, chunks=chunks)
    assert {r.tokens for r in base} == {r.tokens for r in spec} == {101}
    measured = np.mean([r.e2e for r in base]) / np.mean([r.e2e for r in spec])  # closed loop: tokens/s ratio
    records = _records(base)
    ttft, e2e = np.mean([r.ttft_s for r in records]), np.mean([r.e2e_s for r in records])
    stall = stall_s(records, c)
    assert stall == pytest.approx((c - 1) * prefill if prefill > 1.5 * 0.010 else 0.0, abs=0.01 * e2e)
    assert end_to_end_prediction(1.6, ttft, e2e, stall) == pytest.approx(measured, rel=0.01)
    if c > 1 and prefill > 0.1:
        assert end_to_end_prediction(1.6, ttft, e2e) > 1.1 * measured  # what leaving the stall out does


@pytest.mark.parametrize("rate, prefill, chunks", [(0.5, 0.2, 1), (2, 0.2, 1), (3, 0.2, 1), (2, 0.05, 1),
                                                   (1, 0.5, 1), (2, 0.2, 4)])
def test_an_open_loop_prediction_keeps_only_the_context_phases_queued_when_the_decode_starts(rate, prefill, chunks):
    """Poisson arrivals into the simulated engine (tests/closed_loop.py), the same seeded arrivals for
    1.6x faster steps: requests arriving during a decode are rate x its length, so their context
    phases shrink with it and only those already queued at its first token stay. Little's law holds
    for the load the run reports; the prediction lands within 3% where keeping every stall (as a
    closed loop must) under-predicts high loads by far more."""
    base = open_loop(rate, prefill, steps=100, step=0.010, requests=4000, chunks=chunks, seed=1)
    spec = open_loop(rate, prefill, steps=50, step=0.0125, tokens_per_step=2, requests=4000, chunks=chunks, seed=1)
    measured = np.mean([r.e2e for r in base]) / np.mean([r.e2e for r in spec])  # per-request speeds
    records = _records(base)
    ttft, e2e = np.mean([r.ttft_s for r in records]), np.mean([r.e2e_s for r in records])
    load = inflight(records)
    assert load - 1 == pytest.approx(rate * e2e, rel=0.05)  # Little's law, with the simulated arrival rate
    predicted = end_to_end_prediction(1.6, ttft, e2e, stall_s(records, load, open_loop=True))
    assert predicted == pytest.approx(measured, rel=0.03)
    if rate * prefill >= 0.4:
        assert end_to_end_prediction(1.6, ttft, e2e, stall_s(records, load)) < 0.9 * measured


def test_a_stall_is_a_gap_over_1_5_typical_steps_and_jitter_is_not():
    rec = RequestRecord(index=0, prompt_id="0", start_s=0.0, status="ok", ttft_s=0.3, e2e_s=1.0,
                        chunk_gaps_s=[0.01] * 8 + [0.014, 0.5], output_tokens=11)
    assert stall_s([rec], 4) == pytest.approx(0.49)  # 0.014: jitter under 1.5 typical steps, not counted
    assert stall_s([rec], 2) == pytest.approx(0.3)  # at most c - 1 context phases of at most a TTFT each
    assert stall_s([rec], 1) == 0.0  # no other request
    assert stall_s([rec], 4, open_loop=True) == 0.0  # the long gaps came late: arrivals during the decode
    lead = rec.model_copy(update={"chunk_gaps_s": [0.3, 0.2] + [0.01] * 8 + [0.5]})
    assert stall_s([lead], 4, open_loop=True) == pytest.approx(0.48)  # only the streak the decode began with
    assert stall_s([lead], 4) == pytest.approx(0.9)  # closed loop: all (0.97), capped at 3 TTFTs
    assert stall_s([rec.model_copy(update={"chunk_gaps_s": []})], 4) is None
    bursts = rec.model_copy(update={"chunk_gaps_s": [0.0] * 8 + [0.01, 0.5]})  # a client reading in bursts
    assert stall_s([bursts], 4) is None
    assert end_to_end_prediction(2.0, 1.0, 3.0, 0.5) == pytest.approx(3.0 / (1.5 + 1.5 / 2))
    assert end_to_end_prediction(2.0, 1.0, 3.0, 9.0) == pytest.approx(1.0)  # a stall cannot exceed the decode


def _open_loop_run(spec: bool, e2e: float) -> Run:
    """20 Poisson-like arrivals every 0.5 s, 32 tokens each, E2E around `e2e` (±10%, seeded)."""
    rng = random.Random(7 + spec)
    recs = [RequestRecord(index=i, prompt_id=f"p{i}", start_s=0.5 * i, status="ok", ttft_s=0.05, output_tokens=32,
                          e2e_s=e2e * rng.uniform(0.9, 1.1)) for i in range(20)]
    return Run(workload="chat", speculation=spec, request_rate=2.0, started_at="2026-01-01T00:00:00+00:00",
               completed=True, requests=recs, summary=summarize(recs))


def test_an_open_loop_compares_how_fast_requests_complete_not_the_arrival_rate():
    """Both runs are offered the same arrivals: their window throughputs differ by ~10% (the last
    request's E2E) while every request completes twice as fast. The speedup is the per-request one,
    in the comparisons, the report's headline and the interval alike."""
    spec, base = _open_loop_run(True, 1.0), _open_loop_run(False, 2.0)
    window = spec.summary.output_tokens_per_s / base.summary.output_tokens_per_s
    assert 1.0 < window < 1.2
    (row,) = comparisons([spec, base])
    assert row.speedup == pytest.approx(2.0, rel=0.05) and row.speedup_ci.low < row.speedup < row.speedup_ci.high
    assert row.speedup_ci.low > 1.5 and row.verdict == "faster" and row.predicted_speedup is None
    assert row.tokens_per_s / row.baseline_tokens_per_s == pytest.approx(row.speedup)
    settings = Settings(url="127.0.0.1:1", model="generate", workloads={"chat": "mt-bench"}, warmup=0, timeout_s=1,
                        max_tokens=32, baseline=True, seed=0)
    results = PerfResults(created="now", trtspec_version="0", settings=settings, completed=True, runs=[spec, base],
                          comparisons=[row])
    (head,) = headlines(results)
    assert head.comparison.speedup == pytest.approx(row.speedup) and head.load == "rate=2/s" and head.per_request
    from trtspec.perf.report import render_report

    assert render_report(results).count('<span class="ci">per request</span>') == 2  # both rates of the row
    assert head.tokens_per_s_ci.low < head.tokens_per_s < head.tokens_per_s_ci.high
    closed = [run("chat", True, 4, 1), run("chat", False, 4, 2)]  # closed loop: window throughputs, as before
    assert not any(h.per_request for h in headlines(results.model_copy(update={"runs": closed, "comparisons": []})))
    assert comparisons(closed)[0].speedup == pytest.approx(
        closed[0].summary.output_tokens_per_s / closed[1].summary.output_tokens_per_s)


def test_an_open_loop_is_predicted_with_the_band_its_load_picks(tmp_path):
    """tuning.json serves K=3 from 1 request in flight and K=2 from 4: requests arriving every 0.5 s
    that take 1 s find ~2.9 in flight (band 1), those that take 4 s ~6.9 (band 4)."""
    from triton_fixtures import tuning_file
    from trtspec.tuning.tuning_schema import load_tuning

    tuning = load_tuning(tuning_file(tmp_path / "tuning.json", "draft-target", {"chat": [3, 2]}, bands=(1, 4)))
    base = _open_loop_run(False, 2.0)
    for e2e, band in ((1.0, 1), (4.0, 4)):
        spec = _open_loop_run(True, e2e)
        (row,) = comparisons([spec, base], tuning)
        served = pick_band(tuning.workloads["chat"].bands, band)
        assert row.predicted_draft_len == served.draft_len and row.predicted_step_speedup == served.speedup
        assert row.predicted_speedup == pytest.approx(end_to_end_prediction(served.speedup, 0.05,
                                                                            base.summary.e2e_s.mean))  # no gaps: no stall
        assert row.prediction_fit is not None


def test_the_speedup_sentence_carries_the_al_with_its_interval_against_the_predicted_al():
    runs = [run("chat", True, 1, 1), run("chat", False, 1, 2)]
    tuning = Tuning({"chat": WorkloadBands([Band(1, 4, 2.0, 3.0)])})
    (row,) = comparisons(runs, tuning)
    ci = row.acceptance_length_ci
    assert ci == al_ci(runs[0].requests) and ci.low < row.acceptance_length < ci.high
    line = speedup_line(row)
    # the band records no standard error: unknown, said as the tuner's table does, not left out
    assert f"AL {row.acceptance_length:.2f} [{ci.low:.2f}, {ci.high:.2f}] measured, 3.00 ±? predicted (" in line
    assert prediction_fit(3.0, ci) in line
    assert "AL" not in speedup_line(row.model_copy(update={"acceptance_length_ci": None}))  # older results.json
    # the predicted AL is measured too (the profile, other prompts): its own ±1.96 se is shown, and a miss
    # it reaches across is said so
    above = ci.high + 0.1
    (row,) = comparisons(runs, Tuning({"chat": WorkloadBands([Band(1, 4, 2.0, above, 0.1)])}))
    assert row.predicted_acceptance_length_se == 0.1
    assert f", {above:.2f} ±0.20 predicted (" in speedup_line(row)
    assert speedup_line(row).count(", inside its own ±0.20") == 1
    (row,) = comparisons(runs, Tuning({"chat": WorkloadBands([Band(1, 4, 2.0, above, 0.04)])}))
    assert "±0.08 predicted" in speedup_line(row) and "inside its own" not in speedup_line(row)


def test_a_predicted_al_without_a_standard_error_says_it_is_unknown():
    """A band profiled on one prompt has no AL standard error (tuning select.se_unknown): the sentence
    `trtspec perf` and `trtspec run` print shows '±?' after its AL, as the tuner's table does; the
    AL 1 of no speculation is exact and gets no ±; a mix of bands one of which has none is unknown."""
    from trtspec.perf.compare import predicted_al_pm

    runs = [run("chat", True, 1, 1), run("chat", False, 1, 2)]
    (row,) = comparisons(runs, Tuning({"chat": WorkloadBands([Band(1, 4, 2.0, 3.0, None)])}))
    assert row.predicted_acceptance_length_se is None
    assert ", 3.00 ±? predicted (" in speedup_line(row)
    (off,) = comparisons(runs, Tuning({"chat": WorkloadBands([Band(1, 0, 1.0, 1.0, 0.0)])}))
    assert ", 1.00 predicted (" in speedup_line(off)
    assert predicted_al_pm(1.0, None, 0) == "" and predicted_al_pm(None, None, None) == ""  # exact / no prediction
    assert predicted_al_pm(1.4, None, 0) == " ±?"  # off's draft length, but a mix's AL: not exact
    assert predicted_al_pm(3.0, 0.1, 4) == " ±0.20"
