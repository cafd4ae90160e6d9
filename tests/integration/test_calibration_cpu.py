"""The calibration loop against a live cpu-flavor server: `perf --sweep` through tritonserver on a
tiny n-gram repository, then `tune --calibrate` on its results.json.

What is pinned: every K from 0 (speculation=false) to spec_decode's bound is served per request
through the sweep parameters (the response's route and num_draft_tokens say so, whatever the
workload's tuned K), the per-request acceptance is read back, and the calibration fits every
point and writes a tuning.json that says it was calibrated and from what. (Accuracy on a real
model is scripts/bench_calibration.py; exact recovery is tests/tuning/test_calibrate.py.)
"""

from __future__ import annotations

import json

import pytest

from triton_fixtures import cpu_repository, tiny_pair
from trtspec.perf.runner import PerfOptions, run_perf
from trtspec.perf.schema import load_results
from trtspec.triton_repo.ports import server_ports
from trtspec.triton_repo.serve import CpuServer
from trtspec.tuning.schema import dump_json
from trtspec.tuning.tuning_schema import load_tuning
from trtspec.tuning.select import SelectConfig
from trtspec.tuning.synthetic import ngram_profile
from trtspec.tuning.tune import run_tune

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
CHOICES = {"chat": (2, 2), "code": (3, 2)}  # tuned K; the sweep serves 0..max to both
PROMPTS = {"chat": ["t5 t17 t300 t5 t17 t300 t5", "t11 t12 t13 t11 t12"], "code": ["t9 t8 t7 t9 t8 t7", "t20 t21 t20"]}


def test_a_sweep_through_the_server_calibrates_the_tuner(tmp_path):
    d = tmp_path.resolve()
    target = tiny_pair(d) / "target"
    repo, _ = cpu_repository(d, "ngram", target, CHOICES, bands=(1,))
    files = {}
    for name, texts in PROMPTS.items():
        files[name] = d / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps({"prompt": t, "id": f"{name}{i}"}) + "\n" for i, t in enumerate(texts)))
    server = CpuServer(repo, *server_ports(), log_file=d / "server.log").start(240)
    try:
        run_perf(PerfOptions(url=server.grpc_url, workloads={k: str(v) for k, v in files.items()}, concurrency=[1],
                             requests=2, warmup=0, max_tokens=16, chat=False, progress=False, sweep=True,
                             timeout_s=120, out=d / "perf"))
    finally:
        server.stop()
    res = load_results(d / "perf" / "results.json")
    routing = json.loads((repo / "trtspec-repo.json").read_text())["routing"]
    max_k = max(b["num_draft_tokens"] for bands in [*routing["workloads"].values(), routing["default"]["bands"]]
                for b in bands)  # spec_decode's bound: the largest K routed (the default route's, computed)
    assert res.completed and res.runs == [] and res.sweep.mode == "ngram" and res.sweep.max_draft_len == max_k >= 3
    assert routing["in_flight_batching"] is False and res.sweep.in_flight_batching is False  # a thread per request
    for w in PROMPTS:
        runs = [r for r in res.sweep.runs if r.workload == w]
        assert [r.setting.num_draft_tokens for r in runs] == list(range(max_k + 1))
        for r in runs:
            k = r.setting.num_draft_tokens
            assert r.summary.requests_ok == 2 and r.summary.errors == 0
            assert {q.num_draft_tokens for q in r.requests} == {k}
            want = f"{w}:speculation-off:K=0" if k == 0 else f"{w}:sweep:K={k}:ngram:n=2"
            assert {q.route for q in r.requests} == {want}
            assert all(q.acceptance_length >= 1.0 for q in r.requests)
    (d / "profile.json").write_text(dump_json(ngram_profile({w: 0.5 for w in PROMPTS}, [2], max_k=3,
                                                            target=str(target))))
    tuning = run_tune(d / "profile.json", "cpu", target, None, SelectConfig(concurrency_bands=[1]),
                      calibrate=d / "perf" / "results.json")
    (d / "tuning.json").write_text(dump_json(tuning))
    cal = load_tuning(d / "tuning.json").cost.calibration
    assert tuning.cost.source == "calibrated" and cal.results == str(d / "perf" / "results.json")
    assert len(cal.points) == 2 * (max_k + 1) and cal.skipped == [] and cal.fit.num_rows == len(cal.points)
    assert tuning.cost.gpu != run_tune(d / "profile.json", "cpu", target, None,
                                       SelectConfig(concurrency_bands=[1])).cost.gpu
