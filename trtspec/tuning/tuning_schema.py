"""tuning.json (`Tuning`, schema "trtspec.tuning/1"): what `trtspec tune` writes and the Triton
repository stage (and perf) reads.

Per workload and concurrency band the chosen draft length or eagle_choices tree, with predicted
AL, step times, tokens/s and speedup, and for EAGLE the served profiles; `load_tuning` reads it and
checks the values a well-typed file can still get wrong. It is apart from profile.json's models
(schema.py) because it is the other file, the tuner's output rather than its input, and the two
together outgrew one module.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import TrtspecError
from ..options import Sampling
from ..schema_io import load_versioned
from .cost import ModelShape
from .gpus import GpuSpec
from .fit import Calibration, FitReport

TUNING_SCHEMA = "trtspec.tuning/1"


class SweepPoint(BaseModel):
    """One candidate setting: a draft length K, or an EAGLE tree of `num_nodes` nodes (0 = off)."""
    draft_len: int | None = None
    num_nodes: int | None = None
    label: str | None = None  # eagle: none | greedy (best grown tree of that size) | chain | default;
    # a chain of another EAGLE-3 head than the general one (choose.py): that head's drafter name
    max_matching_ngram_size: int | None = Field(None, exclude_if=lambda v: v is None)  # ngram: n of this point
    acceptance_length: float
    # its standard error over the profiled prompts (acceptance.ratio_se), where the sweep has one
    acceptance_length_se: float | None = Field(None, exclude_if=lambda v: v is None)
    step_time_s: float
    tokens_per_s: float


class BandChoice(BaseModel):
    """The setting served to one workload at one concurrency (batch) band, and its prediction."""
    concurrency: int
    speculate: bool
    # who drafts: None the mode's model, "ngram", or another EAGLE-3 head's name in choice.drafters (choose.py)
    drafter: str | None = Field(None, exclude_if=lambda v: v is None)
    draft_len: int | None = None  # draft-target: num_draft_tokens per request (0 = no speculation); ngram: K
    max_matching_ngram_size: int | None = Field(None, exclude_if=lambda v: v is None)  # ngram: n (None when off)
    eagle_choices: list[list[int]] | None = None  # eagle: the served tree (None = no speculation)
    profile: str | None = None  # eagle: name of the served profile (model instance) it belongs to
    acceptance_length: float
    acceptance_length_se: float | None = None  # over the profiled prompts (acceptance.ratio_se); 0 when off
    step_time_s: float
    draft_step_s: float
    target_step_s: float
    tokens_per_s: float
    baseline_step_time_s: float
    baseline_tokens_per_s: float
    speedup: float
    own_best_tokens_per_s: float  # with this workload's own best setting (> tokens_per_s only when grouped)
    sweep: list[SweepPoint]
    # off by tune.speculate_only_if_clear: the best setting, held back as not distinguishable from off
    # (select.held_off; its sweep is this band's)
    held_off: BandChoice | None = Field(None, exclude_if=lambda v: v is None)


class WorkloadTuning(BaseModel):
    num_samples: int
    num_tokens: int
    context_tokens: float  # the mean KV length the step times were evaluated at (tune.context_tokens if set)
    # the profile's mean prompt length (None: its samples record none, or written before it was): with
    # num_tokens / num_samples, a request's whole length, which context_tokens cannot give under an override
    prompt_tokens: float | None = Field(None, exclude_if=lambda v: v is None)
    accept_length_by_k: dict[str, float]
    bands: list[BandChoice]
    accept_length_se_by_k: dict[str, float | None] | None = None
    sampling: Sampling | None = None  # the settings the workload was profiled (and is tuned) at
    accept_rule: str | None = None  # the accept rule the profile's AL assumed at those settings
    accept_length_by_n_k: dict[str, dict[str, float | None]] | None = Field(None, exclude_if=lambda v: v is None)
    # the distinct prompts the standard errors are over, those with a step (num_samples counts each
    # prompt's sampled draws: profile.samples_per_prompt); None in a tuning.json written before it was
    # recorded
    num_prompts: int | None = Field(None, exclude_if=lambda v: v is None)


class ServedProfile(BaseModel):
    """EAGLE: one model instance (eagle_choices is a server-level setting) at one band."""
    name: str
    concurrency: int
    workloads: list[str]
    eagle_choices: list[list[int]] | None
    num_nodes: int
    mean_throughput_loss: float  # mean over its workloads of 1 - tokens/s / own best tokens/s


class EagleLimits(BaseModel):
    num_eagle_layers: int  # every chosen tree has exactly this depth (TRT-LLM requires it)
    node_budget: int  # <= the checkpoint's max_draft_len
    max_non_leaves_per_layer: int
    max_profiles: int | None
    tree_top_k: int


class CostInfo(BaseModel):
    source: Literal["analytic", "measured", "calibrated"]
    table: str | None = None
    gpu: GpuSpec
    fit: FitReport | None = None
    target: ModelShape
    draft: ModelShape | None = None
    calibration: Calibration | None = Field(None, exclude_if=lambda v: v is None)  # source "calibrated"
    # False: every band was priced at batch 1 (CostModel.in_flight_batching; absent means True)
    in_flight_batching: bool = Field(True, exclude_if=lambda v: v)


class OfferedDrafter(BaseModel):
    """One drafter the recipe offered, what it costs and whether the choice serves it."""
    mode: str  # the mode of its tuning (draft-target, eagle3, ngram)
    profile: dict  # {"path", "sha256"} of the profile it was tuned from
    memory_gib: float  # what serving it adds (trtspec/tuning/choose.py)
    served: bool  # some workload routes to it at a served band (separate instances: the smallest only)
    head: str | None = Field(None, exclude_if=lambda v: v is None)  # an EAGLE-3 drafter's head directory


class DrafterChoice(BaseModel):
    """tuning.json `choice`: the drafters offered and the set chosen within the budget."""
    drafters: dict[str, OfferedDrafter]
    memory_budget_gib: float | None
    separate_instances: bool  # each drafter its own model instance (llmapi)
    memory_gib: float  # what the served set adds
    score: float  # token-weighted sum of predicted tokens/s over workloads and served bands (the objective)


class Tuning(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    schema_id: Literal["trtspec.tuning/1"] = Field(TUNING_SCHEMA, alias="schema")
    mode: Literal["draft-target", "eagle", "eagle3", "ngram"]
    profile: dict  # {"path", "sha256"}
    measurement_conditions: dict
    trtspec_version: str
    cost: CostInfo
    concurrency_bands: list[int]
    max_draft_len: int  # engine bound needed: largest chosen K (draft-target) or tree size (eagle)
    eagle: EagleLimits | None = None
    workloads: dict[str, WorkloadTuning]
    profiles: list[ServedProfile] | None = None  # eagle only
    choice: DrafterChoice | None = Field(None, exclude_if=lambda v: v is None)  # several drafters offered (choose.py)
    # tuned with tune.speculate_only_if_clear (select.held_off): the repository's computed default
    # route obeys it too (triton_repo/routing.py); absent means False
    speculate_only_if_clear: bool = Field(False, exclude_if=lambda v: not v)


def load_tuning(path: Path) -> Tuning:
    """Read and validate tuning.json (what the Triton repository stage consumes): the schema, then
    the values (see check_tuning_values)."""
    tuning = load_versioned(path, Tuning, TUNING_SCHEMA, "tuning")
    check_tuning_values(tuning, path)
    return tuning


def check_tuning_values(tuning: Tuning, path: Path | str = "tuning") -> None:
    """Values a well-typed tuning.json can still get wrong, each reported with its field: a
    non-finite number (json reads NaN and Infinity), a concurrency below 1, a draft length below 0
    or above the file's own max_draft_len. A repository written from such a file routes requests
    by nonsense (bands [-1, 0]) or asks the engine for a million draft tokens and hangs."""
    def fail(field: str, msg: str):
        raise TrtspecError(f"{path}: field '{field}': {msg}")

    for field, value in _floats(tuning.model_dump(by_alias=True)):
        if not math.isfinite(value):
            fail(field, f"{value} is not a finite number")
    if tuning.max_draft_len < 0:
        fail("max_draft_len", f"{tuning.max_draft_len} is negative")
    for i, c in enumerate(tuning.concurrency_bands):
        if c < 1:
            fail(f"concurrency_bands.{i}", f"concurrency {c} is below 1")
    for name, w in tuning.workloads.items():
        for i, b in enumerate(w.bands):
            where = f"workloads.{name}.bands.{i}"
            if b.concurrency < 1:
                fail(f"{where}.concurrency", f"concurrency {b.concurrency} is below 1")
            if b.draft_len is not None and not 0 <= b.draft_len <= tuning.max_draft_len:
                fail(f"{where}.draft_len", f"{b.draft_len} is outside [0, max_draft_len={tuning.max_draft_len}]")


def _floats(data, prefix: str = ""):
    """(dotted field path, value) of every float in a dumped model."""
    if isinstance(data, float):
        yield prefix, data
    elif isinstance(data, dict):
        for k, v in data.items():
            yield from _floats(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _floats(v, f"{prefix}.{i}" if prefix else str(i))
