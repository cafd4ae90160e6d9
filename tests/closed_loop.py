"""A simulated in-flight-batching engine under c closed-loop clients or Poisson arrivals: the oracle
the tests hold Little's law (tuning.calibrate.prefills_per_request) and perf's end-to-end prediction
(perf.stats.end_to_end_prediction, stall_s, inflight) against. Test code, not trtspec's.

Each iteration runs the context phase of one request that has arrived (one at a time, on the
engine's timeline; its first token comes at the end) or else one step of every decoding request,
which then has `tokens_per_step` more tokens; a request ends after `steps` steps and (closed loop) its
client sends the next at once, or (open loop, `open_loop`) requests arrive at seeded Poisson times,
waiting their turn (the wait counts in their TTFT) and the engine idles until the next one. With `chunks` > 1 a context phase is cut into that many chunks, each run in one
iteration together with the decoding requests' step (chunked context under in-flight batching).
Clients start staggered (client i as if i/c through a request); the first half of the requests is
warm-up and not returned."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field


@dataclass
class Simulated:
    start: float
    chunk_times: list[float] = field(default_factory=list)  # when each streamed response arrives
    tokens: int = 0

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.start

    @property
    def e2e(self) -> float:
        return self.chunk_times[-1] - self.start


def closed_loop(c: int, prefill: float, steps: int, step: float, tokens_per_step: int = 1,
                requests: int = 4000, chunks: int = 1) -> list[Simulated]:
    first = [(i * steps // c, i, None) for i in range(c)]
    return _engine(first, lambda n: [(0, n, None)], prefill, steps, step, tokens_per_step, requests, chunks)


def open_loop(rate: float, prefill: float, steps: int, step: float, tokens_per_step: int = 1,
              requests: int = 4000, chunks: int = 1, seed: int = 0) -> list[Simulated]:
    rng, t, arrivals = random.Random(seed), 0.0, []
    for i in range(requests):
        t += rng.expovariate(rate)
        arrivals.append((0, i, t))
    return _engine(arrivals, lambda n: [], prefill, steps, step, tokens_per_step, requests, chunks)


def _engine(arrivals, on_done, prefill, steps, step, tokens_per_step, requests, chunks) -> list[Simulated]:
    """arrivals: (steps already done, id, arrival time; None: its clock starts when the engine admits
    it) of the first requests; on_done(next id): the requests a completion sends."""
    now, waiting, left, live, done = 0.0, [], {}, {}, []
    later = sorted((a for a in arrivals if a[2] is not None), key=lambda a: a[2])
    for a in arrivals:
        if a[2] is None:
            heapq.heappush(waiting, a)
    next_id, context = len(arrivals), None  # context: [request, offset, chunks left] of the phase under way
    while len(done) < requests:
        while later and later[0][2] <= now:
            heapq.heappush(waiting, later.pop(0))
        if context is None and not waiting and not left:
            now = later[0][2]  # idle until the next arrival
            continue
        if context is None and waiting:
            offset, r, arrived = heapq.heappop(waiting)
            live[r], context = Simulated(start=now if arrived is None else arrived), [r, offset, chunks]
        decoding = list(left)
        if context is not None and (chunks == 1 or not decoding):
            now += prefill / chunks  # the phase alone
        else:
            now += step + (prefill / chunks if context is not None else 0.0)
        if context is not None:
            context[2] -= 1
            if context[2] == 0:
                r, offset, _ = context
                live[r].chunk_times.append(now)
                live[r].tokens, left[r], context = 1, steps - offset, None
            if chunks == 1 or not decoding:
                continue
        for r in decoding:
            live[r].chunk_times.append(now)
            live[r].tokens += tokens_per_step
            left[r] -= 1
            if left[r] == 0:
                del left[r]
                done.append(live.pop(r))
                for a in on_done(next_id):  # a closed loop's next request: its clock starts when admitted
                    heapq.heappush(waiting, a)
                    next_id += 1
    return done[requests // 2:]
