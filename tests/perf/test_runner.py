"""`trtspec perf` end to end against a real tritonserver serving the tiny draft-target repository.

One server per module (CpuServer, ~15 s to start). What the tests assert:
- closed loop at concurrency 1 and 2 with --baseline and --tuning: every request completes; each
  record's token count, acceptance length, K and route equal what an independent tritonclient
  streaming request gets for the same prompt (speculation on: the workload's tuned K; off: K=0,
  AL 1.0); the summaries recomputed here from the records with numpy equal the stored ones; the
  comparison rows carry speedup = tokens/s on / off and the tuned band's prediction; the CSVs agree
  with results.json; the command line prints one summary line per run;
- an open-loop run (Poisson arrivals) sends the planned number of requests, and its comparison divides
  per-request speeds, printed with the interval;
- sampled runs (--temperature): every request of both halves carries the settings and its prompt's
  seed (an independent request with them gets the same text), results.json records the settings,
  the comparison carries the distribution check (the cpu flavor's exact match with keyed draws:
  every speculative text equals its baseline's, so the check is consistent);
- clear errors: no server at the URL (within the connect timeout, naming the URL and `trtspec
  serve`), a model that is not there, a bad workload spec (before any server contact).
Fault tests (a server killed mid-run, requests beyond --timeout) are in test_perf_faults.py.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import json
import time

import numpy as np
import pytest

from cli_helpers import run_cli
from serve_helpers import DT, request, text_of, value
from triton_fixtures import cpu_repository, tiny_pair
from trtspec.errors import TrtspecError
from trtspec.options import Sampling
from trtspec.perf.genai_perf import export_for_options
from trtspec.perf import runner
from trtspec.perf.procs import Processes, shares
from trtspec.perf.runner import PerfOptions, PerfRunError, run_perf
from trtspec.perf.sampling import request_seed
from trtspec.perf.schema import PerfResults, load_results
from trtspec.triton_repo.ports import free_port, server_ports
from trtspec.triton_repo.serve import CpuServer

from .fake_triton import INFO, FakeTriton

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = {"chat": ["t5 t17 t300 t42 t9", "t11 t12 t13 t14"], "code": ["t9 t8 t7 t100", "t20 t21 t400"]}
MAX_TOKENS = 16
REQUESTS = 4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("perf").resolve()
    pair = tiny_pair(d)
    repo, tuning = cpu_repository(d, "draft-target", pair, DT)
    files = {}
    for name, texts in PROMPTS.items():
        files[name] = d / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps({"prompt": t, "id": f"{name}{i}"}) + "\n" for i, t in enumerate(texts)))
    server = CpuServer(repo, *server_ports(), log_file=d / "server.log").start(240)
    yield {"url": server.grpc_url, "tuning": tuning, "files": files, "dir": d}
    server.stop()


def options(served, out, **kw) -> PerfOptions:
    base = dict(url=served["url"], workloads={k: str(v) for k, v in served["files"].items()}, concurrency=[1, 2],
                requests=REQUESTS, warmup=1, timeout_s=60, max_tokens=MAX_TOKENS, progress=False, out=out)
    return PerfOptions(**{**base, **kw})


def test_closed_loop_with_baseline_end_to_end(served, tmp_path):
    out = tmp_path / "perf"
    res = run_perf(options(served, out, baseline=True, tuning=served["tuning"]))
    assert res.completed and res.error is None
    # which mode goes first alternates from load point to load point, workloads in turn (perf.order)
    assert [(r.workload, r.concurrency, r.speculation) for r in res.runs] == [
        (w, c, s) for i, (w, c) in enumerate((w, c) for w in ("chat", "code") for c in (1, 2))
        for s in ((True, False) if i % 2 == 0 else (False, True))]
    assert [r.sent_first for r in res.runs] == [[True], [False]] * 4
    expected = {}
    for r in res.runs:
        assert r.completed and len(r.requests) == REQUESTS and r.concurrency in (1, 2) and r.request_rate is None
        assert [q.index for q in r.requests] == list(range(REQUESTS))
        starts = [q.start_s for q in r.requests]
        assert starts == sorted(starts) and starts[0] >= 0
        k = DT[r.workload][0] if r.speculation else 0
        for q in r.requests:
            assert q.status == "ok" and q.error is None and q.prompt_id.startswith(r.workload)
            text = PROMPTS[r.workload][int(q.prompt_id[len(r.workload):])]
            key = (r.workload, text, r.speculation)
            if key not in expected:  # an independent request for the same prompt, same mode
                extra = {} if r.speculation else {"speculation": (False, "BOOL")}
                pieces, last = request(served["url"], text, r.workload, max_tokens=MAX_TOKENS, extra=extra)
                assert text_of(pieces)
                expected[key] = (value(last, "num_output_tokens"), value(last, "acceptance_length"),
                                 value(last, "num_draft_tokens"), value(last, "route"), len(pieces),
                                 hashlib.sha256(text_of(pieces).encode("utf-8")).hexdigest())
            n, al, kk, route, pieces, digest = expected[key]
            assert (q.output_tokens, q.num_draft_tokens, q.route, q.responses) == (n, k, route, pieces)
            assert q.output_sha256 == digest  # the whole streamed text, as an independent request got it
            assert kk == k and q.acceptance_length == pytest.approx(al, rel=1e-6)
            if not r.speculation:
                assert q.acceptance_length == 1.0 and route == f"{r.workload}:speculation-off:K=0"
            assert 0 < q.ttft_s <= q.e2e_s and q.itl_s == pytest.approx((q.e2e_s - q.ttft_s) / (n - 1))
            assert len(q.chunk_gaps_s) == pieces - 1 and sum(q.chunk_gaps_s) <= q.e2e_s - q.ttft_s + 1e-9
        # the summary, recomputed from the records
        s, ok = r.summary, r.requests
        window = max(q.start_s + q.e2e_s for q in ok) - min(q.start_s for q in ok)
        tokens = sum(q.output_tokens for q in ok)
        assert (s.requests_ok, s.errors, s.timeouts, s.output_tokens) == (REQUESTS, 0, 0, tokens)
        assert s.window_s == pytest.approx(window) and s.output_tokens_per_s == pytest.approx(tokens / window)
        assert s.requests_per_s == pytest.approx(REQUESTS / window)
        assert s.acceptance_length == pytest.approx(tokens / sum(q.output_tokens / q.acceptance_length for q in ok))
        for metric in ("ttft_s", "e2e_s", "itl_s"):
            xs = [getattr(q, metric) for q in ok]
            got = getattr(s, metric)
            assert (got.p50, got.p90, got.p99) == pytest.approx(tuple(np.percentile(xs, [50, 90, 99])))
        if r.speculation:
            assert s.acceptance_length > 1.0
    # greedy speculation is lossless: with and without it, each prompt's text is the same
    for w in ("chat", "code"):
        for text in {key[1] for key in expected if key[0] == w}:
            assert expected[(w, text, True)][5] == expected[(w, text, False)][5]
    assert len(res.comparisons) == 4
    for c in res.comparisons:
        on, off = sorted((r for r in res.runs if (r.workload, r.concurrency) == (c.workload, c.concurrency)),
                         key=lambda r: not r.speculation)
        assert c.speedup == pytest.approx(on.summary.output_tokens_per_s / off.summary.output_tokens_per_s)
        assert c.acceptance_length == on.summary.acceptance_length
        assert c.predicted_draft_len == DT[c.workload][0] and c.predicted_speedup > 0  # band 1 serves c <= 2
        assert c.predicted_acceptance_length >= 1.0
        assert c.order == ("on,off" if c.concurrency == 1 else "off,on") and c.order_ttft_gap_s is None  # one order
    # files: results.json is the returned object; the CSVs are views of it
    assert load_results(out / "results.json") == res
    rows = list(csv.DictReader(open(out / "requests.csv")))
    assert len(rows) == 8 * REQUESTS
    flat = [(r, q) for r in res.runs for q in r.requests]
    for row, (r, q) in zip(rows, flat):
        assert (row["workload"], row["speculation"], int(row["concurrency"])) == (r.workload, str(r.speculation),
                                                                                  r.concurrency)
        assert (row["prompt_id"], int(row["output_tokens"]), row["route"]) == (q.prompt_id, q.output_tokens, q.route)
        assert float(row["e2e_s"]) == q.e2e_s and float(row["acceptance_length"]) == q.acceptance_length
        assert row["output_sha256"] == q.output_sha256
    summary = list(csv.DictReader(open(out / "summary.csv")))
    assert [float(x["output_tokens_per_s"]) for x in summary] == [r.summary.output_tokens_per_s for r in res.runs]
    assert [float(x["ttft_s_p99"]) for x in summary] == [r.summary.ttft_s.p99 for r in res.runs]


def test_sampled_runs_carry_the_settings_and_a_distribution_check(served, tmp_path):
    res = run_perf(options(served, tmp_path / "sampled", baseline=True, concurrency=[2], temperature=0.8, top_p=0.95,
                           seed=4))
    want = Sampling(temperature=0.8, top_p=0.95)
    assert res.completed and res.settings.sampling == {w: want.model_dump() for w in PROMPTS}
    texts = {}
    for r in res.runs:
        assert r.sampling == want.model_dump() and r.output_words and r.sampling_fallbacks == 0
        for q in r.requests:
            assert q.status == "ok"
            texts.setdefault((r.workload, q.prompt_id), set()).add(q.output_sha256)
    assert all(len(v) == 1 for v in texts.values())  # same prompt, same seed: same text, spec or not
    workload, pid = next(iter(texts))
    text = PROMPTS[workload][int(pid[len(workload):])]
    seed = request_seed(4, want, workload, pid)
    extra = {"temperature": (0.8, "FP32"), "top_p": (0.95, "FP32"), "seed": (seed, "UINT64")}
    pieces, _ = request(served["url"], text, workload, max_tokens=MAX_TOKENS, extra=extra)
    assert {hashlib.sha256(text_of(pieces).encode("utf-8")).hexdigest()} == texts[(workload, pid)]
    greedy, _ = request(served["url"], text, workload, max_tokens=MAX_TOKENS)
    assert text_of(greedy) != text_of(pieces)
    assert len(res.comparisons) == 2
    for c in res.comparisons:
        assert c.sampling == "T=0.8 top_p=0.95" and c.parity is not None
        assert c.parity.identical_outputs == 1.0 and c.parity.consistent
        assert c.parity.requests == c.parity.baseline_requests == REQUESTS
        assert c.parity.lengths_ks == 0.0 and c.parity.words_chi2 == pytest.approx(0.0)
    assert load_results(tmp_path / "sampled" / "results.json") == res
    from trtspec.perf.report import render_report

    html = render_report(res)
    assert '<table id="parity">' in html and "T=0.8 top_p=0.95" in html and ">consistent<" in html
    assert '<table id="parity">' not in render_report(run_perf(options(served, tmp_path / "greedy", baseline=True,
                                                                       concurrency=[1], requests=2)))


def test_open_loop_and_the_command_line(served, tmp_path, capsys):
    out = tmp_path / "cli"
    code, stdout, stderr = run_cli(capsys, "perf", "--url", served["url"], "--workloads",
                                   f"chat={served['files']['chat']}", "--request-rate", "20", "--requests", "6",
                                   "--warmup", "0", "--max-tokens", "8", "--no-progress", "--out", out,
                                   "--baseline", "--export-genai-perf", tmp_path / "gp")
    assert code == 0, stderr
    res = load_results(out / "results.json")
    assert res.completed and len(res.runs) == 2
    # the genai-perf export of the same invocation (tests/perf/test_genai_perf.py checks its content) and the report
    gp_run = json.loads((tmp_path / "gp" / "genai_perf_export.json").read_text())["runs"][0]
    assert gp_run["request_rate"] == 20 and gp_run["argv"][gp_run["argv"].index("--request-count") + 1] == "6"
    assert 'id="plot-throughput"' in (out / "report.html").read_text() and f"wrote {out / 'report.html'}" in stdout
    r, b = res.runs
    assert r.concurrency is None and r.request_rate == 20 and len(r.requests) == 6
    assert all(q.status == "ok" and q.output_tokens > 0 for q in r.requests + b.requests)
    assert "chat         spec r=20/s" in stdout and f"wrote {out / 'results.json'}" in stdout
    # open loop: the speedup divides per-request speeds (tokens / E2E), printed with its interval
    (c,) = res.comparisons
    speed = [sum(q.output_tokens for q in x.requests) / sum(q.e2e_s for q in x.requests) for x in (r, b)]
    assert c.speedup == pytest.approx(speed[0] / speed[1]) and c.speedup_ci is not None
    assert f"speedup chat 20 req/s: {c.speedup:.2f}x [{c.speedup_ci.low:.2f}x, {c.speedup_ci.high:.2f}x]" in stdout


def test_no_server_is_a_clear_error_within_the_timeout(tmp_path, capsys):
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(TrtspecError, match=rf"no Triton server answers at 127.0.0.1:{port} .*trtspec serve"):
        run_perf(PerfOptions(url=f"127.0.0.1:{port}", workloads={"chat": "mt-bench"}, connect_timeout_s=2,
                             progress=False, out=tmp_path / "x"))
    assert time.monotonic() - t0 < 6
    code, _, stderr = run_cli(capsys, "perf", "--url", f"127.0.0.1:{port}", "--workloads", "chat=mt-bench",
                              "--connect-timeout", "1", "--out", tmp_path / "y")
    assert code == 2 and stderr.startswith("error: no Triton server answers at") and len(stderr.splitlines()) == 1
    assert not (tmp_path / "y").exists()


def test_missing_model_and_bad_workloads_are_clear_errors(served, tmp_path, capsys):
    with pytest.raises(TrtspecError, match=r"model 'nope' is not ready .*\(models: .*generate.*spec_decode"):
        run_perf(options(served, tmp_path / "a", model="nope"))
    code, _, stderr = run_cli(capsys, "perf", "--url", "127.0.0.1:1", "--workloads", "chat=/nowhere/x.jsonl",
                              "--out", tmp_path / "b")
    assert code == 2 and "/nowhere/x.jsonl" in stderr and stderr.startswith("error:")
    code, _, stderr = run_cli(capsys, "perf", "--url", "127.0.0.1:1", "--workloads", "a=mt-bench,a=humaneval",
                              "--out", tmp_path / "c")
    assert code == 2 and "workload name 'a' used twice" in stderr  # parsed before any server contact
    code, _, stderr = run_cli(capsys, "perf", "--url", "127.0.0.1:1", "--workloads", "chat=mt-bench",
                              "--concurrency", "1,x", "--out", tmp_path / "d")
    assert code == 2 and "--concurrency: expected comma-separated integers" in stderr


def test_interleaved_blocks_pair_each_request_with_its_prompts_baseline(served, tmp_path):
    """perf.blocks: the two runs are measured in alternating blocks, each block sending the same
    prompts in both modes; every record says its block, every successful request is paired, and the
    comparison's interval is the paired one (trtspec.perf.stats)."""
    res = run_perf(options(served, tmp_path / "perf", baseline=True, blocks=2, concurrency=[1],
                           workloads={"chat": str(served["files"]["chat"])}, tuning=served["tuning"]))
    spec, base = res.runs
    assert (spec.speculation, base.speculation) == (True, False) and res.settings.blocks == 2
    for run in (spec, base):
        assert run.completed and [q.block for q in run.requests] == [0, 0, 1, 1]
        assert [q.status for q in run.requests] == ["ok"] * REQUESTS
    assert [(q.block, q.prompt_id) for q in spec.requests] == [(q.block, q.prompt_id) for q in base.requests]
    assert {q.num_draft_tokens for q in base.requests} == {0} and {q.num_draft_tokens for q in spec.requests} != {0}
    (c,) = res.comparisons
    assert c.paired_requests == REQUESTS and c.speedup_ci is not None
    assert (spec.sent_first, base.sent_first, c.order) == ([True, False], [False, True], "on,off|off,on")
    gap, ci = c.order_ttft_gap_s, c.order_ttft_gap_ci_s  # both orders, two pairs each: a gap and its interval
    assert gap is not None and ci.low <= gap <= ci.high
    assert c.speedup_ci.low <= c.speedup <= c.speedup_ci.high
    windows = [max(q.start_s + q.e2e_s for q in spec.requests if q.block == j) -
               min(q.start_s for q in spec.requests if q.block == j) for j in (0, 1)]
    assert spec.summary.window_s == pytest.approx(sum(windows))
    on_disk = load_results(tmp_path / "perf" / "results.json")
    assert [q.block for q in on_disk.runs[1].requests] == [0, 0, 1, 1]


