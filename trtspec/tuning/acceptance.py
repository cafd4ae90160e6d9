"""Acceptance length of any chain length K or EAGLE tree, replayed exactly from one profiling pass.

Notation. A sample's target output (greedy, or sampled with a recorded seed: sampled.py) is
x_1..x_T. *State t* (0 <= t < T) is the moment the committed sequence is prompt + x_1..x_t, i.e. it
ends just before x_{t+1}. The profile stores one entry per state (trtspec/tuning/profile.py
measures them):

- chain drafts: `match_lengths[t]` = m_t, how many consecutive draft proposals made from state t
  equal x_{t+1}, x_{t+2}, ... (capped at the profiled max K, and cut where the sequence ends);
- EAGLE trees: `rank_paths[t]` = [r_1, .., r_j], r_d = rank (0 = top-1) of x_{t+d} among the
  drafter's candidates at depth d along the true path; a final -1 means "not in the recorded top-k".

Step boundaries (identical to the runtime loop in trtspec/runtime/decode.py and to TRT-LLM):
the first token x_1 comes from the target's prefill (context phase), not from a verify step, so
replay starts at state t = 1. At state t a step accepts

    chain of length K:  a_t = min(m_t, K)
    tree (eagle_choices): a_t = the largest d such that [r_1..r_d] is a node of the tree (all r >= 0)

emits a_t + 1 tokens (the accepted drafts and the target's bonus token) and moves to t + a_t + 1;
replay stops once t >= T. The *final step counts only what it emits*: T is where the request
ends (its end id, x_T, or max_new_tokens), so a step from state t emits at most T - t tokens, and
the one that reaches T counts a_t = T - t - 1 accepted drafts and offers nothing past them, as
TensorRT-LLM counts a served request and as the runtime does (trtspec/runtime/stats.py,
`counted_step`, the one rule both apply). A sample's steps thus emit exactly T - 1 tokens.
Consequently replay over a profile of T tokens equals the runtime's AL at max_new_tokens = T, or
at the end id that ended the output at x_T: no run needs to be known past the end.

Metrics (definitions shared with trtspec/runtime/stats.py and ModelOpt's speculation_profile):
- AL (acceptance length) = sum over steps of (a + 1) / steps: tokens per target verify step, bonus
  included (TRT-LLM avgDecodedTokensPerIter), pooled over all steps of all samples (per-step mean);
- offered_t = draft positions the step could have accepted along its path: chain min(a + 1, K),
  tree a + 1 if the last accepted node (or the root) has children in the tree, else a; the final
  step offers a_t (nothing past the end is compared);
- position i (1-based; depth for trees) is *reached* when offered >= i;
  conditional rate P(accept i | accepted < i) = #(a >= i) / #(offered >= i) (None if never reached),
  marginal rate P(accept i) = #(a >= i) / steps. Identity: AL = 1 + sum_i marginal_i.

Standard errors. AL is a ratio estimator, tokens / steps pooled over samples; its uncertainty comes
from which prompts (and, at T > 0, which sampling draws) were profiled. `ratio_se` treats clusters
(one per prompt: the samples of one prompt id, several when a prompt is profiled with several seeds)
as independent and uses the delta method (linearisation of the ratio):

    SE(R)^2 = n / (n - 1) * sum_i (y_i - R x_i)^2 / (sum_i x_i)^2,   R = sum y / sum x

with y_i, x_i the tokens and steps of cluster i. It needs no resampling, so it is as cheap as the
replay itself; None below 2 clusters (no spread to measure).

Everything here is plain Python on lists: no torch, no numpy, cheap to call thousands of times.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ..errors import TrtspecError
from ..runtime.stats import Step, counted_step


@dataclass
class Replay:
    """Pooled replay of one setting over a set of samples."""
    max_positions: int  # K, or tree depth
    steps: int = 0
    tokens: int = 0  # sum of (accepted + 1): the tokens the steps emit
    accepted_at: list[int] = field(default_factory=list)  # [i-1]: steps with accepted >= i
    reached: list[int] = field(default_factory=list)  # [i-1]: steps with offered >= i

    def __post_init__(self):
        self.accepted_at = self.accepted_at or [0] * self.max_positions
        self.reached = self.reached or [0] * self.max_positions

    def add(self, accepted: int, offered: int) -> None:
        """One step, counted as the runtime counts it (`counted`, or per record for n-gram)."""
        self.steps += 1
        self.tokens += accepted + 1
        for i in range(accepted):
            self.accepted_at[i] += 1
        for i in range(offered):
            self.reached[i] += 1

    @property
    def acceptance_length(self) -> float | None:
        return self.tokens / self.steps if self.steps else None

    def conditional_rates(self) -> list[float | None]:
        return [a / r if r else None for a, r in zip(self.accepted_at, self.reached)]

    def marginal_rates(self) -> list[float | None]:
        return [a / self.steps if self.steps else None for a in self.accepted_at]


def step_states(accepted: Sequence[int], horizon: int | None = None) -> Iterable[int]:
    """The states a replay visits: 1, then t + accepted[t] + 1 while t < horizon (default len)."""
    T = len(accepted) if horizon is None else horizon
    t = 1
    while t < T:
        yield t
        t += accepted[t] + 1


def counted(accepted: Sequence[int], t: int, offered: int) -> Step:
    """The step from state t as the runtime counts it: it emits at most the T - t tokens left
    before the sample's recorded output ends (module docstring; runtime.stats.counted_step)."""
    return counted_step(Step(accepted[t], offered), len(accepted) - t)


