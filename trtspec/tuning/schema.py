"""The two files of the tuning stage: `profile.json` (measured acceptance) and `tuning.json` (chosen settings).

profile.json (`Profile`, schema "trtspec.profile/2") is written by the profiler
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

Version 2 counts a request's last step as TensorRT-LLM does (runtime/stats.py counted_step): only
the tokens it emits before the end. A /1 file counted it whole (its aggregates, and an n-gram
sample's last step that ran past an eos, up to one token per sample more), and is refused rather
than read as /2 (RETIRED): the pipeline profiles again (its profile stage hashes PROFILE_SCHEMA).

tuning.json (`Tuning`, schema "trtspec.tuning/1"), what `trtspec tune` writes and the Triton
repository stage reads, has its models in tuning_schema.py (import them from there).
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
from .ngram_acceptance import summarize_ngram

PROFILE_SCHEMA = "trtspec.profile/2"
RETIRED = {"trtspec.profile/1": "it counts a request's last step past the end of its output; profile again"}
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
    schema_id: Literal["trtspec.profile/2"] = Field(PROFILE_SCHEMA, alias="schema")
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
            emitted, want = sum(a + 1 for a, _ in steps), max(len(s.output_ids) - 1, 0)
            if emitted != want:  # the last step ends where the output does (ngram_profile.py)
                raise ValueError(f"{where}.ngram_steps.{n}.{k - 1}: the steps emit {emitted} tokens; expected "
                                 f"{want} (output_ids after the prefill's token)")


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
    profile = load_versioned(path, Profile, PROFILE_SCHEMA, "profile", RETIRED)
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
