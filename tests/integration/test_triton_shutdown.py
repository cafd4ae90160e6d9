"""SIGTERM to `trtspec serve` under load, on a live cpu-flavor server: the command exits 0, every
in-flight stream ends (completes, or fails with a clear status: no hang, no silent cut), no
/dev/shm segment of the python backend is left, no process outlives the server. And model control
is off unless asked for."""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.integration.test_triton_cancel import small_pair
from tests.integration.test_triton_serve import DT, PROMPTS, procs_mentioning, start_cli
from triton_fixtures import tuning_file
from trtspec.triton_repo.repo import RepoRequest, make_repository

grpcclient = pytest.importorskip("tritonclient.grpc")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

STREAMS = 4


def shm_segments() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir()} if Path("/dev/shm").is_dir() else set()


def stream(url: str, outcome: dict, key: int, first: threading.Event, max_tokens: int) -> None:
    """One streaming generate request; records 'final' or the error text in outcome[key]."""
    c = grpcclient.InferenceServerClient(url)
    q: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    inputs = []
    for name, value, dtype, np_dtype in (("text_input", PROMPTS["chat"].encode(), "BYTES", object),
                                         ("max_tokens", max_tokens, "INT32", np.int32),
                                         ("stream", True, "BOOL", bool), ("workload", b"chat", "BYTES", object)):
        x = grpcclient.InferInput(name, [1, 1], dtype)
        x.set_data_from_numpy(np.array([[value]], dtype=np_dtype))
        inputs.append(x)
    c.async_stream_infer("generate", inputs, enable_empty_final_response=True)
    try:
        while True:
            result, error = q.get(timeout=120)
            if error is not None:
                outcome[key] = f"error: {error}"
                return
            first.set()
            if result.get_response().parameters["triton_final_response"].bool_param:
                outcome[key] = "final"
                return
    except queue.Empty:
        outcome[key] = "hang"
    finally:
        try:
            c.stop_stream()
            c.close()
        except Exception:
            pass


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_shutdown").resolve()
    tuning = tuning_file(d / "t" / "tuning.json", "draft-target", DT, bands=(1, 16))
    out = d / "repo"
    make_repository(RepoRequest(tuning=tuning, flavor="cpu", out=out, ckpt=small_pair(d)))
    return out


def test_sigterm_under_load_exits_clean(repo):
    shm_before = shm_segments()
    proc, ports = start_cli(repo, repo.parent / "server.log", "--drain-timeout", "20")
    try:
        _sigterm_under_load(proc, f"127.0.0.1:{ports['grpc']}", repo, shm_before)
    finally:
        if proc.poll() is None:  # a failed assertion before the SIGTERM: do not leave the server running
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=90)


def _sigterm_under_load(proc, url: str, repo: Path, shm_before: set[str]) -> None:
    c = grpcclient.InferenceServerClient(url)
    with pytest.raises(Exception, match="explicit model load / unload is not allowed"):
        c.unload_model("generate")  # model control is off by default: no local process may (re)load model code
    c.close()

    outcome: dict = {}
    started = [threading.Event() for _ in range(STREAMS)]
    # a mix: short streams that finish within the drain period, long ones that may not
    threads = [threading.Thread(target=stream, args=(url, outcome, i, started[i], 40 if i % 2 else 1500), daemon=True)
               for i in range(STREAMS)]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(120), "a stream never started"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=90)
    took = time.monotonic() - t0
    for t in threads:
        t.join(30)
    print(f"shutdown: exit {code} after {took:.1f} s; streams {outcome}")
    assert code == 0
    assert len(outcome) == STREAMS and "hang" not in outcome.values(), outcome
    for v in outcome.values():
        assert v == "final" or ("shutting down" in v or "not ready" in v.lower() or "unavailable" in v.lower()), v
    deadline = time.monotonic() + 10
    while procs_mentioning(str(repo)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert procs_mentioning(str(repo)) == [], "processes outlived the server"
    leaked = {n for n in shm_segments() - shm_before if "triton" in n.lower() or n.startswith("prefix")}
    assert not leaked, f"/dev/shm segments left behind: {sorted(leaked)}"
