"""The perf metric definitions (trtspec/perf/schema.py docstring) against numpy on made-up records,
the comparison rows and their tuned-band prediction, and the CSV views of results.json."""

from __future__ import annotations

import csv
import json
import random
import warnings

import numpy as np
import pytest

from closed_loop import closed_loop, open_loop
from trtspec.perf.client import Result
from trtspec.perf.compare import comparisons, speedup_line
from trtspec.perf.headline import headlines
from trtspec.perf.output import write_results
from trtspec.perf.schema import Interval, PerfResults, RequestRecord, Run, Settings, load_results
from trtspec.perf.load import block_schedule
from trtspec.perf.metrics import itl, to_record
from trtspec.perf.stats import (NO_DIFFERENCE, al_ci, end_to_end_prediction, inflight, mean_ci, pair_up, percentiles,
                                prediction_fit, requests_for, speedup_ci, stall_s, summarize, token_weighted_al, verdict)
from trtspec.triton_repo.models.serving_rules import pick_band


def fake_results(seed: int, n: int = 40) -> list[Result]:
    rng = random.Random(seed)
    out, t = [], 100.0
    for i in range(n):
        t += rng.uniform(0, 0.05)
        r = Result(f"p{i % 7}", t)
        roll = rng.random()
        if roll < 0.1:
            r.status, r.error = "timeout", "no final response within 1 s"
        elif roll < 0.15:
            r.status, r.error, r.e2e = "error", "boom", 0.01
        else:
            tokens = rng.choice([1, 2, 5, 17, 40])
            ttft = rng.uniform(0.01, 0.2)
            gaps = sorted(rng.uniform(0, 1) for _ in range(tokens - 1))
            r.token_times = [t + ttft] + [t + ttft + g for g in gaps]
            r.ttft, r.e2e = ttft, ttft + (gaps[-1] if gaps else 0.0) + rng.uniform(0, 0.01)
            r.output_tokens, r.acceptance_length = tokens, rng.uniform(1.0, 4.0)
            r.num_draft_tokens, r.route = 3, "chat@1:K=3"
        out.append(r)
    return out


def test_itl_is_genai_perfs_definition():
    assert itl(1.0, 0.2, 5) == pytest.approx(0.2)
    assert itl(1.0, 0.2, 1) is None and itl(None, 0.2, 5) is None and itl(1.0, None, 3) is None


def test_percentiles_match_numpy_linear():
    xs = [random.Random(3).expovariate(1.0) for _ in range(101)]
    p = percentiles(xs + [None])
    assert (p.p50, p.p90, p.p99) == pytest.approx(tuple(np.percentile(xs, [50, 90, 99])), rel=1e-12)
    assert p.mean == pytest.approx(np.mean(xs))
    assert percentiles([]).p50 is None and percentiles([2.0]).p99 == 2.0


def test_token_weighted_acceptance_length_is_tokens_over_steps():
    pairs = [(10, 2.0), (30, 3.0), (5, None), (0, 2.0), (8, 1.0)]
    # steps: 5 + 10 + 8 = 23 for 48 tokens; a plain mean of the ALs would be 2.0
    assert token_weighted_al(pairs) == pytest.approx(48 / 23)
    assert token_weighted_al([(3, None)]) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summary_recomputed_independently(seed):
    results = fake_results(seed)
    start = results[0].start - 0.5
    records = [to_record(i, r, start) for i, r in enumerate(results)]
    s = summarize(records)
    ok = [r for r in results if r.status == "ok"]
    assert s.requests_ok == len(ok) and s.errors + s.timeouts + s.requests_ok == len(results)
    assert s.timeouts == sum(r.status == "timeout" for r in results)
    window = max(r.start + r.e2e for r in ok) - min(r.start for r in results)
    tokens = sum(r.output_tokens for r in ok)
    assert s.window_s == pytest.approx(window) and s.output_tokens == tokens
    assert s.output_tokens_per_s == pytest.approx(tokens / window) and s.requests_per_s == pytest.approx(len(ok) / window)
    assert s.acceptance_length == pytest.approx(tokens / sum(r.output_tokens / r.acceptance_length for r in ok))
    itls = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    assert s.itl_s.p90 == pytest.approx(np.percentile(itls, 90)) and s.itl_s.mean == pytest.approx(np.mean(itls))
    assert s.ttft_s.p99 == pytest.approx(np.percentile([r.ttft for r in ok], 99))
    assert s.e2e_s.p50 == pytest.approx(np.percentile([r.e2e for r in ok], 50))
    for rec, r in zip(records, results):
        assert rec.start_s == pytest.approx(r.start - start)
        if r.status == "ok":
            assert rec.chunk_gaps_s == pytest.approx(list(np.diff(r.token_times)))
            assert rec.responses == r.output_tokens  # one token per response in these made-up records
        else:
            assert rec.ttft_s is None and rec.itl_s is None and rec.error


