"""`trtspec perf --sweep` without a server: which settings each kind of repository serves (from the
routing tables `trtspec triton` writes), how a request carries one and how generate's rule reads
it back, the results.json section and the AL interval. The live sweep through a cpu-flavor server
is tests/integration/test_calibration_cpu.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from tritonclient.grpc import service_pb2_grpc

from triton_fixtures import TREE_A, TREE_B, tuning_file
from trtspec.perf import runner, sweep
from trtspec.perf.client import ModelInfo, build_request, open_channel
from trtspec.perf.options import PerfOptions
from trtspec.perf.sampling import workload_sampling
from trtspec.perf.schema import PerfResults, RequestRecord, Settings, dump_results, load_results
from trtspec.perf.stats import al_ci
from trtspec.triton_repo import llmapi
from trtspec.triton_repo.models import serving_rules as r
from trtspec.triton_repo.routing import draft_target_routes, eagle_routes
from trtspec.tuning.tuning_schema import load_tuning

from .fake_triton import INFO, FakeTriton


@pytest.fixture(scope="module")
def routes(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep_routes")
    dt = load_tuning(tuning_file(d / "dt" / "tuning.json", "draft-target", {"chat": 3, "code": [2, 5]}))
    ng = load_tuning(tuning_file(d / "ng" / "tuning.json", "ngram", {"chat": (3, 2), "code": (4, 2), "off": (0, None)}))
    eg = load_tuning(tuning_file(d / "eg" / "tuning.json", "eagle", {"chat": TREE_A, "code": TREE_B}))
    return {"draft-target": draft_target_routes(dt), "ngram": draft_target_routes(ng), "eagle": eagle_routes(eg),
            "llmapi": llmapi.routing(draft_target_routes(ng))}


def test_a_draft_target_repository_serves_off_and_every_k_up_to_spec_decodes_bound(routes):
    got = sweep.settings_for(routes["draft-target"], "chat", max_draft_len=5)
    assert [s.label for s in got] == ["off", "K=1", "K=2", "K=3", "K=4", "K=5"]
    assert got[0].speculation is False and got[0].num_draft_tokens == 0
    assert {s.drafter for s in got[1:]} == {"model"} and all(s.max_matching_ngram_size is None for s in got)
    # spec_decode's bound 0 means unbounded: the largest K any route serves
    assert sweep.settings_for(routes["draft-target"], "chat", 0)[-1].num_draft_tokens == 5


def test_an_ngram_repository_sweeps_k_at_the_workloads_matching_size(routes):
    chat = sweep.settings_for(routes["ngram"], "chat", 4)
    assert [s.label for s in chat] == ["off", "K=1:ngram:n=2", "K=2:ngram:n=2", "K=3:ngram:n=2", "K=4:ngram:n=2"]
    assert {s.drafter for s in chat[1:]} == {"ngram"}
    # a workload routed off still drafts in the sweep, at the size the other routes use
    assert [s.max_matching_ngram_size for s in sweep.settings_for(routes["ngram"], "off", 4)[1:]] == [2] * 4


def test_eagle_and_llmapi_repositories_sweep_their_served_models(routes):
    eagle = sweep.settings_for(routes["eagle"], "chat")
    assert sorted(s.route_model for s in eagle) == sorted(m["model"] for m in routes["eagle"]["models"])
    assert all(s.drafter == "eagle" and s.speculation for s in eagle)  # an EAGLE engine always drafts: no off
    assert sorted(map(len, [s.eagle_choices for s in eagle])) == sorted([len(TREE_A), len(TREE_B)])
    assert [s.num_draft_tokens for s in eagle] == sorted(s.num_draft_tokens for s in eagle)
    llm = sweep.settings_for(routes["llmapi"], "chat")
    default = routes["llmapi"]["default"]  # the default route's model is served too
    want = [("tensorrt_llm_k0", 0, "off"), ("tensorrt_llm_k3_n2", 3, "llmapi"), ("tensorrt_llm_k4_n2", 4, "llmapi"),
            (default["model"], default["num_draft_tokens"], "llmapi")]
    assert [(s.route_model, s.num_draft_tokens, s.drafter) for s in llm] == sorted(set(want), key=lambda m: m[1])


def test_a_request_carries_its_setting_and_generates_rule_reads_it_back(routes):
    info = ModelInfo("generate", {"text_input", "max_tokens", "stream", "workload", "speculation"}, [], True)
    base = build_request("generate", info, "hi", 8, "chat", None)
    k3 = sweep.settings_for(routes["ngram"], "chat", 4)[3]
    req = sweep.with_setting(base, k3)
    assert not base.parameters.get(r.SWEEP_K) and req.parameters[r.SWEEP_K].int64_param == 3
    params = {k: str(v.int64_param or v.string_param) for k, v in req.parameters.items() if k.startswith("trtspec_")}
    route = {"num_draft_tokens": 4, "label": "chat@1:K=4:ngram:n=2", "max_matching_ngram_size": 2}
    got = r.swept_route(routes["ngram"], route, params.get(r.SWEEP_K), params.get(r.SWEEP_NGRAM))
    assert got == {"num_draft_tokens": 3, "max_matching_ngram_size": 2, "label": "chat:sweep:K=3:ngram:n=2"}
    assert r.swept_route(routes["ngram"], route) is route  # no parameters: the tuned route
    own = dict(route, draft_head="eagle3-chat")  # a workload drafted by its own EAGLE-3 head keeps it
    assert r.swept_route(routes["ngram"], own, "2")["draft_head"] == "eagle3-chat"
    model = routes["eagle"]["models"][0]["model"]
    assert r.swept_route(routes["eagle"], {}, model=model)["model"] == model
    with pytest.raises(r.RequestError, match="trtspec_route_model: 'nope' is not served"):
        r.swept_route(routes["eagle"], {}, model="nope")
    with pytest.raises(r.RequestError, match="trtspec_num_draft_tokens: this eagle repository"):
        r.swept_route(routes["eagle"], {}, k="2")


def _record(i, tokens, al):
    return RequestRecord(index=i, prompt_id=f"p{i}", start_s=float(i), status="ok", ttft_s=0.1, e2e_s=1.0 + i,
                         itl_s=0.05, output_tokens=tokens, acceptance_length=al)


def test_the_sweep_section_round_trips_and_carries_an_al_interval():
    recs = [_record(i, t, a) for i, (t, a) in enumerate([(20, 1.5), (30, 2.5), (10, 1.2), (25, 2.0)])]
    run = sweep.sweep_run("chat", 1, sweep.OFF.model_copy(update={"label": "K=2", "speculation": True,
                                                                   "drafter": "model", "num_draft_tokens": 2}),
                          "2026-01-01T00:00:00+00:00", recs, None)
    ci, al = run.acceptance_length_ci, run.summary.acceptance_length
    assert al == pytest.approx(85 / (20 / 1.5 + 30 / 2.5 + 10 / 1.2 + 25 / 2.0))
    assert ci == al_ci(recs) and ci.low < al < ci.high  # the one AL interval (perf.stats.al_ci)
    # widened for 4 requests (t quantiles) past the data's range [1.2, 2.5], but not without bound
    assert 1.0 < ci.low < 1.2 and 2.5 < ci.high < 3.0
    s = sweep.new_sweep({"mode": "draft-target"}, 4)
    s.runs.append(run)
    res = PerfResults(created="x", trtspec_version="0", completed=True, runs=[], sweep=s,
                      settings=Settings(url="u", model="generate", workloads={"chat": "mt-bench"}, warmup=0,
                                        timeout_s=1, max_tokens=8, baseline=False, seed=0, sweep=True))
    back = PerfResults.model_validate_json(dump_results(res))
    assert back.sweep.schema_id == "trtspec.perf-sweep/1" and back.sweep.runs[0] == run and back.settings.sweep
    plain = res.model_copy(update={"sweep": None, "settings": res.settings.model_copy(update={"sweep": False})})
    assert '"sweep"' not in dump_results(plain)  # a run without the sweep writes no new key


def test_a_sweep_point_of_one_request_says_its_intervals_are_unknown():
    """One request has no spread to resample: its tokens/s, AL and ITL show '±?' in the terminal lines
    and report.html's sweep table, not a bare number that reads as exact."""
    k2 = sweep.OFF.model_copy(update={"label": "K=2", "speculation": True, "drafter": "model", "num_draft_tokens": 2})
    s = sweep.new_sweep({"mode": "draft-target"}, 4)
    s.runs.append(sweep.sweep_run("chat", 1, k2, "2026-01-01T00:00:00+00:00", [_record(0, 20, 1.5)], None))
    (line,) = sweep.sweep_lines(s)
    assert " ±? tok/s" in line and "AL 1.50 ±?" in line
    assert sweep.sweep_html(s).count(" ±?</td>") == 3


