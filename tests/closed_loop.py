"""A simulated in-flight-batching engine under c closed-loop clients: the oracle the tests hold
Little's law (tuning.calibrate.prefills_per_request) and perf's end-to-end prediction
(perf.stats.end_to_end_prediction, stall_s) against. Test code, not trtspec's.

Each iteration runs the context phase of one request that has arrived (one at a time, on the
engine's timeline; its first token comes at the end) or else one step of every decoding request,
which then has `tokens_per_step` more tokens; a request ends after `steps` steps and its client sends
the next at once. Clients start staggered (client i as if i/c through a request); the first half of
the requests is warm-up and not returned."""

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
                requests: int = 4000) -> list[Simulated]:
    now, waiting, left, live, done = 0.0, [], {}, {}, []
    for i in range(c):
        heapq.heappush(waiting, (i * steps // c, i))
    next_id = c
    while len(done) < requests:
        if waiting:
            offset, r = heapq.heappop(waiting)
            live[r] = Simulated(start=now)
            now += prefill
            live[r].chunk_times.append(now)
            live[r].tokens = 1
            left[r] = steps - offset
            continue
        now += step
        for r in list(left):
            live[r].chunk_times.append(now)
            live[r].tokens += tokens_per_step
            left[r] -= 1
            if left[r] == 0:
                del left[r]
                done.append(live.pop(r))
                heapq.heappush(waiting, (0, next_id))
                next_id += 1
    return done[requests // 2:]