@pytest.mark.parametrize("kw, field", [(dict(blocks=2), "baseline"), (dict(blocks=2, baseline=True, duration_s=5.0), "requests"),
                                       (dict(blocks=2, baseline=True, processes=2), "processes"),
                                       (dict(blocks=5, baseline=True, requests=4), "requests"),
                                       (dict(blocks=17, baseline=True), "requests: not given, 16 by default"),
                                       (dict(blocks=17, baseline=True, concurrency=[4, 1]), "requests: not given, 16"),
                                       (dict(blocks=17, sweep=True), "requests: not given, 16")])
def test_blocks_need_a_baseline_a_request_count_and_one_client(kw, field, tmp_path):
    """... and no more blocks than requests per run, given or by default (8 x concurrency, at least 16:
    the lightest load point's count is the binding one)."""
    with pytest.raises(ValueError, match=rf"blocks: .*{field}"):
        PerfOptions(url="127.0.0.1:1", workloads={"chat": "mt-bench"}, out=tmp_path, **kw)
    assert PerfOptions(url="127.0.0.1:1", workloads={"chat": "mt-bench"}, out=tmp_path, blocks=8, baseline=True,
                       concurrency=[4]).blocks == 8  # 32 requests by default at concurrency 4: 4 per block


@pytest.mark.parametrize("kw", [dict(blocks=8, baseline=True, requests=8, concurrency=[4]),
                                dict(blocks=17, baseline=True, concurrency=[4]),
                                dict(blocks=4, sweep=True, requests=8, concurrency=[1, 4]),
                                dict(requests=2, concurrency=[4])])
