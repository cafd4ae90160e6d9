"""The options of `trtspec perf`: PerfSettings (how to load the server; the recipe's `perf:`
section) and PerfOptions (one invocation: settings + where: URL, workloads, tuning, output), the
argument of runner.run_perf and the source of the CLI flags' defaults and help. Light: pydantic only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

from pydantic import Field, model_validator

from ..options import Sampling, StageOptions


def _sampling_field(name: str, what: str):
    """An optional sampling setting with trtspec.options.Sampling's own bounds (written there once)."""
    f = Sampling.model_fields[name]
    return Optional[Annotated[(f.annotation, *f.metadata)]], Field(None, description=f"{f.description} {what}")


_WHICH = "Every request of every workload (default: each workload's sampling in tuning.json, else greedy)."
_T, _T_FIELD = _sampling_field("temperature", _WHICH)
_K, _K_FIELD = _sampling_field("top_k", "With temperature: as above.")
_P, _P_FIELD = _sampling_field("top_p", "With temperature: as above.")


class PerfSettings(StageOptions):
    """How each run loads the server."""
    section = "perf"
    model: str = Field("generate", description="Model to drive (text_input/max_tokens, streaming).")
    concurrency: list[int] = Field(default_factory=list, description="Closed-loop load points, e.g. 1,2,4,8 "
                                                                     "(default 1 unless request_rate).")
    request_rate: float | None = Field(None, gt=0, description="Open loop: Poisson arrivals per second.")
    requests: int | None = Field(None, ge=1, description="Requests per run (default 8 x concurrency, at least 16; "
                                                         "open loop: 10 s of arrivals).")
    duration_s: float | None = Field(None, gt=0, description="Seconds per run instead of a request count.")
    warmup: int = Field(2, ge=0, description="Unrecorded requests before each run.")
    baseline: bool = Field(False, description="Also measure speculation off (speculation=false) through the same "
                                              "repository.")
    timeout_s: float = Field(60.0, gt=0, description="Seconds per request before it counts as a timeout.")
    connect_timeout_s: float = Field(10.0, gt=0, description="Seconds to wait for the server and model.")
    max_tokens: int = Field(256, ge=1, description="max_tokens of every request.")
    seed: int = Field(0, description="Prompt order, open-loop arrivals and each prompt's sampling seed.")
    temperature: _T = _T_FIELD
    top_k: _K = _K_FIELD
    top_p: _P = _P_FIELD
    chat: bool = Field(True, description="Render prompts with the chat template, as profile does.")
    processes: int = Field(1, ge=1, description="Client processes sharing each run's load (for request rates one "
                                                "Python process cannot drive; see trtspec.perf.procs).")
    blocks: int = Field(1, ge=1, description="With baseline: send each load point's requests in this many blocks, "
                                             "speculation on and off alternating (on,off|off,on|...), and pair "
                                             "each request with its prompt's in the other mode (drift-proof "
                                             "speedup intervals; trtspec.perf.stats). 1: two runs in a row. "
                                             "Which goes first also alternates from load point to load point "
                                             "(trtspec.perf.order). With sweep: the settings alternate the same "
                                             "way, block by block.")
    sweep: bool = Field(False, description="Instead of the tuned routes, measure every draft setting the repository "
                                           "serves (speculation off, each K or served model) per workload and "
                                           "concurrency: the data `trtspec tune --calibrate` fits (trtspec.perf.sweep).")

    @model_validator(mode="after")
    def _check(self):
        if self.requests is not None and self.duration_s is not None:
            raise ValueError("give at most one of requests and duration_s")
        if any(c < 1 for c in self.concurrency):
            raise ValueError(f"concurrency values must be >= 1, got {self.concurrency}")
        if self.temperature is None and (self.top_k is not None or self.top_p is not None):
            raise ValueError("top_k / top_p need a temperature (they filter what the temperature samples)")
        if self.blocks > 1:
            self._check_blocks()
        if self.sweep:
            self._check_sweep()
        if self.duration_s is None:
            self._check_block_load()
        return self

    def _check_block_load(self) -> None:
        """A closed-loop run's requests go out in `blocks` blocks (one without interleaving), each
        started afresh: a block of fewer requests than the concurrency never has that many in flight,
        so the point would be measured at a lighter load than it is labelled, compared with and
        calibrated at (the smallest of the near-equal blocks holds requests // blocks)."""
        for c, _ in load_points(self):
            n = (self.requests or default_requests(c, None)) if c else None
            if n is not None and n // self.blocks < c:
                field = "blocks" if self.blocks > 1 else "requests"
                raise ValueError(f"{field}: at concurrency {c}, {n} requests in {self.blocks} block(s) hold "
                                 f"{n // self.blocks} each, fewer than the {c} to keep in flight "
                                 "(requests >= concurrency x blocks)")

    def _check_sweep(self) -> None:
        """The sweep's own off point is the baseline; its load points are batches (concurrency), each
        setting measured by one client."""
        if self.baseline:
            raise ValueError("sweep: the sweep measures speculation off as one of its settings; turn baseline off")
        if self.request_rate is not None:
            raise ValueError("sweep: measures closed-loop concurrency points (the batch a step time is fitted at); "
                             "give concurrency, not request_rate")
        if self.processes > 1:
            raise ValueError("sweep: each setting is measured by one client process (processes: 1)")
        if self.duration_s is not None:
            raise ValueError("sweep: the settings alternate request by request; give requests, not duration_s")

    def _check_blocks(self) -> None:
        """Interleaving needs a baseline to interleave with, a request count to split, and one client."""
        if not self.baseline and not self.sweep:
            raise ValueError(f"blocks: {self.blocks} interleaves speculation with the baseline; turn baseline on")
        if self.duration_s is not None:
            raise ValueError("blocks: interleaved blocks split a request count; give requests, not duration_s")
        if self.processes > 1:
            raise ValueError("blocks: interleaved blocks are measured by one client process (processes: 1)")
        least = self.requests or min(default_requests(c, r) for c, r in load_points(self))
        if least < self.blocks:
            given = self.requests or f"not given, {least} by default at the lightest load point"
            raise ValueError(f"blocks: {self.blocks} blocks need at least as many requests per run (requests: {given})")


