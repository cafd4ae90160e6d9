"""SIGTERM to `trtspec serve` under load, on a live cpu-flavor server: the command exits 0, a new
request during the drain is refused clearly ("the server is shutting down"), the streams in flight
complete, tritonserver stops without hitting its exit timeout, no /dev/shm segment the server
mapped is left, no process outlives the server. And model control is off unless asked for."""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from pathlib import Path

import pytest

from serve_helpers import DT, procs_mentioning, start_cli
from tests.integration.test_triton_cancel import LONG, small_pair, start_long
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


SHM_PREFIX = "triton_python_backend_shm_region_"  # the python backend's regions (one per stub and model)


def unmapped_new_segments(before: set[str]) -> list[str]:
    """python-backend /dev/shm segments created since `before` that no live process maps (others'
    servers on the box map theirs): a segment left behind by this server."""
    mapped = shm_segments([int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()])
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(SHM_PREFIX) and n not in before | mapped)


def test_a_stream_outlasting_the_drain_is_stopped_and_the_server_exits_clean(repo):
    """SIGTERM with a stream that cannot finish within drain_timeout_s (3000 tokens, 2 s): the client
    is told why its stream ended, every model unloads, tritonserver exits 0 and serve with it, and
    no process or /dev/shm segment is left."""
    before = {n for n in os.listdir("/dev/shm") if n.startswith(SHM_PREFIX)}
    log = repo.parent / "server_outlast.log"
    proc, ports = start_cli(repo, log, "--drain-timeout", "2")
    try:
        ours = shm_segments(procs_mentioning(str(repo)))
        assert ours, "found no /dev/shm segment of the server: the leak check would check nothing"
        outcome: dict = {}
        first = threading.Event()
        t = threading.Thread(target=stream, args=(f"127.0.0.1:{ports['grpc']}", outcome, 0, first, LONG), daemon=True)
        t.start()
        assert first.wait(120), "the stream never started"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=90)
        t.join(30)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=90)
    output = "".join(proc.output)
    print(f"exit {code}; stream: {outcome}; serve said: {output.strip().splitlines()[-2:]}")
    assert code == 0, output
    assert "stopped (tritonserver exit status 0)" in output, output
    assert outcome == {0: "error: the server is shutting down: the request did not finish within the drain period"}
    text = log.read_text(errors="replace")
    for bad in ("failed to stop server", "Non-graceful termination", "Fatal Python error", "ASSERTION FAILED"):
        assert bad not in text, f"tritonserver did not stop cleanly: {bad!r} in its log"
    models = sorted(d.name for d in repo.iterdir() if (d / "config.pbtxt").is_file())
    unloaded = [m for m in models if f"successfully unloaded '{m}'" in text]
    assert unloaded == models, f"not unloaded: {sorted(set(models) - set(unloaded))}"
    deadline = time.monotonic() + 10
    while procs_mentioning(str(repo)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert procs_mentioning(str(repo)) == [], "processes outlived the server"
    assert not [n for n in ours if (Path("/dev/shm") / n).exists()], "a segment the server mapped is left"
    assert unmapped_new_segments(before) == []