def test_a_block_must_hold_as_many_requests_as_the_concurrency_it_is_labelled(kw, tmp_path):
    """Each block is a closed loop started afresh: 8 requests in 8 blocks at concurrency 4 had one
    request in flight at a time (measured through the runner with a fake stream), yet the runs said
    c=4, and the comparison's band and the calibration's batch were read from that label."""
    with pytest.raises(ValueError, match=r"(blocks|requests): at concurrency 4, .* fewer than the 4 to keep in flight"):
        PerfOptions(url="127.0.0.1:1", workloads={"chat": "mt-bench"}, out=tmp_path, **kw)


def test_prompts_the_server_would_refuse_are_left_out_before_the_runs(served, tmp_path):
    """The tiny target has 256 positions: `generate` refuses a 250-token prompt with 16 output tokens
    (its own error, the oracle below). perf leaves such a prompt out before any request, with one
    warning saying how many and why, instead of counting it as an error in every run (or failing
    the baseline probe with a reason that blames speculation=false); none left is a clear error."""
    long_text = " ".join(f"t{5 + i}" for i in range(250))
    prompts = tmp_path / "long.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t, "id": i}) + "\n" for i, t in
                               (("long", long_text), ("short", "t5 t17 t300"))))
    with pytest.raises(Exception, match="250-token prompt exceed this repository's max_seq_len=256"):
        request(served["url"], long_text)  # the server's own refusal, through tritonclient
    with pytest.warns(UserWarning, match=r"workload 'w': left out 1 of 2 prompts .*long: max_tokens: 16 output "
                                         r"tokens after a 250-token prompt exceed .*max_seq_len=256"):
        res = run_perf(options(served, tmp_path / "a", workloads={"w": str(prompts)}, concurrency=[1], requests=2,
                               baseline=True))
    for run in res.runs:
        assert [(q.prompt_id, q.status) for q in run.requests] == [("short", "ok")] * 2
    with pytest.warns(UserWarning, match="left out 1 of 2"):  # the genai-perf export sends what perf sends
        export_for_options(options(served, tmp_path / "a", workloads={"w": str(prompts)}), tmp_path / "gp")
    (sent,) = (tmp_path / "gp" / "inputs").glob("*.jsonl")
    assert [json.loads(line)["text"] for line in sent.read_text().splitlines()] == ["t5 t17 t300"]
    with pytest.raises(TrtspecError, match=r"perf.workloads: the server refuses every prompt of 'w' with max_tokens "
                                           r"300 .*ask for at most 6"):
        run_perf(options(served, tmp_path / "b", workloads={"w": str(prompts)}, max_tokens=300, concurrency=[1]))


