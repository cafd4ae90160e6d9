"""Calibration prompts: workload samples rendered the way the served model sees them.

`--calib chat=mt-bench,code=humaneval` names workloads (trtspec.workloads syntax); `--calib-samples N`
is split evenly over them (the first sources get the remainder) and each draws its share with the
run's seed, so a re-run picks the same prompts. Multi-turn records contribute every user turn as a
separate sample (more varied text; the samples are never answered). Each prompt goes through the
model's chat template (plain text without one) and keeps its first `--calib-seq-len` tokens.

Cost is bounded by construction: batch of 1 (no padding tokens skew the activation ranges), at
most N x seq_len tokens. The manifest records, per source, the workload record (source, data
sha256, selection options, sample ids) and the token count actually used.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ..errors import TrtspecError
from ..workloads import load_workload, parse_workload_specs, render


@dataclass
class CalibSet:
    """Token-id prompts for the calibration forward loop, and where they came from."""

    prompts: list[list[int]]
    sources: list[dict] = field(default_factory=list)  # workload manifests + token counts
    seq_len: int | None = None  # the truncation applied
    seed: int | None = None  # the sampling seed
    device: str = "cpu"  # where the calibration forward passes run (QuantizeOptions.device)

    @property
    def num_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    def manifest(self) -> dict:
        return {"samples": len(self.prompts), "tokens": self.num_tokens, "seq_len": self.seq_len,
                "seed": self.seed, "batch_size": 1, "device": self.device, "sources": self.sources}


def split_evenly(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def check_calib_options(samples: int, seq_len: int) -> None:
    if isinstance(samples, bool) or samples < 1:
        raise TrtspecError(f"quantization.samples: expected a positive integer, got {samples}")
    if isinstance(seq_len, bool) or seq_len < 2:
        raise TrtspecError(f"quantization.seq_len: expected an integer >= 2, got {seq_len}")


def load_calib_set(calib: str | list[str], tokenizer, samples: int = 512, seq_len: int = 512,
                   seed: int = 0) -> CalibSet:
    """Render `samples` prompts from the workloads in `calib` with `tokenizer` (see module doc)."""
    check_calib_options(samples, seq_len)
    specs = parse_workload_specs(calib)
    shares = split_evenly(samples, len(specs))
    prompts: list[list[int]] = []
    records: list[dict] = []
    for spec, share in zip(specs, shares):
        if share == 0:
            records.append({"name": spec.name, "source": spec.source, "num_samples": 0, "ids": [], "tokens": 0})
            continue
        wl = load_workload(spec, seed=seed, samples=share, turns="all-as-separate")
        if len(wl.samples) < share:
            print(f"note: calibration source {spec.name} has {len(wl.samples)} prompts; using all of them "
                  f"(its share of quantization.samples was {share})", file=sys.stderr)
        ids = [render(s, tokenizer, chat=True, max_prompt_tokens=seq_len, keep="start") for s in wl.samples]
        kept = [(s.id, p) for s, p in zip(wl.samples, ids) if len(p) >= 2]  # EAGLE pairs need two tokens
        prompts += [p for _, p in kept]
        record = wl.manifest()
        record.update(ids=[i for i, _ in kept], num_samples=len(kept), tokens=sum(len(p) for _, p in kept))
        records.append(record)
    if not prompts:
        raise TrtspecError(f"quantization.calib: {calib}: no calibration prompt with at least 2 tokens")
    return CalibSet(prompts, records, seq_len, seed)


def token_id_set(prompts: list[list[int]], samples: int | None = None, seq_len: int | None = None) -> CalibSet:
    """A calibration set given directly as token ids (tests, API callers): the first `samples`
    prompts, each cut to `seq_len` tokens. Sample ids are the prompts' indices."""
    prompts = [list(map(int, p[:seq_len])) for p in prompts[:samples]]
    if not prompts or any(len(p) < 2 for p in prompts):
        raise TrtspecError("calibration prompts: expected a non-empty list of token-id lists, each of length >= 2")
    return CalibSet(prompts, [{"name": "token-ids", "source": "api", "num_samples": len(prompts),
                               "ids": [f"#{i}" for i in range(len(prompts))], "tokens": sum(map(len, prompts))}],
                    seq_len)
