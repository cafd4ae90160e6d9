"""The options of `trtspec profile`, `trtspec tune` and `trtspec measure-cost`: one model each.

Each is the recipe section (`profile:`, `tune:`), the argument of the library entry
(tuning.profile.profile_workloads, tuning.tune.tune_stage, tuning.measure.measure_runtime) and the
source of the CLI flags' defaults and help (see trtspec/options.py). Light: pydantic only.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Optional

from pydantic import Field, field_validator

from ..options import Sampling, StageOptions
from ..runtime.options import RuntimeDevice
from ..upstream.sampling import ACCEPT_RULES, EXACT_MATCH
from .gpus import PRESETS


def distinct_positive(v: list[int], example: str) -> list[int]:
    if not v or any(b < 1 for b in v) or len(set(v)) != len(v):
        raise ValueError(f"expected distinct positive integers, e.g. {example}")
    return sorted(v)


class ProfileOptions(RuntimeDevice):
    """How acceptance is measured (trtspec.tuning.profile), and where (device, dtype, batch_size)."""
    section = "profile"
    samples: Optional[int] = Field(None, ge=1, description="Prompts per workload (seeded sample); null: all.")
    max_new_tokens: Optional[int] = Field(None, ge=1, description="Override each workload's default output length.")
    max_k: int = Field(8, ge=1, description="Longest chain (or EAGLE depth) to measure.")
    tree_top_k: int = Field(10, ge=1, description="EAGLE: candidate ranks recorded per depth.")
    seed: int = Field(0, description="Seed of the prompt sampling (which prompts; not the token draws).")
    categories: Optional[list[str]] = Field(None, description="Keep only prompts of these categories (e.g. "
                                            "mt-bench's coding, math) in each workload that has categories; a "
                                            "workload without any is used whole. null: all.")
    # The request settings AL is predicted at: Sampling's own fields (a workload's or a logged request's
    # own temperature / top_k / top_p override them). `seed` above picks prompts, so Sampling.seed is
    # `sampling_seed` here: sample j of a workload draws its tokens with sampling_seed + j.
    temperature: float = copy.copy(Sampling.model_fields["temperature"])
    top_k: int = copy.copy(Sampling.model_fields["top_k"])
    top_p: float = copy.copy(Sampling.model_fields["top_p"])
    sampling_seed: int = Field(0, ge=0, lt=2 ** 63, description="Seed of the token draws at T > 0 (sample j of a "
                               "workload draws with sampling_seed + j; the prompt choice is `seed`).")
    accept_rule: str = Field(EXACT_MATCH.name, description="Accept rule the deployment runs at T > 0: " +
                             ", ".join(r.name for r in ACCEPT_RULES) + " (exact: greedy, exact_match; unbiased: "
                             "rejection_sampling; approximate: exact_match_resample; typical_acceptance "
                             "refused; see trtspec/tuning/sampled.py).")
    samples_per_prompt: int = Field(1, ge=1, description="Sampled outputs (seeds) per prompt at T > 0 (greedy "
                                    "workloads are decoded once).")
    ngram_sizes: Optional[list[int]] = Field(None, description="Profile n-gram drafting (no draft model) at these "
                                             "max_matching_ngram_size values, every K <= max_k each, instead of "
                                             "the checkpoint's drafter. null: the checkpoint's drafter.")
    batch_size: Optional[int] = Field(None, ge=1, description="Prompts per forward in the teacher-forced pass "
                                      "(ragged, right-padded). null: 1 on cpu (the reference arithmetic), 16 on a "
                                      "GPU.")

    @field_validator("accept_rule")
    @classmethod
    def _rule(cls, v: str) -> str:
        names = [r.name for r in ACCEPT_RULES]
        if v not in names:
            raise ValueError(f"{v!r} is not one of {', '.join(names)}")
        return v

    @field_validator("ngram_sizes")
    @classmethod
    def _ngram_sizes(cls, v: Optional[list[int]]) -> Optional[list[int]]:
        return None if v is None else distinct_positive(v, "[1, 2, 3]")

    def sampling(self) -> Sampling:
        """The Sampling settings of these options (sampling_seed is Sampling.seed)."""
        return Sampling(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, seed=self.sampling_seed)

    @field_validator("categories")
    @classmethod
    def _categories(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        if v is None:
            return None
        names = sorted({c.strip() for c in v if isinstance(c, str) and c.strip()})
        if not names:
            raise ValueError("expected category names, e.g. [coding, math]")
        return names


class WorkloadEntry(Sampling):
    """A recipe workload written with its own sampling settings, `{source: mt-bench, temperature: 0.7,
    top_p: 0.9}`: Sampling's temperature / top_k / top_p (the ones given override the stage's; a
    logged request's own fields override these). No seed: draws are seeded by the stage
    (profile.sampling_seed)."""
    section = "workloads"
    source: str = Field(description="mt-bench, humaneval, or a .jsonl/.csv path.")

    @field_validator("seed")
    @classmethod
    def _no_seed(cls, v: int) -> int:  # runs only when given (defaults are not validated)
        raise ValueError("a workload has no seed of its own (profile.sampling_seed seeds the draws)")

    def overrides(self) -> dict:
        """The sampling settings this entry sets (not those left at Sampling's defaults)."""
        return self.model_dump(include=self.model_fields_set - {"source"})


class TuneOptions(StageOptions):
    """What the tuner optimises for (trtspec.tuning.select)."""
    section = "tune"
    cost: str = Field("h100", description=" | ".join(PRESETS) + " (analytic model) or a measured cost table JSON.")
    concurrency_bands: list[int] = Field(default_factory=lambda: [1, 4, 16, 64],
                                         description="Concurrency (batch) bands.")
    eagle_node_budget: Optional[int] = Field(None, ge=1, description="EAGLE: max tree nodes (default: the "
                                                                     "checkpoint's max_draft_len).")
    max_profiles: Optional[int] = Field(None, ge=1, description="EAGLE: served trees per band (default: one per "
                                                                "workload).")
    context_tokens: Optional[int] = Field(None, ge=0, description="KV length for step times (default: mean prompt "
                                                                  "+ half the output).")
    memory_budget_gib: Optional[float] = Field(None, ge=0, description="Several drafters offered: GPU memory (GiB) "
                                               "per GPU the served drafters' weights may add beyond one target "
                                               "instance (what each GPU of its tp group holds: a draft model's or "
                                               "head's shard, with separate instances the target's again; "
                                               "default: no limit).")
    separate_instances: bool = Field(False, description="Several drafters offered: each is its own model instance "
                                     "holding the target again (the llmapi flavor; a recipe sets it from triton).")
    calibrate: Optional[Path] = Field(None, description="results.json of `trtspec perf --sweep` on the deployment: "
                                      "fit the cost model to its measured requests, then tune (trtspec.tuning.calibrate).")
    in_flight_batching: bool = Field(True, description="The server steps concurrent requests together, a band of b "
                                     "as one forward of batch b (TensorRT-LLM); false: each request alone, every "
                                     "band priced at batch 1 (the cpu flavor's thread per request; a recipe sets "
                                     "it from triton).")
    speculate_only_if_clear: bool = Field(False, description="Serve speculation in a band only when its predicted "
                                          "gain over off is clear of the profiled AL's noise (95%): a choice the "
                                          "summary calls 'not distinguishable from off' is served off instead, and so is "
                                          "the repository's computed default route. Chains (draft model, EAGLE-3 "
                                          "head) and n-gram; not EAGLE trees.")

    @field_validator("concurrency_bands")
    @classmethod
    def _bands(cls, v: list[int]) -> list[int]:
        return distinct_positive(v, "[1, 4, 16, 64]")


class MeasureConfig(RuntimeDevice):
    """Which forwards `trtspec measure-cost` times (trtspec.tuning.measure), and on which device."""
    section = "measure_cost"
    batches: list[int] = Field(default_factory=lambda: [1, 2, 4], description="Batch sizes.")
    num_tokens: list[int] = Field(default_factory=lambda: [1, 2, 4, 8], description="Tokens per forward.")
    context: int = Field(32, ge=1, description="Committed KV length before the timed forward.")
    repeats: int = Field(3, ge=1, description="Timed runs per shape (median kept).")
    warmup: int = Field(1, ge=0, description="Untimed runs per shape before the timed ones.")
    seed: int = Field(0, description="Seed of the random token ids.")