def test_a_multi_process_run_cut_short_keeps_what_the_processes_completed(tmp_path):
    """--processes 2, cut as Ctrl-C cuts it (asyncio.run cancels the task) while each process waits on
    a request the server never answers: results.json holds the cut run with the 6 requests completed
    before it (completed: false, the reason), as a single-process run keeps its own."""
    o = PerfOptions(url="", model="fake", workloads={"w": "unused.jsonl"}, concurrency=[2], requests=8, warmup=0,
                    timeout_s=10, max_tokens=1, progress=False, processes=2, out=tmp_path / "perf")
    texts = [("w", f"p{i}", "ok") for i in range(3)] + [("w", "p3", "hang")]  # each process: 3 ok, 1 held

    async def cut(url: str) -> None:
        o.url, ps = url, Processes(2)
        try:
            res = PerfResults(created="now", trtspec_version="test", settings=runner._settings(o, {}), completed=False,
                              runs=[])
            plan = runner._plan(o, INFO, texts, None, 2, None, {pid: [] for _, pid, _ in texts})
            split = shares(2, url, INFO, [(pid, text, w, []) for w, pid, text in texts], None, 1, 10.0, True, 2, 8,
                           None, None, 0, 0)
            run = asyncio.ensure_future(runner._one_run(o, res, None, plan, "w", True, 2, None, None, None, ps, split))
            assert await asyncio.get_running_loop().run_in_executor(None, fake.wait_held, 2, 60.0)
            run.cancel()
            with pytest.raises(PerfRunError, match="interrupted; partial results in"):
                await run
        finally:
            ps.close()

    with FakeTriton() as fake:
        asyncio.run(cut(fake.url))
    res = load_results(tmp_path / "perf" / "results.json")
    (r,) = res.runs
    assert not res.completed and not r.completed and r.error == "interrupted"
    assert sorted(q.prompt_id for q in r.requests) == ["p0", "p0", "p1", "p1", "p2", "p2"]
    assert r.summary.requests_ok == 6 and r.requests[0].start_s == 0.0
