"""SIGTERM to `trtspec serve` under load, on a live cpu-flavor server: the command exits 0, a new
request during the drain is refused clearly ("the server is shutting down"), the streams in flight
complete, tritonserver stops without hitting its exit timeout, no /dev/shm segment the server
mapped is left, no process outlives the server. And model control is off unless asked for."""

from __future__ import annotations

import queue
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.integration.test_triton_cancel import small_pair, start_long
from tests.integration.test_triton_serve import DT, PROMPTS, procs_mentioning, start_cli
from triton_fixtures import tuning_file
from trtspec.triton_repo.repo import RepoRequest, make_repository

grpcclient = pytest.importorskip("tritonclient.grpc")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

STREAMS = 4


def shm_segments(pids: list[int]) -> set[str]:
    """The /dev/shm segments these processes map (other servers on the box have their own)."""
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names |= {line.split("/dev/shm/", 1)[1].split()[0] for line in maps.splitlines() if "/dev/shm/" in line}
    return names


def stream(url: str, outcome: dict, key: int, first: threading.Event, max_tokens: int) -> None:
    """One streaming generate request; records 'final' or the error text in outcome[key]."""
    c, q = start_long(url, max_tokens)
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
    proc, ports = start_cli(repo, repo.parent / "server.log", "--drain-timeout", "60")
    try:
        _sigterm_under_load(proc, f"127.0.0.1:{ports['grpc']}", repo)
    finally:
        if proc.poll() is None:  # a failed assertion before the SIGTERM: do not leave the server running
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=90)


def _sigterm_under_load(proc, url: str, repo: Path) -> None:
    ours = shm_segments(procs_mentioning(str(repo)))
    assert ours, "found no /dev/shm segment of the server: the leak check would check nothing"
    c = grpcclient.InferenceServerClient(url)
    with pytest.raises(Exception, match="explicit model load / unload is not allowed"):
        c.unload_model("generate")  # model control is off by default: no local process may (re)load model code
    c.close()

    outcome: dict = {}
    started = [threading.Event() for _ in range(STREAMS)]
    # a mix of lengths, all well within the drain period even on a busy 2-core box (a stream that
    # outlasts the drain is stopped and told so; that path is not asserted here, see the report)
    threads = [threading.Thread(target=stream, args=(url, outcome, i, started[i], 40 if i % 2 else 400), daemon=True)
               for i in range(STREAMS)]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(120), "a stream never started"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)  # serve has begun its drain
    late: dict = {}
    stream(url, late, 0, threading.Event(), 8)
    code = proc.wait(timeout=90)
    took = time.monotonic() - t0
    for t in threads:
        t.join(30)
    print(f"shutdown: exit {code} after {took:.1f} s; streams {outcome}; request during the drain: {late}")
    assert code == 0
    assert len(outcome) == STREAMS and "hang" not in outcome.values(), outcome
    assert all(v == "final" for v in outcome.values()), f"streams in flight were not drained: {outcome}"
    assert "the server is shutting down: not taking new requests" in late[0], late
    for v in outcome.values():
        assert v == "final" or "the server is shutting down: the request did not finish within the drain period" in v, v
    deadline = time.monotonic() + 10
    while procs_mentioning(str(repo)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert procs_mentioning(str(repo)) == [], "processes outlived the server"
    log = (repo.parent / "server.log").read_text(errors="replace")
    for bad in ("failed to stop server", "Non-graceful termination", "Fatal Python error", "ASSERTION FAILED"):
        assert bad not in log, f"tritonserver did not stop cleanly: {bad!r} in its log"
    leaked = sorted(n for n in ours if (Path("/dev/shm") / n).exists())
    assert not leaked, f"/dev/shm segments left behind: {leaked}"