@pytest.mark.parametrize("kw, msg", [({"baseline": True}, "turn baseline off"),
                                     ({"request_rate": 2.0}, "not request_rate"),
                                     ({"processes": 2}, "one client process"),
                                     ({"duration_s": 30.0}, "not duration_s")])
def test_sweep_options_refuse_what_it_cannot_measure(tmp_path, kw, msg):
    with pytest.raises(ValueError, match=msg):
        PerfOptions(workloads={"chat": "mt-bench"}, out=tmp_path, sweep=True, **kw)


def test_blocks_interleave_the_settings_and_send_each_the_same_requests(tmp_path):
    assert [(j, list(r)) for j, r in sweep.schedule(5, 2)] == [(0, [0, 1]), (1, [2, 3, 4])]
    assert len(sweep.schedule(3, 10)) == 3  # never an empty block
    assert PerfOptions(workloads={"chat": "mt-bench"}, out=tmp_path, sweep=True, blocks=4).blocks == 4


def test_the_csv_files_carry_the_sweeps_runs_named_by_their_setting(tmp_path):
    """A sweep's results.json has its runs in `sweep`, none in `runs`: summary.csv and requests.csv
    held only their headers."""
    import csv

    from trtspec.perf.output import write_results

    s = sweep.new_sweep({"mode": "draft-target"}, 4)
    k2 = sweep.OFF.model_copy(update={"label": "K=2", "speculation": True, "drafter": "model", "num_draft_tokens": 2})
    for setting, recs in ((sweep.OFF, [_record(0, 20, 1.0), _record(1, 30, 1.0)]),
                          (k2, [_record(0, 20, 1.5), _record(1, 30, 2.5), _record(2, 10, 1.2)])):
        s.runs.append(sweep.sweep_run("chat", 2, setting, "t", recs, None))
    res = PerfResults(created="x", trtspec_version="0", completed=True, runs=[], sweep=s,
                      settings=Settings(url="u", model="generate", workloads={"chat": "mt-bench"}, warmup=0,
                                        timeout_s=1, max_tokens=8, baseline=False, seed=0, sweep=True))
    write_results(res, tmp_path)
    summary = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert [(row["setting"], row["speculation"], row["concurrency"]) for row in summary] == [
        ("off", "False", "2"), ("K=2", "True", "2")]
    for row, run in zip(summary, s.runs):
        assert float(row["output_tokens_per_s"]) == run.summary.output_tokens_per_s
        assert float(row["acceptance_length"]) == run.summary.acceptance_length
    rows = list(csv.DictReader(open(tmp_path / "requests.csv")))
    assert [(row["setting"], int(row["output_tokens"])) for row in rows] == [
        ("off", 20), ("off", 30), ("K=2", 20), ("K=2", 30), ("K=2", 10)]


