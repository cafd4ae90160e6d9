"""How `--processes N` splits a run (trtspec.perf.procs.shares): the load the processes offer
together must be the load one process would offer; and what a run cut short keeps (against a
stand-in server, tests/perf/fake_triton.py)."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import threading
import time
from collections import Counter

import pytest

from trtspec.errors import TrtspecError
from trtspec.perf import procs
from trtspec.perf.client import ServerGone
from trtspec.perf.procs import Processes, shares
from trtspec.perf.runner import _process_error, _reason

from .fake_triton import INFO, FakeTriton


def closed_shares(n: int, concurrency: int, requests: int, prompts: int = 5):
    items = [(f"p{i}", "text", "w", []) for i in range(prompts)]
    return shares(n, "127.0.0.1:1", None, items, None, 8, 1.0, True, concurrency, requests, None, None, 0, 2)


@pytest.mark.parametrize("n,concurrency,requests", [(2, 3, 30), (4, 6, 48), (3, 4, 17), (2, 1, 9), (4, 2, 9),
                                                    (2, 4, 9), (3, 7, 50)])
def test_a_closed_loops_requests_follow_the_workers_so_the_run_keeps_its_concurrency(n, concurrency, requests):
    """With requests of equal length one process of c workers sends N requests in ceil(N / c) rounds;
    split over processes, none may take longer (a process left sending alone runs the tail at a
    lower concurrency: 2 processes at c = 3, one with 1 worker and half the requests, took 15 rounds
    for 10). Together they send every request once, the prompts cycled as one process cycles them."""
    got = closed_shares(n, concurrency, requests)
    assert sum(s.concurrency for s in got) == concurrency and sum(s.requests for s in got) == requests
    rounds = [math.ceil(s.requests / s.concurrency) for s in got if s.concurrency]
    assert max(rounds) == math.ceil(requests / concurrency)
    assert all(s.requests == 0 for s in got if not s.concurrency)
    sent = Counter(pid for s in got for pid, *_ in (s.prompts * requests)[:s.requests])
    assert sent == Counter(f"p{i % 5}" for i in range(requests))


HELD = [(f"p{i}", "ok", "w", []) for i in range(3)] + [("p3", "hang", "w", [])]  # each process: 3 ok, 1 held


async def held_run(ps: Processes, fake, timeout_s: float) -> tuple[asyncio.Future, list]:
    """Two processes sending HELD, started and waited on until each has its last request held by the
    stand-in server (3 answered each): the run task and the list its results land in."""
    split = shares(2, fake.url, INFO, HELD, None, 1, timeout_s, True, 2, 8, None, None, 0, 0)
    results: list = []
    run = asyncio.ensure_future(ps.run(split, results))
    assert await asyncio.get_running_loop().run_in_executor(None, fake.wait_held, 2, 60.0)
    return run, results


def test_a_multi_process_run_cut_short_keeps_what_every_process_completed():
    """Cut (the run guard or Ctrl-C cancels the parent's task) while each of two processes waits on a
    request the server never answers: the 3 requests each had completed come back all the same, as
    a single process keeps its own; before, the processes' results were dropped with the task."""
    async def cut() -> list:
        ps = Processes(2)
        try:
            run, results = await held_run(ps, fake, 10.0)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            assert fake.answered == 6
            return results
        finally:
            ps.close()

    with FakeTriton() as fake:
        results = asyncio.run(cut())
    assert sorted(r.prompt_id for r in results) == ["p0", "p0", "p1", "p1", "p2", "p2"]
    assert all(r.status == "ok" and r.output_tokens == 1 for r in results)


def _stuck(ready: str) -> None:
    """A client process stuck in a call: it ignores the stop event (never looks at it) and SIGTERM."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(ready, "w").close()
    time.sleep(3600)


def test_close_ends_a_process_that_does_not_stop(tmp_path, monkeypatch):
    """A process that does not end when told to stop (stuck in a gRPC call, say) is terminated, then
    killed, once close has waited for it; before, close waited for it forever and the run never exited."""
    monkeypatch.setattr(procs, "CLOSE_WAIT_S", 0.5)
    monkeypatch.setattr(procs, "KILL_WAIT_S", 0.5)
    ps, ready = Processes(2), tmp_path / "ready"
    ps.pool.submit(_stuck, str(ready))
    children = list(ps.pool._processes.values())  # private (procs.Processes.close says why): the test's own check
    closer = threading.Thread(target=ps.close, daemon=True)
    try:
        for _ in range(600):  # the process started and ignores SIGTERM
            if ready.exists():
                break
            time.sleep(0.1)
        assert ready.exists()
        closer.start()
        closer.join(60.0)
        assert not closer.is_alive(), "close() did not return"
        assert children and not any(p.is_alive() for p in children)
    finally:
        for p in children:
            if p.is_alive():
                p.kill()
        if closer.is_alive():
            closer.join()


def test_ctrl_c_reaching_one_process_stops_the_run_as_an_interruption():
    """SIGINT to one client process only (on a terminal Ctrl-C reaches them all, the parent too): it
    stops the others as well, every process hands back what it completed, and the parent takes the
    reason as an interruption, the way a Ctrl-C in the parent reads, not as a lost server. Before, the
    other process went on waiting on its held request and the parent raised ServerGone("interrupted")."""
    async def interrupt_one() -> tuple:
        ps = Processes(2)
        try:
            run, results = await held_run(ps, fake, 300.0)
            os.kill(next(iter(ps.pool._processes)), signal.SIGINT)
            return await asyncio.wait_for(run, 60.0), results
        finally:
            ps.close()

    with FakeTriton() as fake:
        reason, results = asyncio.run(interrupt_one())
    assert reason == procs.INTERRUPTED
    assert sorted(r.prompt_id for r in results) == ["p0", "p0", "p1", "p1", "p2", "p2"]


@pytest.mark.parametrize("reason,kind,text", [
    (procs.INTERRUPTED, KeyboardInterrupt, "interrupted"),
    (f"{procs.LATE_START} within 120 s", TrtspecError, f"{procs.LATE_START} within 120 s"),
    ("lost the connection to the server at x", ServerGone, "lost the connection to the server at x")])
def test_a_process_reason_is_raised_as_what_it_is(reason, kind, text):
    """runner._process_error: a process's Ctrl-C is an interruption (the KeyboardInterrupt the parent's
    own Ctrl-C is, and the run's error reads the same), only a lost connection is ServerGone."""
    e = _process_error(reason)
    assert type(e) is kind and _reason(e) == text
