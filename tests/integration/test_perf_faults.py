"""`trtspec perf` when things go wrong, against a real tritonserver serving a slow python model.

The model (`slow`, generate's request interface: text_input, max_tokens, stream) answers each
request with max_tokens text_output responses 50 ms apart from its own thread, so requests take a
known time and stop early when cancelled. The module's one server is killed by the last test.
- requests longer than --timeout are counted as timeouts, the run ends on time and the server is
  still usable afterwards; requests the server answers with an error are counted as errors (an
  error whose final flag follows it alone does not end the next request on the stream);
- --processes 2 splits each run over two client processes (all requests recorded, one time base);
- the server killed mid-run (SIGKILL, as a crash): the command ends within seconds with one
  `error:` line, exit 2, and results.json holds the requests measured so far with `completed: false`
  and the reason, next to CSVs that match it.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import textwrap
import threading
import time
from collections import Counter

import pytest

from cli_helpers import run_cli
from trtspec.perf.runner import PerfOptions, run_perf
from trtspec.perf.schema import load_results
from trtspec.triton_repo.ports import server_ports
from trtspec.triton_repo.serve import CpuServer

CONFIG = """name: "slow"
backend: "python"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input { name: "text_input" data_type: TYPE_STRING dims: 1 }
input { name: "max_tokens" data_type: TYPE_INT32 dims: 1 }
input { name: "stream" data_type: TYPE_BOOL dims: 1 optional: true }
output { name: "text_output" data_type: TYPE_STRING dims: -1 }
output { name: "num_output_tokens" data_type: TYPE_INT32 dims: 1 }
"""
MODEL_PY = textwrap.dedent('''
    import threading
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils

    FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


    def serve(request, n):
        sender = request.get_response_sender()
        text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
        if text.startswith(b"fail"):
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError("asked to fail")),
                        flags=FINAL)
            return
        if text.startswith(b"late-final"):  # the error, then the final flag alone, apart
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError("asked to fail")))
            time.sleep(0.1)
            sender.send(flags=FINAL)
            return
        for i in range(n):
            time.sleep(0.05)
            if request.is_cancelled():
                break
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("text_output", np.array([[b"tok "]], dtype=object)),
                pb_utils.Tensor("num_output_tokens", np.array([[i + 1]], np.int32))]))
        sender.send(flags=FINAL)


    class TritonPythonModel:
        def execute(self, requests):
            for r in requests:
                n = int(pb_utils.get_input_tensor_by_name(r, "max_tokens").as_numpy().reshape(-1)[0])
                threading.Thread(target=serve, args=(r, n), daemon=True).start()
            return None
''')


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    d = tmp_path_factory.mktemp("perf_faults").resolve()
    repo = d / "repo"
    (repo / "slow" / "1").mkdir(parents=True)
    (repo / "slow" / "config.pbtxt").write_text(CONFIG)
    (repo / "slow" / "1" / "model.py").write_text(MODEL_PY)
    (repo / "trtspec-repo.json").write_text(json.dumps({"flavor": "cpu"}))
    prompts = d / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"hello {i}"}) + "\n" for i in range(5)))
    server = CpuServer(repo, *server_ports(), log_file=d / "server.log").start(120)
    yield {"server": server, "prompts": prompts}
    server.stop()


def test_requests_beyond_the_timeout_are_counted_and_do_not_hang(slow, tmp_path):
    # 40 tokens x 50 ms = 2 s per request, 0.3 s allowed
    opts = PerfOptions(url=slow["server"].grpc_url, model="slow", workloads={"p": str(slow["prompts"])},
                       concurrency=[2], requests=6, warmup=0, timeout_s=0.3, max_tokens=40, chat=False,
                       progress=False, out=tmp_path / "t")
    t0 = time.monotonic()
    res = run_perf(opts)
    elapsed = time.monotonic() - t0
    run = res.runs[0]
    assert res.completed and run.completed  # timeouts are results, not a failure of the run
    assert [q.status for q in run.requests] == ["timeout"] * 6 and run.summary.timeouts == 6
    assert run.summary.requests_ok == 0 and run.summary.output_tokens_per_s == 0.0
    assert all("no final response within 0.3 s" in q.error for q in run.requests)
    assert elapsed < 6, elapsed  # 3 rounds of 0.3 s plus start-up, not 3 x 2 s
    ok = run_perf(opts.model_copy(update={"max_tokens": 3, "timeout_s": 10, "out": tmp_path / "ok"}))
    assert [q.status for q in ok.runs[0].requests] == ["ok"] * 6  # the cancelled streams freed the server
    assert all(q.output_tokens == 3 and q.responses == 3 for q in ok.runs[0].requests)


def test_request_errors_are_counted_and_the_run_goes_on(slow, tmp_path):
    prompts = tmp_path / "mixed.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t, "id": t}) + "\n" for t in ("hello", "fail", "hi", "fail2")))
    res = run_perf(PerfOptions(url=slow["server"].grpc_url, model="slow", workloads={"m": str(prompts)},
                               concurrency=[2], requests=8, warmup=0, timeout_s=10, max_tokens=2, chat=False,
                               progress=False, out=tmp_path / "e"))
    run = res.runs[0]
    assert res.completed and run.completed and len(run.requests) == 8
    for q in run.requests:
        if q.prompt_id.startswith("fail"):
            assert q.status == "error" and "asked to fail" in q.error and q.ttft_s is None
        else:
            assert q.status == "ok" and q.output_tokens == 2
    assert (run.summary.errors, run.summary.requests_ok) == (4, 4)


def test_an_error_sent_before_its_final_flag_does_not_end_the_next_request(slow, tmp_path):
    """A decoupled model may send an error response and its final flag apart (tritonserver forwards
    both): the final flag, 0.1 s later, must not end the next request on the same stream, which would
    then count 2 of its 6 tokens and leave the rest to the request after it."""
    prompts = tmp_path / "late.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t, "id": t}) + "\n" for t in ("late-final", "hello")))
    res = run_perf(PerfOptions(url=slow["server"].grpc_url, model="slow", workloads={"m": str(prompts)},
                               concurrency=[1], requests=6, warmup=0, timeout_s=10, max_tokens=6, chat=False,
                               progress=False, out=tmp_path / "l"))
    run = res.runs[0]
    assert sorted(q.prompt_id for q in run.requests) == ["hello"] * 3 + ["late-final"] * 3  # they alternate
    for q in run.requests:
        if q.prompt_id == "late-final":
            assert q.status == "error" and "asked to fail" in q.error
        else:
            assert (q.status, q.output_tokens, q.responses) == ("ok", 6, 6)


def test_load_spread_over_client_processes(slow, tmp_path):
    """--processes 2: the run's requests are split over two spawned clients that start together."""
    base = dict(url=slow["server"].grpc_url, model="slow", workloads={"p": str(slow["prompts"])}, warmup=1,
                timeout_s=10, max_tokens=2, chat=False, progress=False, processes=2)
    res = run_perf(PerfOptions(**base, concurrency=[1, 4], requests=9, out=tmp_path / "c"))
    assert res.settings.processes == 2
    for run in res.runs:
        assert run.completed and len(run.requests) == 9 and run.summary.requests_ok == 9
        assert [q.index for q in run.requests] == list(range(9)) and run.requests[0].start_s == 0.0
        assert all(q.output_tokens == 2 for q in run.requests)
        counts = Counter(q.prompt_id for q in run.requests)  # the 5 prompts cycled: 9 = 2 + 2 + 2 + 2 + 1
        assert sorted(counts.values()) == [1, 2, 2, 2, 2] and set(counts) == {f"p.jsonl:{i}" for i in range(1, 6)}
    one, four = (r.summary.window_s for r in res.runs)
    assert four < one  # 4 workers in flight beat 1 (each request takes 100 ms)
    res = run_perf(PerfOptions(**base, request_rate=40, requests=8, out=tmp_path / "r"))
    assert len(res.runs[0].requests) == 8 and res.runs[0].summary.requests_ok == 8


