"""Plain greedy decoding: the reference every speculative loop must reproduce token for token."""

from __future__ import annotations

import torch

from .batch import active_rows, make_requests
from .model import Decoder, prefill
from .stats import GenerationResult


def generate_greedy(model: Decoder, prompts: list[list[int]], max_new_tokens: int,
                    eos_ids=None) -> list[GenerationResult]:
    """Greedy decoding of a ragged batch: one prefill, then one T=1 forward per step over the
    requests still running (finished rows drop out of the batch, their cache rows stay put)."""
    reqs = make_requests(prompts, max_new_tokens, eos_ids, model.vocab_size)
    cache = model.new_cache(len(reqs), max(len(p) for p in prompts) + max_new_tokens)
    rows = torch.arange(len(reqs))
    logits, _, _ = prefill(model, cache, rows, [r.prompt for r in reqs])
    while True:
        for b, t in zip(rows.tolist(), logits.argmax(-1).tolist()):
            reqs[b].stats.target_calls += 1
            reqs[b].emit([t])
        rows = active_rows(reqs)
        if not len(rows):
            return [r.result() for r in reqs]
        last = torch.tensor([[reqs[b].output[-1]] for b in rows.tolist()])
        step_logits, _ = model.forward(last, cache, rows=rows)
        cache.advance(rows, 1)
        logits = step_logits[:, -1]