def run(workload, spec, concurrency, seed) -> Run:
    recs = [to_record(i, r, 99.0) for i, r in enumerate(fake_results(seed, 20))]
    return Run(workload=workload, speculation=spec, concurrency=concurrency, started_at="2026-01-01T00:00:00+00:00",
               completed=True, requests=recs, summary=summarize(recs))


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


def test_csv_files_agree_with_results_json(tmp_path):
    settings = Settings(url="127.0.0.1:1", model="generate", workloads={"chat": "mt-bench"}, warmup=0, timeout_s=1,
                        max_tokens=8, baseline=True, seed=0)
    runs = [run("chat", True, 1, 1), run("chat", False, 1, 2)]
    res = PerfResults(created="now", trtspec_version="0", settings=settings, completed=True, runs=runs,
                      comparisons=comparisons(runs))
    write_results(res, tmp_path)
    back = load_results(tmp_path / "results.json")
    assert back == res and json.loads((tmp_path / "results.json").read_text())["schema"] == "trtspec.perf/1"
    rows = list(csv.DictReader(open(tmp_path / "requests.csv")))
    recs = [(r, rec) for r in runs for rec in r.requests]
    assert len(rows) == len(recs)
    for row, (r, rec) in zip(rows, recs):
        assert row["speculation"] == str(r.speculation) and row["status"] == rec.status
        assert float(row["start_s"]) == rec.start_s and int(row["output_tokens"]) == rec.output_tokens
        assert [float(x) for x in row["chunk_gaps_s"].split()] == rec.chunk_gaps_s
        assert (row["ttft_s"] == "") == (rec.ttft_s is None)
    summary = list(csv.DictReader(open(tmp_path / "summary.csv")))
    for row, r in zip(summary, runs):
        assert float(row["output_tokens_per_s"]) == r.summary.output_tokens_per_s
        assert float(row["itl_s_p90"]) == r.summary.itl_s.p90 and int(row["timeouts"]) == r.summary.timeouts
        assert float(row["tokens_per_s_ci_low"]) == r.summary.tokens_per_s_ci.low
        assert float(row["itl_mean_ci_s_high"]) == r.summary.itl_mean_ci_s.high


@pytest.mark.slow
def test_perf_prompts_encode_to_the_ids_profiling_measured(smollm2_hf):
    """perf sends render_text (chat template text) and the repository's preprocessing encodes it with
    add_special_tokens=True; for SmolLM2 that is exactly the ids `trtspec profile` rendered."""
    from transformers import AutoTokenizer

    from trtspec.perf.prompts import load_all, parse_workloads, render_all
    from trtspec.workloads import render

    tok = AutoTokenizer.from_pretrained(str(smollm2_hf))
    workloads = load_all(parse_workloads({"chat": "mt-bench", "code": "humaneval"}), seed=0)
    texts = render_all(workloads, 0, tok, chat=True)
    for wl in workloads:
        by_id = {s.id: s for s in wl.samples}
        assert sorted(pid for pid, _ in texts[wl.name]) == sorted(by_id)
        for pid, text in texts[wl.name][:20]:
            assert text.startswith("<|im_start|>")
            assert tok.encode(text, add_special_tokens=True) == render(by_id[pid], tok)


def test_the_perf_command_module_imports_no_grpc_or_torch():
    """`trtspec --help` registers the perf command; that must not pull in grpc, tritonclient or torch."""
    import subprocess
    import sys

    code = ("import sys, trtspec.perf.command; "
            "print([m for m in ('grpc', 'tritonclient', 'torch', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- 95% intervals (stats module docstring) -------------------------------------------------------------

def timed(e2es, tokens=32) -> list[RequestRecord]:
    """Successful closed-loop (c = 1) requests with these E2Es, one after the other."""
    out, t = [], 0.0
    for i, e in enumerate(e2es):
        out.append(RequestRecord(index=i, prompt_id=f"p{i}", start_s=t, status="ok", ttft_s=e / 10, e2e_s=e,
                                 itl_s=e * 0.9 / (tokens - 1), output_tokens=tokens))
        t += e
    return out


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