def test_each_sweep_run_records_its_place_in_every_blocks_order(tmp_path, monkeypatch):
    """The settings of a load point go out forward and reversed by turns, block to block and load point
    to load point (order.forward); results.json used to record neither. Now each run carries its place
    per block (0: sent first), which report.html's sweep table shows. Against a stand-in server."""
    async def served(url, model, timeout_s):
        return {"mode": "draft-target", "workloads": {}, "default": {"bands": []}}, 2  # off, K=1, K=2

    monkeypatch.setattr(sweep, "served", served)
    o = PerfOptions(url="", model="fake", workloads={"chat": "x", "code": "y"}, concurrency=[1, 2], requests=4,
                    blocks=2, warmup=0, timeout_s=10, max_tokens=1, sweep=True, progress=False, out=tmp_path / "perf")
    workloads = [SimpleNamespace(name=n) for n in ("chat", "code")]
    rendered = {n: [(f"{n}{i}", "ok") for i in range(4)] for n in ("chat", "code")}

    async def measure(url: str):
        o.url = url
        res = PerfResults(created="x", trtspec_version="0", completed=False, runs=[], settings=runner._settings(o, {}))
        channel = open_channel(url)
        try:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            return await runner._sweep(o, res, stub, INFO, workloads, rendered,
                                       {n: workload_sampling(o, None, n) for n in ("chat", "code")})
        finally:
            await channel.close()

    with FakeTriton() as fake:
        got = asyncio.run(measure(fake.url))
    forward, reverse = [0, 1, 2], [2, 1, 0]  # places of off, K=1, K=2 in one block
    planned = {0: (forward, reverse), 1: (reverse, forward)}  # even load points start forward, odd ones reversed
    for point, (w, c) in enumerate((w, c) for w in ("chat", "code") for c in (1, 2)):
        runs = [r for r in got.runs if (r.workload, r.concurrency) == (w, c)]
        assert [r.setting.label for r in runs] == ["off", "K=1", "K=2"] and all(len(r.requests) == 4 for r in runs)
        blocks = planned[point % 2]
        assert [r.sent_place for r in runs] == [[blocks[0][i], blocks[1][i]] for i in range(3)]
    back = load_results(tmp_path / "perf" / "results.json").sweep
    assert back.runs[0].sent_place == [0, 2] and back.runs[3].sent_place == [2, 0]
    table = sweep.sweep_html(back)
    assert "<th>sent (per block)</th>" in table and "<td>1|3</td>" in table and "<td>3|1</td>" in table


def test_a_sweep_written_before_places_were_recorded_still_loads_and_renders():
    """results.json stays trtspec.perf/1: a sweep run without `sent_place` loads, writes no such key
    back, and its table has no place column."""
    run = sweep.sweep_run("chat", 1, sweep.OFF, "t", [_record(0, 20, 1.0)], None)
    s = sweep.new_sweep({"mode": "draft-target"}, 4)
    s.runs.append(run)
    res = PerfResults(created="x", trtspec_version="0", completed=True, runs=[], sweep=s,
                      settings=Settings(url="u", model="generate", workloads={"chat": "mt-bench"}, warmup=0,
                                        timeout_s=1, max_tokens=8, baseline=False, seed=0, sweep=True))
    text = dump_results(res)
    assert "sent_place" not in text and PerfResults.model_validate_json(text).sweep.runs[0].sent_place is None
    assert "sent (per block)" not in sweep.sweep_html(s)
