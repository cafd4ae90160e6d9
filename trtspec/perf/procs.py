"""Spreading one run's load over several client processes (`--processes N`).

Why: one Python process drives a gRPC stream at a few hundred microseconds of CPU per message
(grpc.aio's own cost; ours is a small part of it), so against a fast server with short answers a
single client process, not the server, sets the ceiling, and on a shared box its one thread only
gets its share of a core. Several processes, each with its own event loop, channel and streams,
lift that ceiling the way perf_analyzer's threads do.

How a run is split: closed loop, process i runs concurrency_i workers (the concurrency divided as
evenly as possible) and the requests those workers would send in one process (`by_workers`: in
proportion to them, so all processes drain together and the run keeps its concurrency to the end);
open loop, process i runs Poisson arrivals at rate / N with its own seed (the superposition of N
independent Poisson processes of rate R/N is a Poisson process of rate R). Each process warms up
on its own, then all wait on one barrier, so the measured phases start together; `time.perf_counter`
is the system-wide monotonic clock on Linux, so the send times of all processes share one time base.
Processes are started once per invocation (spawn: grpc must not be forked) and each returns its
Results and, if the server went away, why.

A run cut short in the parent (the run-level guard, Ctrl-C, SIGTERM taken as Ctrl-C: its task is
cancelled) or by one process failing sets a shared stop event; each process then cancels its
measurement and returns the requests it completed the usual way (the executor's return value: a
list of Result dataclasses and a reason), so the cut run keeps them as a single process keeps its
own. The parent waits STOP_WAIT_S for them at most (requests in flight are cancelled, not waited for).
Ctrl-C reaching a process (on a terminal it reaches the whole process group) stops the whole run the
same way: that process sets the stop event for the others and returns INTERRUPTED, which the parent
reports as an interruption, not as a lost server (runner._process_error).

Closing (`Processes.close`, once per invocation) tells the processes to stop, waits CLOSE_WAIT_S for
them to end, then terminates (and, past that, kills) any still alive: one stuck in a gRPC call or
ignoring the stop event must not hang the invocation at its exit.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from . import client, load

BARRIER_TIMEOUT_S = 120.0
STOP_WAIT_S = 10.0  # how long a cut run waits for the processes to hand back what they completed
CLOSE_WAIT_S = 5.0  # how long close() waits for the processes to end before terminating them
KILL_WAIT_S = 2.0  # then how long for a terminated one before it is killed
INTERRUPTED = "interrupted"  # the reason a process stopped by the parent, or by Ctrl-C, returns
LATE_START = "the client processes did not all reach the start"  # the reason after BARRIER_TIMEOUT_S

_shared: dict = {}


@dataclass
class Share:
    """One process's part of a run."""
    slot: int
    url: str
    info: client.ModelInfo
    prompts: list[tuple[str, str, str, list]]  # (sample id, text, workload, client.sampling_inputs)
    speculation: bool | None
    max_tokens: int
    timeout_s: float
    counted: bool
    concurrency: int | None  # closed loop: this process's workers (0: it only joins the barrier)
    requests: int | None
    duration_s: float | None
    rate: float | None
    seed: int
    warmup: int


def split(total: int, parts: int) -> list[int]:
    """total as `parts` near-equal non-negative integers, larger ones first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def by_workers(total: int, workers: list[int]) -> list[int]:
    """total requests as one closed loop of sum(workers) workers hands them out (worker j sends
    requests j, j + c, j + 2c, ...), grouped by the processes owning `workers[i]` workers each. Why
    not `split` by process: at concurrency 3 over 2 processes, 2 workers would finish their half
    while 1 worker still sends the other half alone, at concurrency 1."""
    c = sum(workers)
    full, rest = divmod(total, c) if c else (0, 0)
    out, lo = [], 0
    for k in workers:
        out.append(full * k + max(0, min(rest, lo + k) - lo))
        lo += k
    return out


def _init(counts, barrier, stop) -> None:
    _shared.update(counts=counts, barrier=barrier, stop=stop)


def run_share(share: Share) -> tuple[list[client.Result], str | None]:
    """Child process: warm up, wait for the others, measure; never raises for a lost server or a stop."""
    return asyncio.run(_share(share))


async def _share(s: Share) -> tuple[list[client.Result], str | None]:
    channel = client.open_channel(s.url)
    stub = client.service_pb2_grpc.GRPCInferenceServiceStub(channel)
    pool = load.StreamPool(lambda: client.Stream(stub, s.url))
    prompts = [load.Prompt(pid, client.build_request(s.info.name, s.info, text, s.max_tokens, wl, s.speculation,
                                                     extra))
               for pid, text, wl, extra in s.prompts]
    plan = load.Plan(prompts, s.requests, s.duration_s, s.timeout_s, s.counted)
    results: list[client.Result] = []
    counts = _shared["counts"]
    ticker = asyncio.ensure_future(_count(counts, s.slot, results, asyncio.current_task()))
    closed = s.rate is None
    try:
        if s.warmup and (s.concurrency or not closed):
            await load.closed_loop(pool, load.warmup_plan(plan, s.warmup), s.concurrency or 1, [])
        await asyncio.get_running_loop().run_in_executor(None, _shared["barrier"].wait, BARRIER_TIMEOUT_S)
        if closed and s.concurrency:
            await load.closed_loop(pool, plan, s.concurrency, results)
        elif not closed:
            await load.open_loop(pool, plan, s.rate, s.seed, results)
        return results, None
    except client.ServerGone as e:
        return results, str(e)
    except threading.BrokenBarrierError:
        if _shared["stop"].is_set():  # the parent (or an interrupted process) broke the barrier to stop the run
            return results, INTERRUPTED
        return results, f"{LATE_START} within {BARRIER_TIMEOUT_S:.0f} s"
    except asyncio.CancelledError:  # stopped by the parent (_count), or Ctrl-C reached this process
        if not _shared["stop"].is_set():  # Ctrl-C, maybe here only: the others stop too, none waits at the start
            _shared["stop"].set()
            _shared["barrier"].abort()
        return results, INTERRUPTED
    finally:
        ticker.cancel()
        counts[s.slot] = len(results)
        pool.close()
        await channel.close()


async def _count(counts, slot: int, results: list, main: asyncio.Task) -> None:
    """Publish this process's progress; once the parent asks the processes to stop, cancel `main`."""
    while not _shared["stop"].is_set():
        counts[slot] = len(results)
        await asyncio.sleep(0.1)
    main.cancel()


