"""Synthetic profiles with known acceptance, for tests, examples and sanity checks of the tuner.

Chain drafts: each position j of a sample agrees with the target with probability `alpha`
(i.i.d.), and match_lengths[t] is the run of agreements from t, which is exactly how the profiler
derives it from a teacher-forced pass, so chain replay of K gives E[AL] = (1 - alpha^(K+1)) /
(1 - alpha) in expectation (landscape.md §4.2). EAGLE: the rank of the true token at each depth
is 0 with probability `alpha`, else drawn from ranks 1..top_k-1 with weights 1/r, or missed (-1)
with probability `miss`; paths stop at the first miss or at the profiled depth.
"""

from __future__ import annotations

import random

from .schema import Profile, build_profile


def chain_sample(alpha: float, T: int, max_k: int, rng: random.Random) -> list[int]:
    agree = [rng.random() < alpha for _ in range(T + max_k)]
    out = [0] * T
    runs = [0] * (len(agree) + 1)
    for j in range(len(agree) - 1, -1, -1):
        runs[j] = runs[j + 1] + 1 if agree[j] else 0
    for t in range(T):
        out[t] = min(runs[t], max_k)
    return out


def rank_path(alpha: float, miss: float, depth: int, top_k: int, rng: random.Random) -> list[int]:
    weights = [1.0 / r for r in range(1, top_k)]
    path = []
    for _ in range(depth):
        u = rng.random()
        if u < alpha:
            path.append(0)
        elif u < alpha + miss or top_k == 1:
            path.append(-1)
            break
        else:
            path.append(rng.choices(range(1, top_k), weights)[0])
    return path


def conditions(**over) -> dict:
    c = {"target": "synthetic-target", "draft": "synthetic-draft", "quantization": {}, "temperature": 0.0,
         "max_new_tokens": 128, "dtype": "bfloat16", "trtspec_version": "0.1.0"}
    c.update(over)
    return c


def chain_profile(alphas: dict[str, float], num_samples: int = 8, T: int = 128, max_k: int = 8,
                  prompt_len: int = 256, seed: int = 0, **cond) -> Profile:
    rng = random.Random(seed)
    work = {name: [{"id": f"{name}-{i}", "prompt_len": prompt_len,
                    "match_lengths": chain_sample(a, T, max_k, rng)} for i in range(num_samples)]
            for name, a in alphas.items()}
    return build_profile("draft-target", max_k, None, conditions(max_new_tokens=T, **cond), work)


def eagle_profile(params: dict[str, tuple[float, float]], num_samples: int = 8, T: int = 128, depth: int = 4,
                  top_k: int = 10, prompt_len: int = 256, seed: int = 0, **cond) -> Profile:
    """params: workload -> (alpha, miss)."""
    rng = random.Random(seed)
    work = {name: [{"id": f"{name}-{i}", "prompt_len": prompt_len,
                    "rank_paths": [rank_path(a, m, depth, top_k, rng) for _ in range(T)]}
                   for i in range(num_samples)]
            for name, (a, m) in params.items()}
    return build_profile("eagle", depth, top_k, conditions(max_new_tokens=T, draft=None, **cond), work)
