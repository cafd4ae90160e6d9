"""The two files of the tuning stage: `profile.json` (measured acceptance) and `tuning.json` (chosen settings).

profile.json (`Profile`, schema "trtspec.profile/1") is written by the profiler
(trtspec/tuning/profile.py) and read here. Field names follow NVIDIA ModelOpt's
`speculation_profile.json` where the two overlap (`num_speculative_tokens`,
`measurement_conditions`, `mean_accept_length`, `accept_length_by_k`,
`conditional_accept_rates`, `marginal_accept_rates`); `workloads` plays the role of ModelOpt's
`per_category`, and each workload keeps its per-state samples so that any K or tree can be
replayed exactly (trtspec/tuning/acceptance.py has the definitions). At temperature > 0 the samples
are the target's *sampled* outputs (trtspec/tuning/profile.py: the estimator and its rules), and the
profile says so: `measurement_conditions.sampling` / `accept_rule` / `estimator`, each workload's
`sampling`, each sample's `seed` (and `sampling` where a traffic-log record set its own). Every AL
has a standard error over prompts (`accept_length_se_by_k`, acceptance.ratio_se).

tuning.json (`Tuning`, schema "trtspec.tuning/1") is what `trtspec tune` writes and the Triton
repository stage reads: per workload and concurrency band the chosen draft length or eagle_choices
tree, with predicted AL, step times, tokens/s and speedup, and for EAGLE the served profiles.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import TrtspecError
from ..options import Sampling
from ..schema_io import load_versioned
from .acceptance import summarize
from .cost import GpuSpec, ModelShape
from .fit import Calibration, FitReport
from .ngram_acceptance import summarize_ngram

PROFILE_SCHEMA = "trtspec.profile/1"
TUNING_SCHEMA = "trtspec.tuning/1"
AGGREGATE_TOLERANCE = 1e-4  # stored aggregates vs the replay of the stored samples (JSON rounding)


# ---- profile.json -------------------------------------------------------------------------------

class MeasurementConditions(BaseModel):
    model_config = ConfigDict(extra="allow")
    target: str  # checkpoint directory (or name) of the target / EAGLE checkpoint
    draft: str | None = None  # draft checkpoint (draft-target); None for EAGLE
    quantization: dict = Field(default_factory=dict)
    temperature: float = 0.0
    max_new_tokens: int
    dtype: str
    trtspec_version: str
    sampling: Sampling | None = None  # the profile's default settings (a workload may set its own)
    accept_rule: str | None = None  # the rule the predictions assume (upstream.sampling names)
    estimator: Literal["exact", "unbiased", "approximate"] | None = None  # sampled.py: AL vs that rule

    @model_validator(mode="after")
    def _rule(self):
        if self.temperature != 0.0 and self.accept_rule is None:
            raise ValueError(f"temperature {self.temperature}: only greedy (0.0) profiles are valid without an "
                             "accept_rule (a sampled profile's AL holds for the rule it names)")
        return self


class ProfileSample(BaseModel):
    """One prompt: per-state lists (index t = state t, see acceptance.py), exactly one of the two."""
    model_config = ConfigDict(extra="forbid")
    id: str
    prompt_len: int | None = None
    match_lengths: list[int] | None = None  # draft-target
    rank_paths: list[list[int]] | None = None  # eagle
    ngram_steps: dict[str, list[list[list[int]]]] | None = None  # ngram: {n: [[accepted, drafted] per step] per K}
    output_ids: list[int] | None = None  # optional: the target's output (greedy or sampled), for inspection only
    seed: int | None = Field(None, exclude_if=lambda v: v is None)  # the sampled output's draw seed
    sampling: Sampling | None = Field(None, exclude_if=lambda v: v is None)  # this request's own settings

    @property
    def lists(self) -> list:
        return self.match_lengths if self.match_lengths is not None else self.rank_paths

    @property
    def num_states(self) -> int:
        """Generated tokens recorded: per-state lists, or an n-gram sample's output."""
        return len(self.output_ids or []) if self.ngram_steps is not None else len(self.lists)


class WorkloadProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    num_samples: int
    num_tokens: int  # sum over samples of the states recorded (generated tokens)
    mean_accept_length: float | None = None  # = accept_length_by_k[str(num_speculative_tokens)]
    accept_length_by_k: dict[str, float]
    conditional_accept_rates: list[float | None]
    marginal_accept_rates: list[float | None]
    samples: list[ProfileSample] = Field(min_length=1)
    accept_length_se_by_k: dict[str, float | None] | None = None  # standard errors (acceptance.ratio_se)
    sampling: Sampling | None = None  # the workload's settings (None: measurement_conditions.sampling)
    accept_length_by_n_k: dict[str, dict[str, float | None]] | None = None  # ngram: AL per matching size and K
    accept_length_se_by_n_k: dict[str, dict[str, float | None]] | None = None

    def mean_prompt_len(self) -> float | None:
        lens = [s.prompt_len for s in self.samples]
        return None if any(n is None for n in lens) else sum(lens) / len(lens)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_id: Literal["trtspec.profile/1"] = Field(PROFILE_SCHEMA, alias="schema")
    mode: Literal["draft-target", "eagle", "eagle3", "ngram"]  # eagle3: an EAGLE-3 head's chain (match_lengths)
    num_speculative_tokens: int = Field(ge=1, description="max K (chain) or max tree depth profiled")
    tree_top_k: int | None = Field(None, ge=1, description="eagle: ranks recorded (r < tree_top_k, else -1)")
    ngram_sizes: list[int] | None = Field(None, exclude_if=lambda v: v is None,
                                          description="ngram: the max_matching_ngram_size values profiled")
    measurement_conditions: MeasurementConditions
    workloads: dict[str, WorkloadProfile] = Field(min_length=1)

    @model_validator(mode="after")
    def _lists(self):
        K, eagle = self.num_speculative_tokens, self.mode == "eagle"
        if eagle and self.tree_top_k is None:
            raise ValueError("tree_top_k: required in eagle mode")
        if not eagle and self.tree_top_k is not None:
            raise ValueError("tree_top_k: must be null in draft-target mode")
        for name, w in self.workloads.items():
            where = f"workloads.{name}"
            if set(w.accept_length_by_k) != {str(k) for k in range(1, K + 1)}:
                raise ValueError(f"{where}.accept_length_by_k: expected keys '1'..'{K}'")
            for f in ("conditional_accept_rates", "marginal_accept_rates"):
                if len(getattr(w, f)) != K:
                    raise ValueError(f"{where}.{f}: expected {K} entries")
            if w.num_samples != len(w.samples):
                raise ValueError(f"{where}.num_samples: {w.num_samples} but {len(w.samples)} samples")
            for i, s in enumerate(w.samples):
                if self.mode == "ngram":
                    _check_ngram_sample(s, f"{where}.samples.{i}", K, self.ngram_sizes)
                else:
                    _check_sample(s, f"{where}.samples.{i}", eagle, K, self.tree_top_k)
            if w.num_tokens != sum(s.num_states for s in w.samples):
                raise ValueError(f"{where}.num_tokens: {w.num_tokens} but the samples hold "
                                 f"{sum(s.num_states for s in w.samples)} states")
        return self


def _check_sample(s: ProfileSample, where: str, eagle: bool, K: int, top_k: int | None) -> None:
    want, other = ("rank_paths", "match_lengths") if eagle else ("match_lengths", "rank_paths")
    if getattr(s, want) is None or getattr(s, other) is not None:
        raise ValueError(f"{where}: expected '{want}' (and no '{other}') in this mode")
    if not eagle:
        bad = next((m for m in s.match_lengths if not 0 <= m <= K), None)
        if bad is not None:
            raise ValueError(f"{where}.match_lengths: {bad} is outside [0, {K}]")
        return
    for t, p in enumerate(s.rank_paths):
        ok = len(p) <= K and all(0 <= r < top_k for r in p[:-1]) and (not p or -1 <= p[-1] < top_k)
        if not ok:
            raise ValueError(f"{where}.rank_paths.{t}: {p} is not a path of ranks in [0, {top_k}) of length "
                             f"<= {K}, optionally ending in -1")


def _check_ngram_sample(s: ProfileSample, where: str, K: int, sizes: list[int] | None) -> None:
    """An n-gram sample: its output and, per profiled size, K step lists of [accepted, drafted]."""
    if not sizes:
        raise ValueError("ngram_sizes: required in ngram mode")
    if s.ngram_steps is None or s.output_ids is None or s.match_lengths is not None or s.rank_paths is not None:
        raise ValueError(f"{where}: expected 'ngram_steps' and 'output_ids' (and no per-state lists) in this mode")
    if set(s.ngram_steps) != {str(n) for n in sizes}:
        raise ValueError(f"{where}.ngram_steps: expected keys {[str(n) for n in sizes]}")
    for n, per_k in s.ngram_steps.items():
        if len(per_k) != K:
            raise ValueError(f"{where}.ngram_steps.{n}: expected {K} step lists (K = 1..{K})")
        for k, steps in enumerate(per_k, 1):
            bad = next((x for x in steps if len(x) != 2 or not 0 <= x[0] <= x[1] <= k), None)
            if bad is not None:
                raise ValueError(f"{where}.ngram_steps.{n}.{k - 1}: {bad} is not [accepted, drafted] with "
                                 f"0 <= accepted <= drafted <= {k}")


def _aggregates(mode: str, samples: list[ProfileSample], K: int, sizes: list[int] | None) -> dict:
    """What the stored aggregates must be (acceptance.summarize; ngram_acceptance for n-gram)."""
    ids = [s.id for s in samples]
    if mode == "ngram":
        return summarize_ngram([s.ngram_steps for s in samples], sizes, K, ids) | {
            "num_tokens": sum(s.num_states for s in samples)}
    return summarize(mode, [s.lists for s in samples], K, ids)


