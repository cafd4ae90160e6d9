"""Per-request bookkeeping shared by every decoding loop: emitted ids, stop conditions, metrics.

A loop hands each request the tokens one target step produced (1 for greedy, accepted + 1 for
speculative steps); `emit` cuts them at max_new_tokens or at the first eos, which is the only
place output is truncated. It also ends a request on the token that completes a stop sequence
(words.py). The loop records a step's metrics after that cut: what it emitted (stats.py,
counted_step). An eos cannot come before min_tokens: the loop masks the eos logits there first
(`eos_masked`, decode.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import TrtspecError
from .stats import GenerationResult, RequestStats
from .words import NO_WORDS, Words, ends_with_stop


@dataclass
class Request:
    prompt: list[int]
    max_new_tokens: int
    eos_ids: frozenset[int] = frozenset()
    seed: int = 0  # keys the request's random draws when it is sampled (runtime/sampling.py)
    min_tokens: int = 0  # no eos before this many output tokens (TensorRT-LLM's min_tokens)
    words: Words = NO_WORDS  # stop and bad token sequences (words.py)
    output: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stats: RequestStats = field(default_factory=RequestStats)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def tokens(self) -> list[int]:
        """Prompt + everything emitted so far (the committed sequence)."""
        return self.prompt + self.output

    def eos_masked(self, depth: int) -> bool:
        """Whether the eos ids are masked for the token `depth` positions past what was emitted:
        its output index is below min_tokens (TensorRT-LLM's rule, upstream/sampling.py min_tokens)."""
        return len(self.output) + depth < self.min_tokens

    def emit(self, new: list[int]) -> None:
        for t in new:
            if len(self.output) >= self.max_new_tokens:
                break
            self.output.append(int(t))
            if int(t) in self.eos_ids:
                self.finish_reason = "eos"
                return
            if self.words.stop and ends_with_stop(self.tokens, self.words.stop):
                self.finish_reason = "stop"
                return
        if len(self.output) >= self.max_new_tokens:
            self.finish_reason = "length"

    def result(self) -> GenerationResult:
        return GenerationResult(list(self.prompt), list(self.output), self.finish_reason or "length", self.stats)


def make_requests(prompts: list[list[int]], max_new_tokens: int, eos_ids, vocab_size: int,
                  max_positions: int = 0, seed: int = 0, min_tokens: int = 0,
                  words: Words = NO_WORDS) -> list[Request]:
    """Check the prompts (clear errors, not an index error inside torch) and wrap them. Request i
    gets the seed `seed + i`: a batch's rows draw independently, and a batch of one is seeded `seed`."""
    if max_new_tokens < 1:
        raise TrtspecError(f"max_new_tokens: expected >= 1, got {max_new_tokens}")
    if min_tokens < 0:
        raise TrtspecError(f"min_tokens: expected >= 0, got {min_tokens}")
    if not prompts:
        raise TrtspecError("no prompts given")
    for i, p in enumerate(prompts):
        if not p:
            raise TrtspecError(f"prompt {i} is empty")
        bad = [t for t in p if not 0 <= int(t) < vocab_size]
        if bad:
            raise TrtspecError(f"prompt {i}: token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    for name, seqs in (("stop_words", words.stop), ("bad_words", words.bad)):  # else silently never matched
        for i, w in enumerate(seqs):
            if max(w) >= vocab_size:
                raise TrtspecError(f"{name}[{i}]: token id {max(w)} is outside the vocabulary [0, {vocab_size})")
    eos = frozenset(int(e) for e in (eos_ids or ()))
    return [Request([int(t) for t in p], max_new_tokens, eos, seed + i, int(min_tokens), words,
                    stats=RequestStats(max_positions=max_positions))
            for i, p in enumerate(prompts)]


def over_positions(prompts: list[list[int]], new_tokens: int, positions: int) -> list[int]:
    """The indices of the prompts that, followed by `new_tokens` decoded tokens, do not fit in the
    model's `positions` (max_position_embeddings; 0: no bound). The one rule every runtime caller
    applies (generate refuses such a prompt, profile skips it): a prompt beyond the trained
    positions would be decoded as noise, and its KV cache is sized for prompt + new tokens."""
    return [i for i, p in enumerate(prompts) if positions and len(p) + new_tokens > positions]


def check_positions(prompts: list[list[int]], new_tokens: int, positions: int) -> None:
    """Refuse (one error naming the prompt and the model's positions) a prompt `over_positions` finds."""
    for i in over_positions(prompts, new_tokens, positions):
        which = "prompt" if len(prompts) == 1 else f"prompt {i}"
        n = len(prompts[i])
        room = f" (at most {positions - n} new tokens fit after it)" if n < positions else ""
        raise TrtspecError(f"{which}: {n} tokens + max_new_tokens {new_tokens} exceed the model's "
                           f"max_position_embeddings={positions}{room}")


def active_rows(requests: list[Request]) -> torch.Tensor:
    return torch.tensor([b for b, r in enumerate(requests) if not r.done], dtype=torch.long)
