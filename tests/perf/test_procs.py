"""How `--processes N` splits a run (trtspec.perf.procs.shares): the load the processes offer
together must be the load one process would offer."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from trtspec.perf.procs import shares


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
