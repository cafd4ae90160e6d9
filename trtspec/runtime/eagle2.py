"""EAGLE-2: a dynamic draft tree per row and step, grown by cumulative draft log-probability.

TRT-LLM's runtime switch `eagle_use_dynamic_tree` + `eagle_dynamic_tree_max_top_k=N` on the same
EAGLE-1 engine (trtllm.md §4.4). As in the EAGLE-2 paper (and SafeAILab `topK_genrate`):

1. the catch-up pairs run as in EAGLE-1; the root's top-N tokens are the depth-1 candidates,
   scored by their draft log-prob;
2. at each of the next num_eagle_layers - 1 levels the N best-scored nodes of the previous level
   are expanded (run through clone d); each proposes its top-N children, scored
   parent score + log-prob, so a level adds N*N candidates;
3. the tree sent to the target is the best min(N + N*N*(layers-1), max_draft_len) candidates by
   score, taking a node only once its parent is in (scores never increase along a path, so this
   only matters for ties).

Trees differ per row, so verification uses per-row masks and positions. Greedy acceptance is the
same walk as for static trees, so the output is still exactly the target's greedy output. The
exact tie-breaking and score normalisation of TRT-LLM's plugin are not reproduced bit for bit.

`eagle_proposer` / `generate_eagle` choose between EAGLE-1 (static tree, eagle.py) and EAGLE-2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import TrtspecError
from .batch import Request
from .decode import generate
from .eagle import EagleProposer, eagle_tree
from .eagle_net import EagleNet
from .model import Decoder
from .speculative import Proposal
from .stats import GenerationResult
from .tree import build


@dataclass
class Node:
    parent: int  # node id, -1 for the root
    path: tuple[int, ...]  # top-k ranks from the root (the tree's node name)
    token: int
    score: float  # cumulative draft log-prob
    ancestors: frozenset[int] = field(default_factory=frozenset)  # ids on the root path, itself included


def tree_size(top_k: int, levels: int, max_draft_len: int) -> int:
    return min(top_k + top_k * top_k * (levels - 1), max_draft_len)


class DynamicEagleProposer(EagleProposer):
    def __init__(self, net: EagleNet, top_k: int, target_vocab: int):
        if not 1 <= top_k <= net.max_non_leaves:
            raise TrtspecError(f"eagle dynamic tree: top_k={top_k} must be in [1, max_non_leaves_per_layer="
                               f"{net.max_non_leaves}] (N nodes are expanded per level)")
        if top_k > min(target_vocab, net.nets[0].lm_head.shape[0]):
            raise TrtspecError(f"eagle dynamic tree: top_k={top_k} exceeds the vocabulary")
        self.net, self.k = net, top_k
        self.size = tree_size(top_k, net.num_levels, net.max_draft_len)
        self.max_block, self.max_positions = self.size, net.num_levels
        # every level after the first runs its top_k nodes through the drafter, whatever max_draft_len
        # leaves of them in the tree sent to the target
        self.drafter_slots = (net.num_levels - 1) * top_k
        self.cache = None
        self.pending = {}

    def propose(self, requests: list[Request], rows: torch.Tensor) -> Proposal:
        B, k = len(rows), self.k
        root_h, root_logits = self.catch_up(rows)
        nodes = [[Node(-1, (), -1, 0.0, frozenset([0]))] for _ in range(B)]
        out = [{0: (root_h[b], root_logits[b])} for b in range(B)]  # expanded node id -> (hidden, logits)
        level = self._children(nodes, [[0]] * B, root_logits[:, None].log_softmax(-1))  # [B][k] ids
        written: list[list[int]] = [[] for _ in range(B)]  # uncommitted drafter slots, per row
        for d in range(1, self.net.num_levels):
            feats = torch.stack([torch.stack([out[b][nodes[b][i].parent][0] for i in level[b]]) for b in range(B)])
            toks = torch.tensor([[nodes[b][i].token for i in level[b]] for b in range(B)])
            region = [written[b] + level[b] for b in range(B)]
            mask = torch.tensor([[[j in nodes[b][i].ancestors for j in region[b]] for i in level[b]]
                                 for b in range(B)], dtype=torch.bool)
            lg, hd = self.net.forward(toks, feats, self.cache, level=d, rows=rows,
                                      pos_offsets=torch.full((k,), d - 1), block_mask=mask)
            for b in range(B):
                for j, i in enumerate(level[b]):
                    out[b][i] = (hd[b, j], lg[b, j])
            written = region
            candidates = self._children(nodes, level, lg.log_softmax(-1))  # k*k per row
            level = [sorted(c, key=lambda i, b=b: -nodes[b][i].score)[:k] for b, c in enumerate(candidates)]
        return self._select(nodes, out)

    def _children(self, nodes: list[list[Node]], parents: list[list[int]], logp: torch.Tensor) -> list[list[int]]:
        """Add the top-k children of each parent (logp [B, P, V]); returns the new ids per row."""
        top = logp.topk(self.k, dim=-1)
        indices, values = top.indices.tolist(), top.values.tolist()  # one read of the GPU per level
        new = []
        for b, row in enumerate(nodes):
            ids = []
            for j, p in enumerate(parents[b]):
                for r in range(self.k):
                    row.append(Node(p, row[p].path + (r,), indices[b][j][r],
                                    row[p].score + values[b][j][r], row[p].ancestors | {len(row)}))
                    ids.append(len(row) - 1)
            new.append(ids)
        return new

    def _select(self, nodes: list[list[Node]], out: list[dict]) -> Proposal:
        trees, tokens, dists = [], [], []
        for b, row in enumerate(nodes):
            order = sorted(range(1, len(row)), key=lambda i: (-row[i].score, len(row[i].path), i))
            chosen: set[int] = {0}
            for i in order:
                if len(chosen) == self.size + 1:  # the root is in `chosen` too
                    break
                if row[i].parent in chosen:
                    chosen.add(i)
            by_path = {row[i].path: i for i in chosen if i}
            tree = build(list(by_path))
            trees.append(tree)
            ids = [by_path[p] for p in tree.paths]
            tokens.append([row[i].token for i in ids])
            dists.append(torch.stack([out[b][row[i].parent][1] for i in ids]))
        return Proposal(trees, torch.tensor(tokens), torch.stack(dists))


def eagle_proposer(net: EagleNet, target_vocab: int, eagle_choices=None,
                   dynamic_top_k: int | None = None) -> EagleProposer:
    """EAGLE-1 with a static tree (`eagle_choices`, default mc_sim_7b_63), or EAGLE-2 with a dynamic
    tree when `dynamic_top_k` is given (the two are mutually exclusive, as in TRT-LLM)."""
    if dynamic_top_k is None:
        return EagleProposer(net, eagle_tree(net, eagle_choices), target_vocab)
    if eagle_choices is not None:
        raise TrtspecError("eagle_choices and a dynamic tree (EAGLE-2 top-k) are mutually exclusive")
    return DynamicEagleProposer(net, dynamic_top_k, target_vocab)


def generate_eagle(target: Decoder, net: EagleNet, prompts: list[list[int]], max_new_tokens: int,
                   eagle_choices=None, eos_ids=None, dynamic_top_k: int | None = None) -> list[GenerationResult]:
    """EAGLE decoding of a batch (see `eagle_proposer` for the tree options)."""
    return generate(target, prompts, max_new_tokens, eos_ids,
                    eagle_proposer(net, target.vocab_size, eagle_choices, dynamic_top_k))
