"""Draft-target speculative decoding: a smaller model of the same tokenizer proposes K tokens.

The draft keeps its own KV cache over the committed sequence. Each step it first catches up on the
committed tokens it has not seen (the previous step's accepted tokens and bonus token: 1 token, or
2 when all K drafts were accepted, because the draft never ran its own last draft d_K; the whole
prompt on the first step), then proposes d_1..d_K greedily, one T=1 forward each.

After verification its cache is rolled back to the part that still matches the committed sequence:
prompt/previous tokens + the accepted drafts it ran (d_1..d_min(a, K-1)). Rejected drafts are
forgotten and overwritten later. Reference: trtllm.md §5 (TRT-LLM `draft_tokens_external`).

With `sampling` (temperature > 0) the draft samples each d_i from its own filtered distribution
(the request's temperature / top-k / top-p, keyed draw DRAFT at d_i's output position) and says so in
the Proposal, which rejection sampling needs; without it the draft proposes greedily, as
TensorRT-LLM's PyTorch backend drafts for its two-model path.

With `batch_invariant` the draft computes as the batch-invariant target does (decode.py): each
prompt in one block of a batch of one, every later token one at a time (model.forward_stepwise),
so a draft that is the target itself proposes exactly the target's tokens (AL = K + 1).
"""

from __future__ import annotations

import torch

from ..errors import TrtspecError
from ..options import Sampling
from .batch import Request
from .decode import generate
from .model import Decoder, forward_stepwise, prefill
from .sampling import DRAFT, draw, probs, uniform
from .speculative import Acceptance, Proposal
from .stats import GenerationResult
from .tree import chain


def as_draft_ids(ids, vocab_size: int):
    """Committed tokens (a list or a tensor) as a draft model of `vocab_size` reads them: an id
    beyond its vocabulary (the target's padding rows, which a prompt or sampling can hold; same
    tokenizer, vocabularies padded differently) becomes 0. The draft then guesses worse for a step;
    the target verifies every draft token, so the output stays the target's."""
    if isinstance(ids, torch.Tensor):
        return torch.where(ids < vocab_size, ids, torch.zeros_like(ids))
    return [t if t < vocab_size else 0 for t in ids]


class DraftModelProposer:
    def __init__(self, draft: Decoder, k: int, target_vocab: int, batch_invariant: bool = False,
                 sampling: Sampling | None = None):
        if k < 1:
            raise TrtspecError(f"draft_len: expected >= 1, got {k}")
        self.draft, self.k, self.tree = draft, k, chain(k)
        self.max_block = self.max_positions = k
        # Vocabularies may be padded differently (same tokenizer): never propose an id the target lacks.
        self.vocab = min(draft.vocab_size, target_vocab)
        self.cache = None
        self.batch_invariant = batch_invariant
        self.sampling = None if sampling is None or sampling.greedy else sampling

    def _choose(self, logits: torch.Tensor, requests: list[Request], rows: torch.Tensor, i: int) -> torch.Tensor:
        """Draft token i (0-based) of every row: the argmax, or a keyed sample of the draft's
        distribution at output position len(output) + i."""
        if self.sampling is None:
            return logits.argmax(-1)
        p = probs(logits.cpu(), self.sampling)  # keyed draws on the host (accept.py)
        return torch.tensor([draw(p[j], uniform(requests[b].seed, len(requests[b].output) + i, DRAFT))
                             for j, b in enumerate(rows.tolist())])

    def start(self, requests: list[Request], rows: torch.Tensor, target_hidden: torch.Tensor) -> None:
        longest = max(len(r.prompt) for r in requests)
        self.cache = self.draft.new_cache(len(requests), longest + requests[0].max_new_tokens + self.k + 2)
        if self.batch_invariant:  # the prompts in one block each, as the target ran them; the rest one by one
            prompts = [as_draft_ids(requests[b].prompt, self.draft.vocab_size) for b in rows.tolist()]
            prefill(self.draft, self.cache, rows, prompts, True)

    def propose(self, requests: list[Request], rows: torch.Tensor) -> Proposal:
        lens = self.cache.lens
        pending = [as_draft_ids(requests[b].tokens[int(lens[b]):], self.draft.vocab_size) for b in rows.tolist()]
        logits, _, _ = prefill(self.draft, self.cache, rows, pending, self.batch_invariant)  # catch up, commit
        forward = forward_stepwise if self.batch_invariant else Decoder.forward
        tokens, dists = [], []
        for i in range(self.k):
            logits = logits[:, :self.vocab]
            dists.append(logits)
            tokens.append(self._choose(logits, requests, rows, i))
            if i + 1 < self.k:  # d_K itself is never run through the draft
                step, _ = forward(self.draft, tokens[-1][:, None], self.cache, rows=rows)
                self.cache.advance(rows, 1)
                logits = step[:, -1]
        return Proposal(self.tree, torch.stack(tokens, 1), torch.stack(dists, 1), sampled=self.sampling is not None)

    def update(self, requests: list[Request], rows: torch.Tensor, accepted: list[Acceptance],
               target_hidden: torch.Tensor) -> None:
        for b, a in zip(rows.tolist(), accepted):
            if requests[b].done:  # its output may have been cut; it is never proposed for again
                continue
            before = len(requests[b].tokens) - len(a.tokens)  # committed before this step, root included
            valid = before + len(a.path) - 1  # + the accepted drafts (it ran at most d_1..d_{K-1})
            self.cache.rollback(b, min(int(self.cache.lens[b]), valid))


def generate_draft_target(target: Decoder, draft: Decoder, prompts: list[list[int]], max_new_tokens: int,
                          draft_len: int, eos_ids=None) -> list[GenerationResult]:
    return generate(target, prompts, max_new_tokens, eos_ids, DraftModelProposer(draft, draft_len, target.vocab_size))