class Processes:
    """N spawned client processes for the whole invocation, with the shared progress counters."""

    def __init__(self, n: int):
        ctx = multiprocessing.get_context("spawn")
        self.n = n
        self.counts = ctx.Array("q", n, lock=False)
        self.barrier = ctx.Barrier(n)
        self.stop = ctx.Event()
        self.pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=_init,
                                        initargs=(self.counts, self.barrier, self.stop))

    def done(self) -> int:
        return int(sum(self.counts))

    async def run(self, shares: list[Share], results: list[client.Result]) -> str | None:
        """Run one share per process, their results into `results`; the first reason a process stopped
        early. Cut short (this task cancelled) or a process failing, the others are stopped and what
        every process completed still lands in `results` (module docstring) before it raises."""
        for i in range(self.n):
            self.counts[i] = 0
        self.stop.clear()
        self.barrier.reset()  # left broken by a run that was stopped
        futures = [self.pool.submit(run_share, s) for s in shares]
        try:
            await asyncio.gather(*[asyncio.wrap_future(f) for f in futures])
        except BaseException:
            self.stop.set()
            self.barrier.abort()  # a process still waiting at the start must not wait out its timeout
            await asyncio.wait([asyncio.wrap_future(f) for f in futures], timeout=STOP_WAIT_S)
            raise
        finally:
            outs = [f.result() for f in futures if f.done() and not f.cancelled() and f.exception() is None]
            results.extend(r for rs, _ in outs for r in rs)
        errors = [e for _, e in outs if e]
        return errors[0] if errors else None

    def close(self) -> None:
        """Stop the processes and end them, in bounded time (module docstring): an idle process ends at
        once, one still running a share is told to stop, and one that does not end is terminated."""
        self.stop.set()
        self.barrier.abort()
        # ProcessPoolExecutor has no public handle on its processes (nor a bounded shutdown): `_processes`
        # ({pid: Process}, CPython 3.8-3.13) is private, hence the guard; without it the processes are
        # only asked to end, not waited for, so close still returns.
        children = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)  # idle processes get their exit sentinel
        deadline = time.monotonic() + CLOSE_WAIT_S
        for p in children:
            p.join(max(0.0, deadline - time.monotonic()))
        for end in ("terminate", "kill"):  # SIGTERM, then SIGKILL for one that ignores it
            alive = [p for p in children if p.is_alive()]
            for p in alive:
                getattr(p, end)()
            for p in alive:
                p.join(KILL_WAIT_S)


def shares(n: int, url: str, info, prompts, speculation, max_tokens: int, timeout_s: float, counted: bool,
           concurrency: int | None, requests: int | None, duration_s: float | None, rate: float | None,
           seed: int, warmup: int) -> list[Share]:
    """Split one run into n shares (see the module docstring)."""
    if concurrency:  # closed loop: requests follow the workers
        conc = split(concurrency, n)
        active = sum(c > 0 for c in conc)
        reqs = by_workers(requests, conc) if requests is not None else [None] * n
        warm = split(warmup, active) + [0] * (n - active)  # per process: each warms its own channel
    else:
        conc = [None] * n
        reqs = split(requests, n) if requests is not None else [None] * n
        warm = split(warmup, n)
    out, offset = [], 0
    for i in range(n):
        rotated = prompts[offset % len(prompts):] + prompts[:offset % len(prompts)]
        out.append(Share(i, url, info, rotated, speculation, max_tokens, timeout_s, counted, conc[i], reqs[i],
                         duration_s, rate / n if rate else None, seed + i, warm[i]))
        offset += reqs[i] or 0
    return out
