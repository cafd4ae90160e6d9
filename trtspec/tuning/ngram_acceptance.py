"""Acceptance aggregates of n-gram drafting, from the per-step records the profiler replays.

An n-gram draft depends on the request's pool, and the pool on where the previous steps ended, so
unlike a draft model's run of agreement (acceptance.py `match_lengths`) there is no per-state list
that serves every K: the profiler (ngram_profile.py) replays each (max_matching_ngram_size n, K)
and stores the steps themselves, `ngram_steps[str(n)][K - 1]` = [[accepted, drafted], ...] in step
order. From those, with the definitions of acceptance.py and runtime/stats.py:

- AL(n, K) = sum(accepted + 1) / steps (a step with no draft counts: accepted 0);
- offered = min(accepted + 1, drafted) (a chain of `drafted` tokens; runtime padding is never
  offered), but a sample's last step, which ends it, offers only what it accepted
  (runtime/stats.py counted_step; the recorded steps are already cut at the end), so the
  conditional and marginal rates follow as for chains;
- standard errors by acceptance.ratio_se over the samples' (tokens, steps), clustered by prompt id.

The profile's own `accept_length_by_k` and rates are those of its primary size (primary_size):
TensorRT-LLM's default when profiled, else the smallest. Plain Python, no torch.
"""

from __future__ import annotations

from typing import Sequence

from ..runtime.stats import Step, counted_step
from ..upstream import trtllm as upstream
from .acceptance import Replay, ratio_se

Steps = list[list[int]]  # [[accepted, drafted], ...] of one (n, K) replay of one sample


def primary_size(sizes: Sequence[int]) -> int:
    """The matching size the profile's single-n fields describe."""
    default = upstream.NGRAM_DEFAULT_MAX_MATCHING_NGRAM_SIZE
    return default if default in sizes else min(sizes)


def replay_steps(samples: Sequence[Steps], k: int) -> Replay:
    out = Replay(k)
    for steps in samples:
        left = sum(a + 1 for a, _ in steps)  # the tokens still to emit: the last step's own at the end
        for accepted, drafted in steps:
            step = counted_step(Step(accepted, min(accepted + 1, drafted)), left)
            out.add(step.accepted, step.offered)
            left -= accepted + 1
    return out


def step_counts(steps: Steps) -> tuple[int, int]:
    return sum(a + 1 for a, _ in steps), len(steps)


def summarize_ngram(samples: list[dict[str, list[Steps]]], sizes: Sequence[int], max_k: int,
                    clusters: Sequence | None = None) -> dict:
    """The per-workload aggregates of an n-gram profile (module docstring): the schema's common
    fields for the primary size, and `accept_length_by_n_k` / `accept_length_se_by_n_k` for all."""
    by_n_k, se_by_n_k = {}, {}
    for n in sizes:
        per_k = [[s[str(n)][k - 1] for s in samples] for k in range(1, max_k + 1)]
        by_n_k[str(n)] = {str(k): replay_steps(per_k[k - 1], k).acceptance_length for k in range(1, max_k + 1)}
        se_by_n_k[str(n)] = {str(k): ratio_se([step_counts(x) for x in per_k[k - 1]], clusters)
                             for k in range(1, max_k + 1)}
    n = str(primary_size(sizes))
    full = replay_steps([s[n][max_k - 1] for s in samples], max_k)
    return {"num_samples": len(samples), "mean_accept_length": full.acceptance_length,
            "accept_length_by_k": by_n_k[n], "accept_length_se_by_k": se_by_n_k[n],
            "conditional_accept_rates": full.conditional_rates(), "marginal_accept_rates": full.marginal_rates(),
            "accept_length_by_n_k": by_n_k, "accept_length_se_by_n_k": se_by_n_k}
