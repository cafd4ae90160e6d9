"""What the decoding loop (decode.py) passes between its stages: proposals, acceptances, accept rules.

    proposal = proposer.propose(rows)          # draft tokens on a tree (a chain is a tree) + draft logits
    logits, hidden = target([root, nodes])     # one forward, tree mask, depth positions
    acceptance = accept(proposal, logits)      # path kept + the target's bonus token
    commit path in the target cache; proposer.update(rows, acceptance, hidden)

Plain decoding has no proposer: its proposal is the empty tree (`NoProposer`), so the block is the
root alone and the accept rule only picks the target's next token. That is also how the first token
after the prefill is chosen, so every emitted token goes through the accept rule.

The accept rules (greedy, exact match, rejection sampling, typical acceptance) live in accept.py;
rejection sampling needs the distribution each draft token was taken from, which is why a Proposal
carries the draft logits and says whether its tokens were sampled from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from .batch import Request
from .stats import Step
from .tree import Tree, build


@dataclass
class Proposal:
    tree: Tree | list[Tree]  # one tree for every row (chains, EAGLE-1), or one per row (EAGLE-2)
    tokens: torch.Tensor  # [b', N] the draft token of each node (block index n is tokens[:, n - 1])
    logits: torch.Tensor | None  # [b', N, V] the draft distribution each node was taken from
    sampled: bool = False  # tokens were sampled from `logits` at the request's settings (else chosen
    #                        deterministically: argmax / top-k ranks)

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

    @property
    def step(self) -> Step:
        """This verification as the metrics count it (accepted draft tokens, offered positions)."""
        return Step(len(self.path) - 1, self.offered)


class Proposer(Protocol):
    max_block: int  # most nodes a proposal can have (sizes the target's cache)
    max_positions: int  # K, or tree depth

    def start(self, requests: list[Request], rows: torch.Tensor, target_hidden: torch.Tensor) -> None:
        """After the target prefill: target_hidden [b', Tmax, H] (ln_f output) of each prompt."""

    def propose(self, requests: list[Request], rows: torch.Tensor) -> Proposal: ...

    def update(self, requests: list[Request], rows: torch.Tensor, accepted: list[Acceptance],
               target_hidden: torch.Tensor) -> None:
        """After verification: target_hidden [b', N+1, H] of the verified block."""


EMPTY_TREE = build([])  # the root alone: nothing drafted


def empty_proposal(rows: int) -> Proposal:
    """No draft tokens for `rows` rows: the verify block is each row's root only."""
    return Proposal(EMPTY_TREE, torch.zeros(rows, 0, dtype=torch.long), None)


class NoProposer:
    """Plain decoding as a proposer: nothing is drafted, so each step is one T=1 target forward
    (the empty tree's mask and positions are those of an ordinary causal step)."""
    max_block = max_positions = 0

    def start(self, requests: list[Request], rows: torch.Tensor, target_hidden: torch.Tensor) -> None:
        pass

    def propose(self, requests: list[Request], rows: torch.Tensor) -> Proposal:
        return empty_proposal(len(rows))

    def update(self, requests: list[Request], rows: torch.Tensor, accepted: list[Acceptance],
               target_hidden: torch.Tensor) -> None:
        pass


class AcceptRule(Protocol):
    def __call__(self, proposal: Proposal, target_logits: torch.Tensor, keys: list | None = None) -> list[Acceptance]:
        """target_logits [b', N+1, V]: the target's distribution after the root and after each node;
        keys: each row's accept.Key (seed, output position of the root's next token) for the draws."""
