"""The speculative loop: propose -> verify -> accept, with logits passed between the stages.

    proposal = proposer.propose(rows)          # draft tokens on a tree (a chain is a tree) + draft logits
    logits, hidden = target([root, nodes])     # one forward, tree mask, depth positions
    acceptance = accept(proposal, logits)      # path kept + the target's bonus token
    commit path in the target cache; proposer.update(rows, acceptance, hidden)

Greedy acceptance (the only one so far) keeps the longest path whose every token is the target's
argmax after its parent, then appends the target's argmax after the last kept node; the output is
therefore exactly the target's greedy output. Rejection sampling (draft-target) and typical
acceptance (EAGLE) need the draft and target logits, which is why Proposal and accept carry them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from .batch import Request, active_rows, make_requests
from .model import Decoder, prefill
from .stats import GenerationResult, Step
from .tree import Tree


@dataclass
class Proposal:
    tree: Tree | list[Tree]  # one tree for every row (chains, EAGLE-1), or one per row (EAGLE-2)
    tokens: torch.Tensor  # [b', N] the draft token of each node (block index n is tokens[:, n - 1])
    logits: torch.Tensor | None  # [b', N, V] the draft distribution each node was taken from

    def tree_for(self, i: int) -> Tree:
        return self.tree[i] if isinstance(self.tree, list) else self.tree

    def block_mask(self) -> torch.Tensor:
        """[N+1, N+1], or [b', N+1, N+1] for per-row trees."""
        return torch.stack([t.mask for t in self.tree]) if isinstance(self.tree, list) else self.tree.mask

    def positions(self) -> torch.Tensor:
        return torch.stack([t.positions for t in self.tree]) if isinstance(self.tree, list) else self.tree.positions


@dataclass
class Acceptance:
    path: list[int]  # block indices kept: 0 (root), then the accepted nodes by depth
    tokens: list[int]  # accepted draft tokens, then the bonus token
    offered: int  # draft positions that could have been accepted along this path (see stats.py)


class Proposer(Protocol):
    max_block: int  # most nodes a proposal can have (sizes the target's cache)
    max_positions: int  # K, or tree depth

    def start(self, requests: list[Request], rows: torch.Tensor, target_hidden: torch.Tensor) -> None:
        """After the target prefill: target_hidden [b', Tmax, H] (ln_f output) of each prompt."""

    def propose(self, requests: list[Request], rows: torch.Tensor) -> Proposal: ...

    def update(self, requests: list[Request], rows: torch.Tensor, accepted: list[Acceptance],
               target_hidden: torch.Tensor) -> None:
        """After verification: target_hidden [b', N+1, H] of the verified block."""


def accept_greedy(proposal: Proposal, target_logits: torch.Tensor) -> list[Acceptance]:
    """Walk the tree from the root, following the child whose token is the target's argmax."""
    want = target_logits.argmax(-1).tolist()  # [b'][N+1]: the target's next token after each entry
    drafted = proposal.tokens.tolist()
    out = []
    for b in range(len(want)):
        tree = proposal.tree_for(b)
        path, node = [0], 0
        while True:
            nxt = next((c for c in tree.children[node] if drafted[b][c - 1] == want[b][node]), None)
            if nxt is None:
                break
            path.append(nxt)
            node = nxt
        offered = len(path) - 1 + (1 if tree.children[node] else 0)
        out.append(Acceptance(path, [drafted[b][n - 1] for n in path[1:]] + [want[b][node]], offered))
    return out


def generate_speculative(target: Decoder, proposer: Proposer, prompts: list[list[int]], max_new_tokens: int,
                         eos_ids=None, accept=accept_greedy) -> list[GenerationResult]:
    reqs = make_requests(prompts, max_new_tokens, eos_ids, target.vocab_size, proposer.max_positions)
    capacity = max(len(p) for p in prompts) + max_new_tokens + proposer.max_block + 1
    cache = target.new_cache(len(reqs), capacity)
    rows = torch.arange(len(reqs))
    logits, hidden, _ = prefill(target, cache, rows, [r.prompt for r in reqs])
    for r, t in zip(reqs, logits.argmax(-1).tolist()):
        r.stats.target_calls += 1
        r.emit([t])
    proposer.start(reqs, rows, hidden)
    while len(rows := active_rows(reqs)):
        proposal = proposer.propose(reqs, rows)
        roots = torch.tensor([[reqs[b].output[-1]] for b in rows.tolist()])
        block = torch.cat([roots, proposal.tokens], dim=1)
        logits, hidden = target.forward(block, cache, rows=rows, pos_offsets=proposal.positions(),
                                        block_mask=proposal.block_mask())
        accepted = accept(proposal, logits)
        for b, a in zip(rows.tolist(), accepted):
            cache.commit(b, a.path)
            reqs[b].stats.target_calls += 1
            reqs[b].stats.steps.append(Step(len(a.path) - 1, a.offered))
            reqs[b].emit(a.tokens)
        proposer.update(reqs, rows, accepted, hidden)
    return [r.result() for r in reqs]
