"""A simulated in-flight-batching engine under c closed-loop clients: the oracle the tests hold
Little's law (tuning.calibrate.prefills_per_request) and perf's end-to-end prediction
(perf.stats.end_to_end_prediction, stall_s) against. Test code, not trtspec's.

Each iteration runs the context phase of one request that has arrived (one at a time, on the
engine's timeline; its first token comes at the end) or else one step of every decoding request,
which then has `tokens_per_step` more tokens; a request ends after `steps` steps and its client sends
the next at once. With `chunks` > 1 a context phase is cut into that many chunks, each run in one
iteration together with the decoding requests' step (chunked context under in-flight batching).
Clients start staggered (client i as if i/c through a request); the first half of the requests is
warm-up and not returned."""

from __future__ import annotations

import heapq
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
    now, waiting, left, live, done = 0.0, [], {}, {}, []
    for i in range(c):
        heapq.heappush(waiting, (i * steps // c, i))
    next_id, context = c, None  # context: [request, offset, chunks left] of the phase under way
    while len(done) < requests:
        if context is None and waiting:
            offset, r = heapq.heappop(waiting)
            live[r], context = Simulated(start=now), [r, offset, chunks]
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
                heapq.heappush(waiting, (0, next_id))
                next_id += 1
    return done[requests // 2:]
