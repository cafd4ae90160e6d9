"""Acceptance metrics of one request, defined once, next to the loops that record them.

Per verification step the loop records one `Step`, counted as TensorRT-LLM counts a served request
(`counted_step`): its sampler adds a step's tokens one at a time (the target's token after the
root, then after each accepted draft) and stops at the first that ends the request (end id, or the
max_new_tokens length); the drafts accepted past it are neither emitted nor counted, and nothing
after it is compared (PyTorch TorchSampler._process_draft_tokens_greedy / _tree; the engine flow's
avgDecodedTokensPerIter = generated tokens / decoding iterations). So:
- `accepted`: draft tokens accepted (the longest verified prefix, or tree path) that the step emits,
  i.e. the step's emitted tokens - 1; only the step that ends a request can count fewer than the
  accept rule kept, so a draft that always agrees scores K + 1 on every step but possibly the last;
- `offered`: how many draft positions the step could have accepted along the path it took
  (chain: min(accepted + 1, K); tree: accepted, + 1 if the last accepted node has children); the
  step that ends the request offers only what it accepted (nothing after the end is compared).

From those:
- AL (acceptance length) = mean over steps of (accepted + 1): tokens emitted per target verify
  step, bonus token included (TRT-LLM's avgDecodedTokensPerIter; 1.0 = no speedup);
- position i (1-based; tree depth for EAGLE) was *reached* in a step when positions < i were
  accepted and i was offered; conditional rate P(accept i | accepted < i) = accepted_i / reached_i,
  marginal rate P(accept i) = accepted_i / steps;
- target_calls = target forward passes, prefill included.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Step:
    accepted: int
    offered: int


def counted_step(step: Step, room: int | None) -> Step:
    """`step` (what the accept rule kept) as TensorRT-LLM counts it (module docstring). `room`: the
    tokens the request could still emit before it ends (its end id included; None when the step
    does not end it). The decoding loop passes what the step emitted when it ended the request; the
    profile's replay passes what is left of the recorded output, so both count the same last step."""
    if room is None or step.accepted + 1 < room:
        return step
    kept = min(step.accepted, room - 1)
    return Step(kept, kept)


@dataclass
class RequestStats:
    max_positions: int = 0  # K for a chain, tree depth for EAGLE, 0 for plain greedy
    target_calls: int = 0
    steps: list[Step] = field(default_factory=list)

    @property
    def verify_steps(self) -> int:
        return len(self.steps)

    @property
    def acceptance_length(self) -> float | None:
        if not self.steps:
            return None
        return sum(s.accepted + 1 for s in self.steps) / len(self.steps)

    @property
    def accepted_draft_tokens(self) -> int:
        return sum(s.accepted for s in self.steps)

    def reached(self) -> list[int]:
        """reached[i-1]: steps in which position i was offered with all earlier positions accepted."""
        return [sum(1 for s in self.steps if s.offered >= i) for i in range(1, self.max_positions + 1)]

    def accepted_at(self) -> list[int]:
        return [sum(1 for s in self.steps if s.accepted >= i) for i in range(1, self.max_positions + 1)]

    def conditional_rates(self) -> list[float | None]:
        """P(accept position i | positions < i accepted), None where position i was never reached."""
        return [a / r if r else None for a, r in zip(self.accepted_at(), self.reached())]

    def marginal_rates(self) -> list[float | None]:
        n = len(self.steps)
        return [a / n if n else None for a in self.accepted_at()]

    def to_dict(self) -> dict:
        return {"acceptance_length": self.acceptance_length, "target_calls": self.target_calls,
                "verify_steps": self.verify_steps, "accepted_draft_tokens": self.accepted_draft_tokens,
                "max_positions": self.max_positions, "reached": self.reached(),
                "accepted_at": self.accepted_at(), "conditional_rates": self.conditional_rates(),
                "marginal_rates": self.marginal_rates()}


@dataclass
class GenerationResult:
    """One request: the generated ids (prompt excluded, eos included when hit) and its metrics."""
    prompt_ids: list[int]
    output_ids: list[int]
    finish_reason: str  # "eos" | "stop" (a stop sequence, words.py) | "length"
    stats: RequestStats
