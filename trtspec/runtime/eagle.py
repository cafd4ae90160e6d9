"""EAGLE-1 speculative decoding with a static tree (`eagle_choices`), as TRT-LLM's engine runs it.

Per step, with committed sequence x_0..x_{n-1} (root r = x_{n-1}, not yet in the target cache):

1. drafter catch-up (clone 0): the pairs (token, base feature) the drafter has not seen yet, i.e.
   the previous step's accepted tokens + bonus with the target's hidden states at the kept path
   (the whole prompt on the first step). Its output at the last pair predicts the features/logits
   after r: the top-k of those logits are the depth-1 nodes (rank = the choice's last index).
2. levels d = 1..depth-1 (clone d): the non-leaf depth-d nodes run as pairs (node token, parent's
   drafter output) at position (last pair) + d, attending to the committed pairs and their own
   tree ancestors; the top-k of their logits give the depth-(d+1) nodes. These drafter writes stay
   uncommitted and are dropped after the step.
3. the target verifies [r, nodes...] in one forward (tree mask, positions root + depth); greedy
   acceptance walks the tree; the target cache keeps the accepted path (compaction).
4. the accepted tokens + bonus, paired with the target's hidden states at the path, become the
   drafter's next catch-up pairs.

EAGLE-2 (eagle2.py) reuses the catch-up and update of `EagleProposer` with a dynamic tree;
`eagle2.eagle_proposer` picks between the two.
"""

from __future__ import annotations

import torch

from ..upstream import trtllm as upstream
from ..errors import TrtspecError
from .batch import Request
from .device import to_device
from .eagle_net import EagleNet
from .speculative import Acceptance, Proposal
from .tree import Tree, top_ids, validate_choices


def eagle_tree(net: EagleNet, choices=None) -> Tree:
    """The checkpoint's tree: `choices`, or TRT-LLM's default mc_sim_7b_63, checked against its limits."""
    try:
        return validate_choices(upstream.MC_SIM_7B_63 if choices is None else choices,
                                net.num_levels, net.max_draft_len, net.max_non_leaves)
    except TrtspecError as e:
        if choices is None:
            raise TrtspecError(f"{e} (the default mc_sim_7b_63 tree does not fit this checkpoint; "
                               "pass eagle_choices)") from None
        raise


def _pad_pairs(pairs: list[tuple[list[int], torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    n = [len(t) for t, _ in pairs]
    T, H = max(n), pairs[0][1].shape[-1]
    tokens = torch.zeros(len(pairs), T, dtype=torch.long)
    feats = torch.zeros(len(pairs), T, H, dtype=pairs[0][1].dtype, device=pairs[0][1].device)
    for i, (t, f) in enumerate(pairs):
        tokens[i, :len(t)] = torch.tensor(t)
        feats[i, :len(t)] = f
    return tokens, feats, n


class EagleProposer:
    def __init__(self, net: EagleNet, tree: Tree, target_vocab: int):
        widest = 1 + max(tree.rank[1:])
        if widest > min(target_vocab, net.draft_vocab):
            raise TrtspecError(f"eagle_choices: rank {widest - 1} needs more candidates than the vocabulary has")
        self.net, self.tree = net, tree
        self.max_block, self.max_positions = tree.size, tree.max_depth
        self.drafter_slots = tree.size  # its non-leaf nodes are written in the drafter's cache (below)
        self.mask = tree.mask
        self.cache = None
        self.pending: dict[int, tuple[list[int], torch.Tensor]] = {}

    def start(self, requests: list[Request], rows: torch.Tensor, target_hidden: torch.Tensor) -> None:
        """The drafter's cache holds the committed pairs and the `drafter_slots` a proposal writes
        after them (its levels), which is not the target's block (EAGLE-2 writes more)."""
        longest = max(len(r.prompt) for r in requests)
        self.cache = self.net.new_cache(len(requests), longest + requests[0].max_new_tokens + self.drafter_slots + 2)
        for i, b in enumerate(rows.tolist()):
            r = requests[b]
            self.pending[b] = (r.prompt[1:] + r.output[:1], target_hidden[i, :len(r.prompt)])

    def _children(self, node: int, logits: torch.Tensor, tokens: torch.Tensor, dists: torch.Tensor) -> None:
        kids = self.tree.children[node]
        if kids:
            top = top_ids(logits, 1 + max(self.tree.rank[c] for c in kids))  # [b', k]
            for c in kids:
                tokens[:, c - 1] = top[:, self.tree.rank[c]]
                dists[:, c - 1] = logits

    def catch_up(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Run and commit the pending pairs (clone 0): the drafter's output at the last one,
        (hidden [b', H], logits [b', V]), is what the root's children are drafted from."""
        tok, feat, n = _pad_pairs([self.pending[b] for b in rows.tolist()])
        logits, hidden = self.net.forward(tok, feat, self.cache, level=0, rows=rows)
        self.cache.advance(rows, torch.tensor(n))
        last, i = to_device(torch.tensor(n) - 1, hidden.device), to_device(torch.arange(len(rows)), hidden.device)
        return hidden[i, last], logits[i, last]

    def propose(self, requests: list[Request], rows: torch.Tensor) -> Proposal:
        tree, B = self.tree, len(rows)
        out = {0: self.catch_up(rows)}  # drafter output (hidden, logits) per processed node
        dev = out[0][1].device  # drafted on the drafter's device: no per-node copy back to the host
        tokens = torch.zeros(B, tree.size, dtype=torch.long, device=dev)
        dists = torch.zeros(B, tree.size, out[0][1].shape[-1], device=dev)
        self._children(0, out[0][1], tokens, dists)
        done: list[int] = []  # uncommitted drafter slots, in write order
        for d in range(1, tree.max_depth):
            level = [m for m in tree.level(d) if tree.children[m]]
            region = done + level
            lg, hd = self.net.forward(tokens[:, to_device(torch.tensor([m - 1 for m in level]), dev)],
                                      torch.stack([out[tree.parent[m]][0] for m in level], 1), self.cache,
                                      level=d, rows=rows, pos_offsets=torch.full((len(level),), d - 1),
                                      block_mask=self.mask[level][:, region])
            for i, m in enumerate(level):
                out[m] = (hd[:, i], lg[:, i])
                self._children(m, lg[:, i], tokens, dists)
            done = region
        return Proposal(tree, tokens, dists)

    def update(self, requests: list[Request], rows: torch.Tensor, accepted: list[Acceptance],
               target_hidden: torch.Tensor) -> None:
        for i, (b, a) in enumerate(zip(rows.tolist(), accepted)):
            if not requests[b].done:
                self.pending[b] = (a.tokens, target_hidden[i, to_device(torch.tensor(a.path), target_hidden.device)])
