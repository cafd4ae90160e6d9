"""EAGLE tree search: grow `eagle_choices` by empirical node probability under TRT-LLM's rules.

Rules a served tree must meet (trtllm.md §4.4, `check_eagle_choices`): every prefix of a path is a
path (connectivity); max depth == num_eagle_layers exactly (no deeper, and not shallower either:
the engine always drafts num_eagle_layers levels); len(choices) <= max_draft_len (here: the node
budget); at most max_non_leaves_per_layer non-leaf nodes at each depth >= 1. Ranks are limited to
the profile's tree_top_k (a deeper rank was never recorded).

Why greedy by node probability is (near-)optimal. Let p(v) be the fraction of states whose rank
path passes through node v. A tree is prefix-closed, so the nodes a state accepts are exactly the
tree nodes on its rank path: the mean accepted length over states is the sum of p(v) over the
tree, additive in the nodes. p never increases from a parent to its child, so the N nodes of
largest p (ties: shallower first) are always connected, and taking nodes in decreasing p gives the
tree of maximum mean acceptance for every size N at once (the Medusa/Sequoia argument, with
empirical path probabilities instead of a per-depth acceptance model). TRT-LLM's exact-depth rule
is met by seeding the growth with the path to one full-depth node; given the seed, the best
completion is again the top counts, so trying every full-depth node that was ever hit as the seed
(up to `max_seeds`, by decreasing path sum) and keeping the best tree per size is *exact* for this
surrogate. What keeps it "near" optimal rather than optimal: (1) the per-level non-leaf cap (a
node whose parent would exceed its level's cap is skipped: a knapsack-like choice greedy does not
optimise); (2) replay AL weights states by how often step boundaries land on them, not uniformly.
So the surrogate ranks the trees of each size, exact replay and the cost model pick the size, and
the caller also evaluates the top-1 chain and TRT-LLM's default tree: the choice is never worse
than those under the same prediction.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..errors import TrtspecError
from .acceptance import tokens_steps

Path_ = tuple[int, ...]


@dataclass
class NodeStats:
    """Where each node is hit: for every node, the (sample, state) pairs whose rank path passes it."""
    depth: int  # deepest level considered (num_eagle_layers)
    horizons: list[int]  # T per sample
    offsets: np.ndarray  # start of each sample in the flat state array
    hits: dict[Path_, np.ndarray] = field(default_factory=dict)  # node -> flat state indices

    @property
    def num_states(self) -> int:  # replayable states: t >= 1 of every sample
        return sum(max(0, T - 1) for T in self.horizons)

    def count(self, node: Path_) -> int:
        return len(self.hits.get(node, ()))


def node_stats(samples: Sequence[Sequence[Sequence[int]]], depth: int) -> NodeStats:
    """Index the rank paths of every state t >= 1 (state 0 is the prefill token, never verified)."""
    horizons = [len(s) for s in samples]
    offsets = np.concatenate([[0], np.cumsum(horizons)[:-1]]).astype(np.int64)
    lists: dict[Path_, list[int]] = {}
    for off, paths in zip(offsets, samples):
        for t in range(1, len(paths)):
            p = paths[t]
            for d in range(1, min(len(p), depth) + 1):
                if p[d - 1] < 0:
                    break
                lists.setdefault(tuple(p[:d]), []).append(int(off) + t)
    return NodeStats(depth, horizons, offsets, {k: np.asarray(v, np.int64) for k, v in lists.items()})


def non_leaves(choices: Sequence[Sequence[int]]) -> dict[int, int]:
    """{depth d >= 1: non-leaf nodes at depth d}."""
    parents = {tuple(c[:-1]) for c in choices if len(c) > 1}
    out: dict[int, int] = {}
    for p in parents:
        out[len(p)] = out.get(len(p), 0) + 1
    return out


def level_sizes(choices: Sequence[Sequence[int]], depth: int) -> list[int]:
    """Tokens the drafter runs per level: level 0 the accepted tokens (1), level d the non-leaves at depth d."""
    nl = non_leaves(choices)
    return [1] + [nl.get(d, 0) for d in range(1, depth)]


def check_tree(choices: Sequence[Sequence[int]], depth: int, budget: int, max_non_leaves: int, top_k: int) -> None:
    """Raise TrtspecError naming the first TRT-LLM rule `choices` breaks."""
    nodes = {tuple(c) for c in choices}
    if len(nodes) != len(choices) or not nodes:
        raise TrtspecError("eagle_choices: expected a non-empty list of distinct paths")
    for p in nodes:
        if not p or any(not 0 <= r < top_k for r in p):
            raise TrtspecError(f"eagle_choices: {list(p)} has a rank outside [0, {top_k})")
        if any(p[:d] not in nodes for d in range(1, len(p))):
            raise TrtspecError(f"eagle_choices: {list(p)} is present but a prefix is not")
    if max(len(p) for p in nodes) != depth:
        raise TrtspecError(f"eagle_choices: max depth {max(len(p) for p in nodes)} != num_eagle_layers={depth}")
    if len(nodes) > budget:
        raise TrtspecError(f"eagle_choices: {len(nodes)} nodes exceed the budget {budget}")
    for d, n in non_leaves(choices).items():
        if n > max_non_leaves:
            raise TrtspecError(f"eagle_choices: {n} non-leaves at depth {d} exceed {max_non_leaves}")


def sort_choices(nodes) -> list[list[int]]:
    """TRT-LLM's canonical order: by (depth, path)."""
    return [list(p) for p in sorted(nodes, key=lambda p: (len(p), p))]


