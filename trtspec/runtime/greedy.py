"""Plain greedy decoding: the reference every speculative loop must reproduce token for token."""

from __future__ import annotations

from .decode import generate
from .model import Decoder
from .stats import GenerationResult


def generate_greedy(model: Decoder, prompts: list[list[int]], max_new_tokens: int,
                    eos_ids=None) -> list[GenerationResult]:
    """Greedy decoding of a ragged batch: the decoding loop without a proposer (one prefill, then
    one T=1 forward per step over the requests still running)."""
    return generate(model, prompts, max_new_tokens, eos_ids)