def check_aggregates(profile: Profile, path: Path | str = "profile") -> None:
    """The stored aggregates must be what replaying the stored samples gives (acceptance.summarize)."""
    for name, w in profile.workloads.items():
        got = _aggregates(profile.mode, w.samples, profile.num_speculative_tokens, profile.ngram_sizes)
        pairs = [("mean_accept_length", w.mean_accept_length, got["mean_accept_length"])]
        pairs += [(f"accept_length_by_k.{k}", w.accept_length_by_k[k], v) for k, v in got["accept_length_by_k"].items()]
        if w.accept_length_se_by_k is not None:  # profiles before standard errors have none
            pairs += [(f"accept_length_se_by_k.{k}", w.accept_length_se_by_k.get(k), v)
                      for k, v in got["accept_length_se_by_k"].items()]
        for f in ("conditional_accept_rates", "marginal_accept_rates"):
            pairs += [(f"{f}.{i}", a, b) for i, (a, b) in enumerate(zip(getattr(w, f), got[f]))]
        for f in ("accept_length_by_n_k", "accept_length_se_by_n_k") if profile.mode == "ngram" else ():
            pairs += [(f"{f}.{n}.{k}", (getattr(w, f) or {}).get(n, {}).get(k), v)
                      for n, by_k in got[f].items() for k, v in by_k.items()]
        for field, stored, replayed in pairs:
            if stored is None and field == "mean_accept_length":
                continue
            if (stored is None) != (replayed is None) or (
                    stored is not None and not math.isclose(stored, replayed, abs_tol=AGGREGATE_TOLERANCE)):
                raise TrtspecError(f"{path}: field 'workloads.{name}.{field}' is {stored} but replaying the "
                                   f"samples gives {replayed}")


def load_profile(path: Path, check: bool = True) -> Profile:
    """Read and validate profile.json; every error is one line naming the file and field."""
    profile = load_versioned(path, Profile, PROFILE_SCHEMA, "profile")
    if check:
        check_aggregates(profile, path)
    return profile


def build_profile(mode: str, num_speculative_tokens: int, tree_top_k: int | None, conditions: dict,
                  workloads: dict[str, list[dict]], sampling: dict[str, dict] | None = None,
                  ngram_sizes: list[int] | None = None) -> Profile:
    """A Profile from per-workload samples ({"id", "prompt_len", "match_lengths" | "rank_paths"}),
    with the aggregates computed by acceptance.summarize (what the profiler should call); standard
    errors cluster the samples by id (a prompt profiled with several seeds is one cluster).
    sampling: {workload: its Sampling settings} where they are not the profile's default.
    ngram_sizes: the matching sizes of an n-gram profile (samples with `ngram_steps`)."""
    out = {}
    for name, samples in workloads.items():
        parsed = [ProfileSample.model_validate(s) for s in samples]
        for i, s in enumerate(parsed):
            if mode == "ngram":
                _check_ngram_sample(s, f"workloads.{name}.samples.{i}", num_speculative_tokens, ngram_sizes)
            else:
                _check_sample(s, f"workloads.{name}.samples.{i}", mode == "eagle", num_speculative_tokens, tree_top_k)
        agg = _aggregates(mode, parsed, num_speculative_tokens, ngram_sizes)
        if agg["mean_accept_length"] is None:
            raise ValueError(f"workloads.{name}: no verify steps (every sample has fewer than 2 generated tokens)")
        out[name] = WorkloadProfile(samples=parsed, sampling=(sampling or {}).get(name), **agg)
    return Profile(mode=mode, num_speculative_tokens=num_speculative_tokens, tree_top_k=tree_top_k,
                   ngram_sizes=ngram_sizes, measurement_conditions=MeasurementConditions.model_validate(conditions),
                   workloads=out)


def dump_json(model: BaseModel) -> str:
    return model.model_dump_json(by_alias=True, indent=1) + "\n"


# ---- tuning.json --------------------------------------------------------------------------------

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
    context_tokens: float  # the mean KV length the step times were evaluated at
    accept_length_by_k: dict[str, float]
    bands: list[BandChoice]
    accept_length_se_by_k: dict[str, float | None] | None = None
    sampling: Sampling | None = None  # the settings the workload was profiled (and is tuned) at
    accept_rule: str | None = None  # the accept rule the profile's AL assumed at those settings
    accept_length_by_n_k: dict[str, dict[str, float | None]] | None = Field(None, exclude_if=lambda v: v is None)


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


class OfferedDrafter(BaseModel):
    """One drafter the recipe offered, what it costs and whether the choice serves it."""
    mode: str  # the mode of its tuning (draft-target, eagle3, ngram)
    profile: dict  # {"path", "sha256"} of the profile it was tuned from
    memory_gib: float  # what serving it adds (trtspec/tuning/choose.py)
    served: bool  # some workload x band routes to it
    head: str | None = Field(None, exclude_if=lambda v: v is None)  # an EAGLE-3 drafter's head directory


class DrafterChoice(BaseModel):
    """tuning.json `choice`: the drafters offered and the set chosen within the budget."""
    drafters: dict[str, OfferedDrafter]
    memory_budget_gib: float | None
    separate_instances: bool  # each drafter its own model instance (llmapi)
    memory_gib: float  # what the served set adds
    score: float  # token-weighted sum of predicted tokens/s over workloads and bands (the objective)


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
