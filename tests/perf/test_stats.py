"""The perf metric definitions (trtspec/perf/schema.py docstring) against numpy on made-up records
and the CSV views of results.json. The record and run factories here (fake_results, run, timed) are
the ones tests/perf/test_bootstrap.py and tests/perf/test_predictions.py import."""

from __future__ import annotations

import csv
import json
import random

import numpy as np
import pytest

from trtspec.perf.client import Result
from trtspec.perf.compare import comparisons
from trtspec.perf.metrics import itl, to_record
from trtspec.perf.output import write_results
from trtspec.perf.schema import PerfResults, RequestRecord, Run, Settings, load_results
from trtspec.perf.stats import percentiles, summarize, token_weighted_al


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


def run(workload, spec, concurrency, seed) -> Run:
    recs = [to_record(i, r, 99.0) for i, r in enumerate(fake_results(seed, 20))]
    return Run(workload=workload, speculation=spec, concurrency=concurrency, started_at="2026-01-01T00:00:00+00:00",
               completed=True, requests=recs, summary=summarize(recs))


def timed(e2es, tokens=32) -> list[RequestRecord]:
    """Successful closed-loop (c = 1) requests with these E2Es, one after the other."""
    out, t = [], 0.0
    for i, e in enumerate(e2es):
        out.append(RequestRecord(index=i, prompt_id=f"p{i}", start_s=t, status="ok", ttft_s=e / 10, e2e_s=e,
                                 itl_s=e * 0.9 / (tokens - 1), output_tokens=tokens))
        t += e
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