def tokens_steps(accepted: Sequence[int]) -> tuple[int, int]:
    """(tokens, steps) one sample's replay counts from its per-state accepted counts."""
    steps = tokens = 0
    T, t = len(accepted), 1
    while t < T:
        a = counted(accepted, t, 0).accepted
        steps, tokens, t = steps + 1, tokens + a + 1, t + a + 1
    return tokens, steps


def acceptance_length(per_sample_accepted: Iterable[Sequence[int]]) -> float | None:
    """Pooled AL of per-state accepted counts (the fast path: no per-position bookkeeping)."""
    steps = tokens = 0
    for acc in per_sample_accepted:
        y, x = tokens_steps(acc)
        tokens, steps = tokens + y, steps + x
    return tokens / steps if steps else None


def ratio_se(counts: Sequence[tuple[float, float]], clusters: Sequence | None = None) -> float | None:
    """Standard error of sum(tokens) / sum(steps) over samples' (tokens, steps) `counts`, samples with
    the same cluster key pooled first (default: each sample its own cluster); module docstring.
    A cluster without steps (an answer of one token) adds nothing to the ratio, nor is it a prompt
    whose spread is measured: with one other cluster it would make a zero SE of one prompt."""
    pooled: dict = {}
    for i, (y, x) in enumerate(counts):
        key = i if clusters is None else clusters[i]
        py, px = pooled.get(key, (0.0, 0.0))
        pooled[key] = (py + y, px + x)
    pooled = {k: (y, x) for k, (y, x) in pooled.items() if x > 0}
    n, total_x = len(pooled), sum(x for _, x in pooled.values())
    if n < 2 or total_x == 0:
        return None
    r = sum(y for y, _ in pooled.values()) / total_x
    return (n / (n - 1) * sum((y - r * x) ** 2 for y, x in pooled.values())) ** 0.5 / total_x


def paired_ratio_delta_se(ref: list[tuple[float, float]], quant: list[tuple[float, float]]) -> float | None:
    """Standard error of sum(yq)/sum(xq) - sum(yr)/sum(xr), both ratios over the same prompts
    (ref[i] and quant[i] are prompt i's (y, x)): the delta method applied to the difference, so a
    prompt that is hard for both pairs cancels instead of counting in each ratio's own SE."""
    pairs = [(r, q) for r, q in zip(ref, quant) if r[1] > 0 or q[1] > 0]
    xr, xq = sum(r[1] for r, _ in pairs), sum(q[1] for _, q in pairs)
    if len(pairs) < 2 or not xr or not xq:
        return None
    rr, rq = sum(r[0] for r, _ in pairs) / xr, sum(q[0] for _, q in pairs) / xq
    terms = [(q[0] - rq * q[1]) / xq - (r[0] - rr * r[1]) / xr for r, q in pairs]
    n = len(pairs)
    return math.sqrt(n / (n - 1) * sum(t * t for t in terms))


def acceptance_length_se(per_sample_accepted: Iterable[Sequence[int]], clusters: Sequence | None = None
                         ) -> float | None:
    """ratio_se of the pooled AL of per-state accepted counts."""
    return ratio_se([tokens_steps(acc) for acc in per_sample_accepted], clusters)


# ---- chains (draft-target, or the top-1 chain of an EAGLE drafter) ------------------------------

def chain_accepted(match_lengths: Sequence[int], k: int) -> list[int]:
    return [min(m, k) for m in match_lengths]


def replay_chain(samples: Iterable[Sequence[int]], k: int) -> Replay:
    """Replay draft length K over each sample's match_lengths. K = 0 (no speculation) is AL 1."""
    if k < 0:
        raise ValueError(f"draft length must be >= 0, got {k}")
    out = Replay(k)
    for m in samples:
        acc = chain_accepted(m, k)
        for t in step_states(acc):
            step = counted(acc, t, min(acc[t] + 1, k))
            out.add(step.accepted, step.offered)
    return out


