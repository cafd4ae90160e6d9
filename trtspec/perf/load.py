"""Load patterns: closed loop (N workers, one request in flight each) and open loop (Poisson arrivals).

Why both: closed-loop concurrency is what the tuning's concurrency bands mean (the server sees N
requests in flight and picks the band <= N), so it is the load point a comparison with the tuner's
prediction needs; open loop at a fixed request rate is how production traffic arrives (latency then
includes queueing, and an overloaded server shows it instead of being throttled by the client).

Every request is bounded by its own timeout (client.Stream.send), so both loops end on their own;
the caller still puts a run-level guard around them. A lost connection (ServerGone) stops the
loop at once and propagates; the results gathered so far stay in `results`, with the request that
found out as an error (the other requests in flight then are cancelled and not recorded).

`block_schedule` orders a comparison's interleaved blocks (perf.blocks > 1) in time.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Callable

from .client import Result, ServerGone, Stream
from .order import forward


@dataclass
class Prompt:
    id: str
    request: object  # the prebuilt ModelInferRequest


@dataclass
class Plan:
    """What one run sends: `requests` requests, or as many as fit in `duration_s`."""
    prompts: list[Prompt]  # cycled through in order
    requests: int | None
    duration_s: float | None
    timeout_s: float
    counted: bool  # the model reports num_output_tokens


def warmup_plan(plan: Plan, warmup: int) -> Plan:
    """The warm-up's `warmup` requests: `plan`'s prompts from the end of the list, those a run sends
    last (if at all). From the start, a server that reuses a prompt's KV cache across requests
    (TensorRT-LLM's enable_kv_cache_reuse, on in draft-target repositories; the LLM API's block
    reuse, on by default) would serve the first measured requests' prefill from the warm-up's, and
    their TTFT would read low."""
    return Plan(plan.prompts[::-1], warmup, None, plan.timeout_s, plan.counted)


class StreamPool:
    """Idle streams for reuse (open loop takes one per arrival; closed loop one per worker)."""

    def __init__(self, new: Callable[[], Stream]):
        self.new, self.idle = new, []

    def take(self) -> Stream:
        return self.idle.pop() if self.idle else self.new()

    def give(self, s: Stream) -> None:
        self.idle.append(s)

    def close(self) -> None:
        for s in self.idle:
            s.close()
        self.idle.clear()


async def closed_loop(pool: StreamPool, plan: Plan, concurrency: int, results: list[Result]) -> None:
    """`concurrency` workers, each sending its next request as soon as its previous one ended."""
    state = {"next": 0}
    t_end = time.perf_counter() + plan.duration_s if plan.duration_s else None
    n_prompts = len(plan.prompts)

    async def worker() -> None:
        stream = pool.take()
        try:
            while True:
                i = state["next"]
                if plan.requests is not None and i >= plan.requests:
                    return
                if t_end is not None and time.perf_counter() >= t_end:
                    return
                state["next"] = i + 1
                p = plan.prompts[i % n_prompts]
                results.append(await _send(stream, p, plan, results))
        finally:
            pool.give(stream)

    await _all(worker() for _ in range(concurrency))


async def open_loop(pool: StreamPool, plan: Plan, rate: float, seed: int, results: list[Result]) -> None:
    """Arrivals with exponential gaps of mean 1/rate (seeded), each on an idle or new stream."""
    rng = random.Random(seed)
    start = time.perf_counter()
    t_end = start + plan.duration_s if plan.duration_s else None
    in_flight: set[asyncio.Task] = set()
    failed: list[BaseException] = []

    async def one(p: Prompt) -> None:
        stream = pool.take()
        try:
            results.append(await _send(stream, p, plan, results))
        finally:
            pool.give(stream)

    def ended(t: asyncio.Task) -> None:
        """Why a callback and not a scan of the tasks per arrival: that is quadratic in the arrivals,
        and at high rates the client itself then delays the arrivals it times."""
        in_flight.discard(t)
        if not t.cancelled() and t.exception() is not None and not failed:
            failed.append(t.exception())

    try:
        due, i = start, 0
        while plan.requests is None or i < plan.requests:
            due += rng.expovariate(rate)
            if t_end is not None and due >= t_end:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if failed:  # a lost connection ends the arrivals too
                raise failed[0]
            task = asyncio.ensure_future(one(plan.prompts[i % len(plan.prompts)]))
            in_flight.add(task)
            task.add_done_callback(ended)
            i += 1
        if failed:  # since the last arrival
            raise failed[0]
        if in_flight:
            await _all(list(in_flight))
    finally:
        for t in list(in_flight):
            t.cancel()


async def _send(stream: Stream, p: Prompt, plan: Plan, results: list[Result]) -> Result:
    try:
        return await stream.send(p.request, p.id, plan.timeout_s, plan.counted)
    except ServerGone as e:
        if e.result is not None:
            results.append(e.result)
        raise


async def _all(aws) -> None:
    """Run all; the first exception cancels the others and is raised."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            if t.exception() is not None:
                raise t.exception()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def block_schedule(requests: int, blocks: int, point: int = 0) -> list[tuple[int, bool, range]]:
    """(block, speculation on?, indices of the run's requests it sends) in the order sent, for the
    `point`-th load point: blocks of near-equal size, each sending the same requests in both modes,
    the first mode alternating from block to block (ABBA: a drift linear in time costs both modes
    alike) and from load point to load point (order.forward: going second must not favour one mode)."""
    edges = [round(j * requests / blocks) for j in range(blocks + 1)]
    return [(j, on, range(edges[j], edges[j + 1])) for j in range(blocks)
            for on in ((True, False) if forward(point, j) else (False, True))]
