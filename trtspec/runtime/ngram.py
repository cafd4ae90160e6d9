"""N-gram (prompt lookup) drafting with the semantics of TensorRT-LLM's PyTorch backend.

No draft model: the drafts are copied from what the request (or, with a public pool, any request)
has already seen. As `NGramPoolManager` does it (trtspec/upstream/trtllm.py, NGRAM_*; the pool itself is
runtime/ngram_pool.py, plain Python, which the trtllm-flavor Triton repository ships as it is):

- the pool maps a pattern (the last 1..max_matching_ngram_size committed tokens) to matches: the up
  to K tokens that followed that pattern somewhere in a committed sequence;
- each step the pool is updated from the part of the committed sequence not scanned yet (plus an
  overlap of K + max_matching_ngram_size - 1 tokens, so patterns spanning the boundary are seen),
  every pattern size from the largest down; a new pattern gets its match; a known one appends a
  new distinct match after dropping the kept ones shorter than it (as upstream's loop drops them,
  skipping the match after each one removed: ngram_pool.drop_shorter), except that without
  `keep_all` a match longer than the oldest kept replaces them all (upstream's exact rule: a
  shorter match is still appended, so even then a pattern can hold several);
- the draft is the match of the longest pattern that ends the committed sequence: the oldest match
  (`use_oldest`) or the newest; nothing matches -> no draft (a plain decoding step);
- drafts never run past prompt + max_new_tokens - 1 tokens; the first token comes from the
  prefill, drafting starts with the first verify step (upstream drafts generation requests only);
- no match: upstream's executor pads every draft to max_draft_len with token id 0, which the
  target verifies; here the padding is dead nodes (same width, never accepted), so AL differs
  from upstream's only where the target's own next token after a draft is id 0 (upstream.trtllm);
- a public pool is shared by every request the proposer serves (TensorRT-LLM's default), a private
  one belongs to its request.

Drafts vary in length per row and step, so a batch's proposal is one chain per row padded to the
longest with dead nodes: nodes no path reaches (children of nobody), which the target computes and
no accept rule can keep.
"""

from __future__ import annotations

import torch

from ..errors import TrtspecError
from ..upstream import trtllm as upstream
from .batch import Request
from .ngram_pool import NGramPool
from .speculative import Acceptance, Proposal, empty_proposal
from .tree import Tree



def padded_chain(n: int, size: int) -> Tree:
    """A chain of n draft tokens followed by size - n dead nodes (parent the root, in no children
    list: computed, never accepted). A dead node's depth is its block index, so the block's
    positions are its slot offsets, those of a chain: a sliding window (model.block_geometry)
    then sees a chain, not a tree as deep as the padding, and a batch whose drafts differ in
    length is not refused where a chain as long is decoded exactly."""
    paths = tuple((0,) * d for d in range(1, n + 1)) + tuple((-1 - i,) for i in range(size - n))
    parent = (-1,) + tuple(range(n)) + (0,) * (size - n)
    depth = tuple(range(size + 1))
    children = tuple((i + 1,) for i in range(n)) + ((),) * (size - n + 1)
    return Tree(paths, parent, depth, (-1,) + (0,) * size, children)


class NGramProposer:
    """Drafts up to K tokens per row from n-gram matches (module docstring)."""

    def __init__(self, k: int, max_matching_ngram_size: int | None = None,
                 keep_all: bool = upstream.NGRAM_DEFAULT_KEEP_ALL, use_oldest: bool = upstream.NGRAM_DEFAULT_USE_OLDEST,
                 public_pool: bool = upstream.NGRAM_DEFAULT_PUBLIC_POOL):
        if max_matching_ngram_size is None:
            max_matching_ngram_size = upstream.NGRAM_DEFAULT_MAX_MATCHING_NGRAM_SIZE
        if k < 1:
            raise TrtspecError(f"ngram.max_draft_len: expected >= 1, got {k}")
        if max_matching_ngram_size < 1:
            raise TrtspecError(f"ngram.max_matching_ngram_size: expected >= 1, got {max_matching_ngram_size}")
        self.k, self.n = k, max_matching_ngram_size
        self.keep_all, self.use_oldest, self.public = keep_all, use_oldest, public_pool
        self.max_block = self.max_positions = k
        self.shared = self._pool()
        self.pools: dict[int, NGramPool] = {}

    def _pool(self) -> NGramPool:
        return NGramPool(self.k, self.n, self.keep_all, self.use_oldest)

    def start(self, requests: list[Request], rows: torch.Tensor, target_hidden: torch.Tensor) -> None:
        self.pools = {}
        self.shared.scanned.clear()  # new requests; a public pool keeps its patterns

    def draft(self, b: int, r: Request) -> list[int]:
        """Row b's draft tokens for its committed sequence (may be empty)."""
        pool = self.shared if self.public else self.pools.get(b)
        if pool is None:  # this row's first draft: its own pool
            pool = self.pools[b] = self._pool()
        return pool.draft(b, r.tokens, len(r.prompt) + r.max_new_tokens)

    def propose(self, requests: list[Request], rows: torch.Tensor) -> Proposal:
        drafts = [self.draft(b, requests[b]) for b in rows.tolist()]
        width = max(len(d) for d in drafts)
        if width == 0:
            return empty_proposal(len(drafts))
        tokens = torch.tensor([d + [0] * (width - len(d)) for d in drafts], dtype=torch.long)
        return Proposal([padded_chain(len(d), width) for d in drafts], tokens, None)

    def update(self, requests: list[Request], rows: torch.Tensor, accepted: list[Acceptance],
               target_hidden: torch.Tensor) -> None:
        pass  # the pool is refreshed from the committed sequence at the next proposal