def load_points(s: PerfSettings) -> list[tuple[int | None, float | None]]:
    """(concurrency, request_rate) of each load point, in the order measured (concurrency 1 by default)."""
    return points_of(s.concurrency, s.request_rate)


def points_of(concurrency, request_rate: float | None) -> list[tuple[int | None, float | None]]:
    """load_points of the two settings as given (the genai-perf export takes them apart)."""
    points: list[tuple[int | None, float | None]] = [(c, None) for c in dict.fromkeys(concurrency or ())]
    if request_rate is not None:
        points.append((None, request_rate))
    return points or [(1, None)]


def default_requests(concurrency: int | None, rate: float | None) -> int:
    """A run's request count when perf.requests is not given: 8 x concurrency, at least 16; open loop:
    10 s of arrivals, at least 16."""
    return max(16, 8 * concurrency) if concurrency else max(16, math.ceil(10 * rate))


class PerfOptions(PerfSettings):
    """Options of one perf invocation (the CLI flags, one to one)."""
    url: str = Field("127.0.0.1:8001", description="gRPC address of the server (trtspec serve).")
    workloads: dict[str, str] = Field(min_length=1, description="name -> packaged set or JSONL/CSV path")
    tuning: Path | None = Field(None, description="tuning.json: predicted speedup next to the measured.")
    out: Path
    tokenizer: Path | None = Field(None, description="Tokenizer for the chat template (default: the repository's "
                                                     "preprocessing tokenizer).")
    progress: bool = Field(True, description="Progress bar on stderr.")
