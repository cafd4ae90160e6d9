"""Static draft trees (EAGLE-1 `eagle_choices`) and the chain a draft model proposes, as one type.

A choice is a path of top-k ranks from the root: [0, 2] is "the 3rd most likely child of the most
likely first token". The verify block is [root, node 1, ..., node N] with nodes sorted by
(depth, path), so a parent always precedes its children. A chain of K draft tokens is the tree
[[0], [0, 0], ...]: one greedy/acceptance code path serves both.

Validation follows TensorRT-LLM (README / `check_eagle_choices`, trtllm.md §4.4) with one
relaxation: TRT-LLM wants max depth == num_eagle_layers; we accept shallower trees (they only run
fewer drafter levels) and refuse deeper ones, which the engine could not draft.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from ..errors import TrtspecError


@dataclass(frozen=True)
class Tree:
    paths: tuple[tuple[int, ...], ...]  # node n (1-based block index) has path paths[n - 1]
    parent: tuple[int, ...]  # block index of each block entry's parent; parent[0] = -1 (root)
    depth: tuple[int, ...]  # depth[0] = 0 (root)
    rank: tuple[int, ...]  # top-k rank of each node among its parent's candidates; rank[0] = -1
    children: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:  # nodes, root excluded
        return len(self.paths)

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    def level(self, d: int) -> list[int]:
        return [n for n in range(1, self.size + 1) if self.depth[n] == d]

    @cached_property
    def mask(self) -> torch.Tensor:
        """[N+1, N+1] ancestor-or-self mask: entry i may attend to entry j iff j is on i's root path."""
        n = self.size + 1
        m = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            j = i
            while j >= 0:
                m[i, j] = True
                j = self.parent[j]
        return m

    @cached_property
    def positions(self) -> torch.Tensor:
        """RoPE offsets of the block: the root's position + depth."""
        return torch.tensor(self.depth, dtype=torch.long)


def _rankable(logits: torch.Tensor) -> torch.Tensor:
    """NaN logits ranked last (as -inf), so a row with NaNs still yields k valid ids: topk puts NaN
    above everything and every comparison with NaN is false, which left top_ids short of k ids (an
    out-of-range gather) and rank_of inconsistent with it. Elementwise, so nothing is read back."""
    return torch.where(logits.isnan(), float("-inf"), logits)


def top_ids(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The k most likely token ids of each row [..., V], best first, equal logits by lower id: the
    order a choice's ranks index (argmax's for rank 0). torch.topk's order among equal values depends
    on k (k = 1 gives the lower id, k >= 2 often the higher), and bf16 logits tie often enough that
    the profiler's ranks (rank_of) must follow one fixed rule that does not.

    Without a full sort (tens of topk's time over a 128k vocabulary) and without reading the device:
    the ids above the k-th largest value, then the lowest-id ties at it, fill exactly k places; those
    k ids are taken in ascending order (the k smallest of id-or-V) and ordered by logit, stably."""
    logits = _rankable(logits)
    kth = logits.topk(k, dim=-1).values[..., -1:]
    above = logits > kth
    ties = logits == kth
    room = k - above.sum(-1, keepdim=True)  # places left for ties at the k-th value
    chosen = above | (ties & (ties.cumsum(-1) <= room))
    vocab = torch.arange(logits.shape[-1], device=logits.device)
    ids = torch.where(chosen, vocab, logits.shape[-1]).topk(k, dim=-1, largest=False).values  # ascending
    order = logits.gather(-1, ids).sort(dim=-1, descending=True, stable=True).indices
    return ids.gather(-1, order)


def rank_of(logits: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """The rank of `token` [rows] in each row of logits [rows, V] in top_ids' order (0 = argmax)."""
    logits = _rankable(logits)
    value = logits.gather(-1, token[:, None])
    ids = torch.arange(logits.shape[-1], device=logits.device)
    before = (logits > value) | ((logits == value) & (ids[None, :] < token[:, None]))
    return before.sum(-1)


def build(paths: list[list[int]] | list[tuple[int, ...]]) -> Tree:
    """A Tree from valid, deduplicated choices (any order)."""
    ordered = sorted({tuple(p) for p in paths}, key=lambda p: (len(p), p))
    index = {(): 0}
    parent, depth, rank = [-1], [0], [-1]
    children: list[list[int]] = [[]]
    for n, p in enumerate(ordered, start=1):
        index[p] = n
        parent.append(index[p[:-1]])
        depth.append(len(p))
        rank.append(p[-1])
        children.append([])
        children[index[p[:-1]]].append(n)
    return Tree(tuple(ordered), tuple(parent), tuple(depth), tuple(rank), tuple(tuple(c) for c in children))


def chain(k: int) -> Tree:
    """K draft tokens in a row: the tree a draft model's greedy proposal is."""
    return build([[0] * d for d in range(1, k + 1)])


def validate_choices(choices, num_eagle_layers: int, max_draft_len: int, max_non_leaves: int) -> Tree:
    """Check `eagle_choices` against the checkpoint's EAGLE limits; each violation names its rule."""
    if not isinstance(choices, (list, tuple)) or not choices:
        raise TrtspecError("eagle_choices: expected a non-empty list of paths, e.g. [[0], [1], [0, 0]]")
    for c in choices:
        if (not isinstance(c, (list, tuple)) or not c
                or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in c)):
            raise TrtspecError(f"eagle_choices: {c!r} is not a non-empty list of non-negative integers")
    paths = sorted({tuple(c) for c in choices}, key=lambda p: (len(p), p))
    present = set(paths)
    for p in paths:
        for d in range(1, len(p)):
            if p[:d] not in present:
                raise TrtspecError(f"eagle_choices: {list(p)} is present but its prefix {list(p[:d])} is not "
                                   "(every prefix of a choice must be a choice)")
    depth = max(len(p) for p in paths)
    if depth > num_eagle_layers:
        raise TrtspecError(f"eagle_choices: depth {depth} exceeds num_eagle_layers={num_eagle_layers} "
                           "(the engine drafts at most num_eagle_layers levels)")
    if len(paths) > max_draft_len:
        raise TrtspecError(f"eagle_choices: {len(paths)} nodes exceed max_draft_len={max_draft_len}")
    for d in range(1, depth):
        non_leaves = {p[:d] for p in paths if len(p) > d}
        if len(non_leaves) > max_non_leaves:
            raise TrtspecError(f"eagle_choices: {len(non_leaves)} non-leaf nodes at depth {d} exceed "
                               f"max_non_leaves_per_layer={max_non_leaves}")
    return build(paths)