# ---- trees (EAGLE-1 eagle_choices) --------------------------------------------------------------

def rank_path_accepted(path: Sequence[int], nodes: set[tuple[int, ...]]) -> int:
    """Largest d such that path[:d] is a node (every rank >= 0); 0 if the first rank misses."""
    a = 0
    while a < len(path) and path[a] >= 0 and tuple(path[:a + 1]) in nodes:
        a += 1
    return a


def rank_paths_to_chain(rank_paths: Sequence[Sequence[int]], max_depth: int) -> list[int]:
    """The top-1 chain's match length per state: leading zeros of each rank path."""
    out = []
    for p in rank_paths:
        n = 0
        while n < len(p) and n < max_depth and p[n] == 0:
            n += 1
        out.append(n)
    return out


class TreeIndex:
    """A prefix-closed set of paths with O(1) node and has-children lookups."""

    def __init__(self, choices: Iterable[Sequence[int]]):
        self.nodes = {tuple(c) for c in choices}
        if not self.nodes:
            raise TrtspecError("eagle_choices: expected at least one path")
        for p in self.nodes:
            if not p or any(r < 0 for r in p) or any(p[:d] not in self.nodes for d in range(1, len(p))):
                raise TrtspecError(f"eagle_choices: {list(p)} is empty, has a negative rank or a missing prefix")
        self.parents = {p[:-1] for p in self.nodes}  # nodes with children (the root () included)
        self.depth = max(len(p) for p in self.nodes)

    def accepted(self, path: Sequence[int]) -> int:
        return rank_path_accepted(path, self.nodes)

    def offered(self, path: Sequence[int], accepted: int) -> int:
        return accepted + (1 if tuple(path[:accepted]) in self.parents else 0)


def replay_tree(samples: Iterable[Sequence[Sequence[int]]], choices: Iterable[Sequence[int]]) -> Replay:
    """Replay a static tree over each sample's rank_paths."""
    tree = choices if isinstance(choices, TreeIndex) else TreeIndex(choices)
    out = Replay(tree.depth)
    for paths in samples:
        acc = [tree.accepted(p) for p in paths]
        for t in step_states(acc):
            step = counted(acc, t, tree.offered(paths[t], acc[t]))
            out.add(step.accepted, step.offered)
    return out


def chain_choices(depth: int) -> list[list[int]]:
    """The top-1 chain as eagle_choices: [[0], [0, 0], ...]."""
    return [[0] * d for d in range(1, depth + 1)]


# ---- profile aggregates --------------------------------------------------------------------------

def tree_se(samples: Iterable[Sequence[Sequence[int]]], choices, clusters: Sequence | None = None) -> float | None:
    """Standard error of a static tree's replayed AL over samples' rank_paths (see ratio_se)."""
    tree = choices if isinstance(choices, TreeIndex) else TreeIndex(choices)
    return acceptance_length_se(([tree.accepted(p) for p in paths] for paths in samples), clusters)


def chains_of(mode: str, samples: list[Sequence], max_k: int) -> list[Sequence[int]]:
    """Each sample as the chain of match lengths summarize's ALs count: an EAGLE sample's rank paths
    as its top-1 chain of depth max_k, the others' as they are."""
    return [rank_paths_to_chain(p, max_k) for p in samples] if mode == "eagle" else samples


def summarize(mode: str, samples: list[Sequence], max_k: int, clusters: Sequence | None = None) -> dict:
    """The per-workload aggregates a profile stores, from its samples' per-state lists.

    `accept_length_by_k[k]` is the AL of a chain of k drafts: the draft model's greedy chain
    (draft-target), the EAGLE-3 head's chain (eagle3) or the EAGLE drafter's top-1 chain [[0], [0, 0], ..] of depth k (eagle). The
    conditional/marginal rates are those of the chain at K = max_k; `accept_length_se_by_k[k]` the
    standard error of each AL over `clusters` (one key per sample: its prompt id; ratio_se). Used by
    the profiler to write profile.json and by the tuner to check a profile it reads."""
    chains = chains_of(mode, samples, max_k)
    by_k = {str(k): acceptance_length(chain_accepted(c, k) for c in chains) for k in range(1, max_k + 1)}
    se_by_k = {str(k): acceptance_length_se([chain_accepted(c, k) for c in chains], clusters)
               for k in range(1, max_k + 1)}
    full = replay_chain(chains, max_k)
    return {"num_samples": len(samples), "num_tokens": sum(len(s) for s in samples),
            "mean_accept_length": full.acceptance_length, "accept_length_by_k": by_k,
            "accept_length_se_by_k": se_by_k,
            "conditional_accept_rates": full.conditional_rates(),
            "marginal_accept_rates": full.marginal_rates()}