def test_server_killed_mid_run_leaves_partial_results(slow, tmp_path, capsys):
    server, out = slow["server"], tmp_path / "killed"
    killer = threading.Timer(3.0, lambda: os.killpg(server.proc.pid, signal.SIGKILL))
    killer.start()
    t0 = time.monotonic()
    try:
        code, _, stderr = run_cli(capsys, "perf", "--url", server.grpc_url, "--model", "slow", "--workloads",
                                  f"p={slow['prompts']}", "--concurrency", "1,2,4,8,16", "--duration", "1.5", "--warmup", "0",
                                  "--max-tokens", "4", "--no-chat", "--no-progress", "--timeout", "30", "--out", out)
    finally:
        killer.cancel()
    assert time.monotonic() - t0 < 15
    assert code == 2 and stderr.startswith("error: run ") and len(stderr.strip().splitlines()) == 1
    assert f"lost the connection to the server at {server.grpc_url}" in stderr or "closed the stream" in stderr
    assert f"partial results in {out / 'results.json'}" in stderr
    res = load_results(out / "results.json")
    assert not res.completed and res.error and res.error in stderr
    assert 'id="partial"' in (out / "report.html").read_text()  # the report of what was measured
    finished, cut = res.runs[:-1], res.runs[-1]
    assert finished and all(r.completed and r.error is None for r in finished)  # the 1.5 s runs before the kill
    assert not cut.completed and cut.error and cut.requests
    assert [q.error for q in cut.requests if q.status == "error"][-1] in res.error  # the request that found out
    assert cut.summary.requests_ok == sum(q.status == "ok" for q in cut.requests)
    rows = list(csv.DictReader(open(out / "requests.csv")))
    assert len(rows) == sum(len(r.requests) for r in res.runs)
    summary = list(csv.DictReader(open(out / "summary.csv")))
    assert [s["completed"] for s in summary] == [str(r.completed) for r in res.runs]
