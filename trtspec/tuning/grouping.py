"""Group workloads into at most N served profiles (EAGLE: one model instance per eagle_choices tree).

Input: a loss matrix L[i, j] = 1 - tokens/s of workload i under candidate setting j / tokens/s
of workload i under its own best setting (cross-evaluated by exact replay and the cost model;
L >= 0, L[i, own] = 0). Pick at most N candidates M minimising sum_i min_{j in M} L[i, j] and
serve each workload with its best pick: k-medoids where the "distance" is the throughput a
workload gives up. Workloads count equally (weight them by traffic share later if known).

Exact when the subsets of at most N candidates, sum over k <= N of C(candidates, k), are few (the
usual case: a handful of workloads), otherwise greedy addition followed by single swaps until no
swap helps (PAM).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

EXACT_LIMIT = 20000  # subsets enumerated exactly below this many


def _cost(loss: np.ndarray, chosen) -> float:
    return float(loss[:, list(chosen)].min(axis=1).sum())


def exact_subsets(num_candidates: int, n: int) -> int:
    """Subsets the exact search enumerates: every size 1..n, not only n (at n = candidates, C(C, n)
    is 1 while the search visits 2^C - 1: unlimited profiles over 30 workloads would never end)."""
    return sum(math.comb(num_candidates, k) for k in range(1, n + 1))


def choose_medoids(loss: np.ndarray, n: int) -> list[int]:
    """Indices of at most n candidate columns minimising the total loss (ties: fewer, lower index)."""
    W, C = loss.shape
    n = max(1, min(n, C))
    if exact_subsets(C, n) <= EXACT_LIMIT:
        best = None
        for k in range(1, n + 1):
            for chosen in itertools.combinations(range(C), k):
                c = _cost(loss, chosen)
                if best is None or c < best[0] - 1e-12:
                    best = (c, list(chosen))
        return best[1]
    chosen: list[int] = []
    while len(chosen) < n:  # greedy build
        j = min((j for j in range(C) if j not in chosen), key=lambda j: _cost(loss, chosen + [j]))
        chosen.append(j)
    improved = True
    while improved:  # swap phase
        improved = False
        for a, b in itertools.product(range(len(chosen)), range(C)):
            if b in chosen:
                continue
            trial = chosen[:a] + [b] + chosen[a + 1:]
            if _cost(loss, trial) < _cost(loss, chosen) - 1e-12:
                chosen, improved = trial, True
    return sorted(chosen)


def assign(loss: np.ndarray, chosen: list[int]) -> list[int]:
    """For each workload (row), the chosen candidate with the smallest loss."""
    return [chosen[int(np.argmin(loss[i, chosen]))] for i in range(loss.shape[0])]