def _path_sum(stats: NodeStats, v: Path_) -> int:
    return sum(stats.count(v[:d]) for d in range(1, len(v) + 1))


def depth_seeds(stats: NodeStats, depth: int, limit: int) -> list[Path_]:
    """Full-depth nodes to seed the growth with: those ever hit, by decreasing path sum (the
    surrogate of the chain to them); when none is hit, the most-hit path extended with rank 0."""
    hit = [v for v in stats.hits if len(v) == depth]
    if hit:
        return sorted(hit, key=lambda v: (-_path_sum(stats, v), v))[:limit]
    partial = max(stats.hits, key=lambda v: (_path_sum(stats, v), -len(v)), default=())
    return [partial + (0,) * (depth - len(partial))]


def grow(stats: NodeStats, seed: Path_, budget: int, max_non_leaves: int, top_k: int) -> list[Path_]:
    """Nodes in the order they enter the tree: the seed's path first, then greedily by hit count
    (ties: shallower, then smaller ranks) under connectivity and the non-leaf cap; nodes never hit
    are not added beyond the seed. Every prefix of length >= len(seed) is a valid tree."""
    depth = len(seed)
    order = [seed[:d] for d in range(1, depth + 1)]
    in_tree = set(order)
    nl: dict[int, set[Path_]] = {d: {seed[:d]} for d in range(1, depth)}
    heap: list[tuple[int, int, Path_]] = []

    def push_children(v: Path_) -> None:
        if len(v) < depth:
            for r in range(top_k):
                c = v + (r,)
                if c not in in_tree and stats.count(c):
                    heapq.heappush(heap, (-stats.count(c), len(c), c))

    for v in [()] + order:
        push_children(v)
    while heap and len(order) < budget:
        _, _, v = heapq.heappop(heap)
        parent = v[:-1]
        level = nl.setdefault(len(parent), set())
        if parent and parent not in level and len(level) >= max_non_leaves:
            continue  # the parent is a leaf and its level has no non-leaf slot left
        if parent:
            level.add(parent)
        order.append(v)
        in_tree.add(v)
        push_children(v)
    return order


def best_trees(stats: NodeStats, depth: int, budget: int, max_non_leaves: int, top_k: int,
               max_seeds: int = 64) -> dict[int, list[Path_]]:
    """{size N: the tree of N nodes with the largest surrogate sum of hit counts} for N = depth..,
    over greedy growths from up to `max_seeds` full-depth seeds (exact for the surrogate when every
    hit full-depth node is tried and the non-leaf cap does not bind; see the module docstring)."""
    if budget < depth:
        raise TrtspecError(f"eagle node budget {budget} is smaller than num_eagle_layers={depth}: "
                           "a tree must reach that depth")
    if depth > 1 and max_non_leaves < 1:
        raise TrtspecError("max_non_leaves_per_layer must be >= 1 for a tree deeper than 1")
    best: dict[int, tuple[int, list[Path_]]] = {}
    for seed in depth_seeds(stats, depth, max_seeds):
        order = grow(stats, seed, budget, max_non_leaves, top_k)
        total = 0
        for n, v in enumerate(order, start=1):
            total += stats.count(v)
            if n >= depth and (n not in best or total > best[n][0]):
                best[n] = (total, order[:n])
    return {n: nodes for n, (_, nodes) in sorted(best.items())}


def accepted_array(stats: NodeStats, nodes) -> np.ndarray:
    """Accepted draft tokens per flat state for a prefix-closed node set: the deepest node hit."""
    acc = np.zeros(int(sum(stats.horizons)), np.int64)
    for v in sorted(nodes, key=len):  # parents first: a child's hits are a subset of its parent's
        idx = stats.hits.get(tuple(v))
        if idx is not None:
            acc[idx] = len(v)
    return acc


def replay_al(stats: NodeStats, acc: np.ndarray) -> float | None:
    """Exact replay AL (acceptance.py step rule) over flat accepted counts."""
    steps = tokens = 0
    flat = acc.tolist()
    for off, T in zip(stats.offsets.tolist(), stats.horizons):
        y, x = tokens_steps(flat[off:off + T])
        steps, tokens = steps + x, tokens + y
    return tokens / steps if steps else None
