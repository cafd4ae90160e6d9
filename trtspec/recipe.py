"""The recipe YAML of `trtspec run`: every input and setting of the pipeline in one file.

A recipe names the models, the workloads and one section per stage; `trtspec run` turns it into
stage calls (trtspec/pipeline). Each section IS the stage's options model (trtspec/<stage>/options.py),
the same model that gives the CLI flags their defaults, so a default is written once
(tests/test_cli_options.py keeps it so). Values the build and triton stages check against the
checkpoint or engines (batch sizes, lengths) are checked there, when the stage runs. Why pydantic with `extra="forbid"` everywhere: a misspelt key in a
long-lived YAML file must fail loudly (naming the key and what is allowed) instead of silently
falling back to a default and producing a different engine or tuning.

Relative paths are resolved against the recipe file's directory (trtspec.recipe_paths), so a recipe
and its prompt files can be moved together and run from anywhere. `target: default` is the embedded
SmolLM2-135M-Instruct (trtspec.checkpoints.default_model). Packaged workload names (mt-bench, humaneval) are not paths.

    name: demo
    target: default                      # or an HF directory
    draft: {derive: {layers: 10}}        # or {hf: DIR} | {eagle: HEAD_DIR} | {eagle3: DIR} | {train: {...}}
    mode: draft-target                   # eagle | draft-target (inferred from the draft if left out)
    quantization: {format: fp8, kv_cache: fp8}   # or none
    build: {gpu: h100}
    workloads: {chat: mt-bench, code: humaneval}   # or chat: {source: mt-bench, temperature: 0.7, top_p: 0.9}
    profile: {samples: 8, max_new_tokens: 64, max_k: 4}
    tune: {cost: cpu, concurrency_bands: [1, 2]}
    triton: {flavor: cpu}
    perf: {concurrency: [1], requests: 8, max_tokens: 48}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .builders.options import BuildOptions
from .checkpoints.options import ConvertOptions
from .drafts.options import TrainDraftStage
from .fsutil import read_text
from .errors import TrtspecError
from .options import field_path, first_problem
from .perf.options import PerfSettings
from .quality.options import QuantizeStage
from .recipe_paths import DEFAULT_TARGET, check_path, resolve_paths
from .triton_repo.options import ServeOptions, TritonOptions
from .triton_repo.flavors import in_flight_batching, mode_refusal
from .triton_repo.sampling import route_sampling
from .tuning.options import ProfileOptions, TuneOptions, WorkloadEntry
from .workloads.spec import parse_workload_specs

NGRAM_DEFAULT_SIZES = (1, 2, 3)  # max_matching_ngram_size values profiled when the recipe offers n-gram


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Derive(_Strict):
    """A draft made of the target's first `layers` decoder layers (same tokenizer by construction)."""
    layers: int = Field(ge=1)


DRAFT_KINDS = ("hf", "eagle", "eagle3", "derive", "train")
# The trained general head's drafter name: the mode's, as a given `draft.eagle3` head is named;
# a per-workload head is GENERAL_HEAD-<workload> (Recipe.trained_heads).
GENERAL_HEAD = "eagle3"
MODE_OF_DRAFT = {"hf": "draft-target", "derive": "draft-target", "eagle": "eagle", "eagle3": "eagle3",
                 "train": "eagle3"}


class Draft(_Strict):
    """Exactly one of: an HF draft model, an EAGLE-1 head, an EAGLE-3 head, a draft derived from the
    target, or an EAGLE-3 head trained on the target's answers (trtspec.drafts, cached by its inputs)."""
    hf: Optional[str] = None
    eagle: Optional[str] = None
    eagle3: Optional[str] = Field(None, description="an EAGLE-3 head directory (SafeAILab or ModelOpt layout); "
                                                    "served by the llmapi or cpu flavor")
    derive: Optional[Derive] = None
    train: Optional[TrainDraftStage] = Field(None, description="train an EAGLE-3 head (or one per workload) on "
                                                               "the target's answers to the recipe's workloads")

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in DRAFT_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(DRAFT_KINDS)} (got {', '.join(given) or 'none'})")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in DRAFT_KINDS if getattr(self, k) is not None)


# ---- the stage sections: each IS the stage's options model (one default per option) ----------------

Quantization = QuantizeStage  # trtspec.quality.options: calib.QuantizeOptions + the quality report


class Build(BuildOptions):
    """trtspec.builders.BuildOptions, plus whether the pipeline runs trtllm-build when it is on PATH.
    `role` is the pipeline's to choose (eagle, or the pair), so a recipe does not set it."""
    engines: bool = Field(False, description="run trtllm-build when it is on PATH (else plan + build.sh only)")

    @field_validator("role")
    @classmethod
    def _auto(cls, v: str) -> str:
        if v != "auto":
            raise ValueError("the pipeline picks the role from the mode (eagle, or the pair); leave it out")
        return v


class Triton(TritonOptions, ServeOptions):
    """trtspec.triton_repo TritonOptions + ServeOptions (the serve stage's ports and start timeout)."""
    section = "triton"
    flavor: Literal["trtllm", "pytorch", "cpu", "llmapi"]  # required (the CLI says so when missing); cpu = pytorch


class Perf(PerfSettings):
    """trtspec.perf.options.PerfSettings. One deliberate difference: a recipe measures the speedup, so
    `baseline` is on unless the recipe says otherwise (a lone `trtspec perf` measures only what it is
    asked to). tests/test_cli_options.py names this as the one allowed difference."""
    baseline: bool = Field(True, description=PerfSettings.model_fields["baseline"].description)


class Recipe(ConvertOptions):
    """The recipe file. `dtype`, `tp`, `eagle` and `allow_pickle` are ConvertOptions (inherited)."""
    section = "recipe"
    name: Optional[str] = None
    target: str = Field(description="an HF model directory, or 'default' (the embedded SmolLM2-135M-Instruct)")
    draft: Optional[Draft] = Field(None, description="the model drafter; leave it out with ngram: true for n-gram "
                                                     "drafting alone")
    ngram: bool = Field(False, description="Offer n-gram drafting too (profiled at profile.ngram_sizes, default "
                                           f"{list(NGRAM_DEFAULT_SIZES)}): the tuner picks per workload x band the "
                                           "drafter with the best predicted tokens/s (trtspec/tuning/choose.py).")
    mode: Optional[Literal["eagle", "draft-target", "eagle3", "ngram"]] = None
    threads: Optional[int] = Field(None, ge=1, description="torch intra-op threads of the CPU stages")
    quantization: Optional[Quantization] = None
    build: Optional[Build] = None
    workloads: dict[str, str]
    workload_sampling: dict[str, dict[str, int | float]] = Field(
        default_factory=dict, description="Each workload's own temperature / top_k / top_p: filled from the "
                                          "`workloads` entries written as {source, temperature, ...}.")
    profile: ProfileOptions = Field(default_factory=ProfileOptions)
    tune: TuneOptions = Field(default_factory=TuneOptions)
    triton: Optional[Triton] = None
    perf: Optional[Perf] = None

    @field_validator("quantization", mode="before")
    @classmethod
    def _none(cls, v: Any) -> Any:
        return None if v in ("none", False) else v

    @field_validator("draft", mode="before")
    @classmethod
    def _draft_shorthand(cls, v: Any) -> Any:
        if v in ("none", False):
            return None
        return {"hf": v} if isinstance(v, str) else v  # `draft: /models/small` = an HF draft model

    @model_validator(mode="before")
    @classmethod
    def _workload_entries(cls, data: Any) -> Any:
        """`workloads: {chat: {source: mt-bench, temperature: 0.7}}` -> workloads {chat: mt-bench} and
        workload_sampling {chat: {temperature: 0.7}}: every stage reads `workloads` as NAME: SOURCE."""
        if not isinstance(data, dict) or not isinstance(data.get("workloads"), dict):
            return data
        plain, sampling, given = {}, {}, data.get("workload_sampling") or {}
        for name, v in data["workloads"].items():
            if isinstance(v, dict):
                entry = _workload_entry(f"workloads.{name}", v)
                plain[name], sampling[name] = entry.source, entry.overrides()
            else:
                plain[name] = v
        for name, v in given.items() if isinstance(given, dict) else ():  # written as such: checked the same way
            if name not in plain:
                raise ValueError(f"workload_sampling.{name}: no such workload (workloads: {', '.join(plain)})")
            if isinstance(v, dict):  # merged under a workloads entry's own settings, which win
                written = _workload_entry(f"workload_sampling.{name}", {"source": plain[name], **v}).overrides()
                sampling[name] = {**written, **sampling.get(name, {})}
            else:
                sampling[name] = v  # not a mapping: the field's own type check names it
        sampling = {n: s for n, s in sampling.items() if s != {}}  # no settings of its own: as if written plain
        return {**data, "workloads": plain, "workload_sampling": sampling if isinstance(given, dict) else given}

    @field_validator("workloads")
    @classmethod
    def _workloads(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("give at least one NAME: SOURCE (mt-bench, humaneval or a .jsonl/.csv path)")
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ValueError(f"workload name {name!r}: use letters, digits, '_', '.', '-'")
        return v

    @model_validator(mode="after")
    def _consistent(self):
        if self.draft is None and not self.ngram:
            raise ValueError(f"draft: give a draft ({', '.join(DRAFT_KINDS)}), or ngram: true for n-gram drafting")
        kind = MODE_OF_DRAFT[self.draft.kind] if self.draft is not None else "ngram"
        if self.mode is None:
            self.mode = kind
        elif self.mode != kind:
            given = f"draft.{self.draft.kind}" if self.draft is not None else "n-gram drafting alone"
            raise ValueError(f"mode {self.mode!r} does not match {given} (which means mode {kind})")
        self._check_drafters()
        for name, source in self.workloads.items():  # before _check_training reads a comma as a list separator
            try:
                check_path(source, f"workloads.{name}", source=True)
            except TrtspecError as e:
                raise ValueError(str(e)) from None
        self._check_training()
        if self.perf is not None and self.triton is None:
            raise ValueError("perf needs a triton section (the repository it measures)")
        self._deployment_accept_rule()
        self._instances()
        self._batching()
        self._parallel()
        return self

    def _check_drafters(self) -> None:
        """What the deployment paths can serve: an EAGLE-1 engine always drafts its own tree (no
        n-gram beside it); EAGLE-3 and n-gram alone have no engine-flow build here."""
        if self.mode == "eagle" and self.ngram:
            raise ValueError("ngram: an EAGLE-1 engine always drafts with its tree; offer n-gram with a draft model "
                             "or an EAGLE-3 head")
        if self.profile.ngram_sizes is not None and not self.ngram:
            raise ValueError("profile.ngram_sizes: the sizes of the n-gram drafter; set ngram: true to offer it")
        if self.mode in ("eagle3", "ngram") and self.build is not None:
            why = " (the engine flow has no EAGLE-3)" if self.mode == "eagle3" else ""
            raise ValueError(f"build: {self.mode} is served by the LLM-API (PyTorch) backend or the cpu flavor here; "
                             f"leave the build section out{why}")
        refusal = mode_refusal(self.triton.flavor, self.mode) if self.triton is not None else None
        if refusal:
            raise ValueError(refusal)
        if self.mode == "ngram" and self.triton is not None and self.triton.flavor == "trtllm":
            raise ValueError("triton.flavor: a recipe builds no engine for ngram (see build); serve it with llmapi "
                             "or cpu, or give `trtspec triton` an engine built with draft_tokens_external")

    def _check_training(self) -> None:
        """Each trained head's options are whole only here (its prompts default to the recipe's
        workloads), so they are checked now, naming the field, not first when the derive stage
        hashes them: a bad NAME=SOURCE list, a workload named `self` beside self_prompts."""
        t = self.draft.train if self.draft is not None else None
        field = "draft.train.workloads" if t is not None and t.workloads else "workloads"
        try:
            for name, entries in self.trained_heads().items():
                parse_workload_specs(entries)
                t.head_options(entries, self.threads, general=name == GENERAL_HEAD)
        except TrtspecError as e:
            raise ValueError(f"{field}: {e}") from None
        except ValidationError as e:
            raise ValueError(f"{field}: {first_problem(e)[1].removeprefix('workloads: ')}") from None

    def _instances(self) -> None:
        """The llmapi flavor loads every drafter into its own model instance (speculative_config is
        per model), so the drafter choice counts a target per instance: tune.separate_instances."""
        if self.triton is None or "separate_instances" in self.tune.model_fields_set:
            return
        if self.triton.flavor == "llmapi":
            self.tune = self.tune.model_copy(update={"separate_instances": True})

    def _parallel(self) -> None:
        """llmapi at triton.tp N is priced at tp N: the tuner reads tp from the checkpoint the recipe
        converts (its top-level tp), which the llmapi repository also takes as its tp when triton.tp is
        unset. So triton.tp sets the recipe's tp, and the two cannot differ."""
        if self.triton is None or self.triton.tp is None:
            return
        if self.triton.flavor != "llmapi":
            raise ValueError(f"triton.tp: the {self.triton.flavor} flavor serves at the recipe's tp; set tp, "
                             "not triton.tp")
        if "tp" in self.model_fields_set and self.tp != self.triton.tp:
            raise ValueError(f"triton.tp: {self.triton.tp} differs from tp {self.tp}, which the recipe converts, "
                             "profiles and tunes at; give one of them")
        self.tp = self.triton.tp

    def _batching(self) -> None:
        """Whether the served flavor steps concurrent requests together decides how the tuner prices
        a band (tune.in_flight_batching): the cpu flavor serves each request on its own thread."""
        if self.triton is None or "in_flight_batching" in self.tune.model_fields_set:
            return
        if not in_flight_batching(self.triton.flavor):
            self.tune = self.tune.model_copy(update={"in_flight_batching": False})

    def _deployment_accept_rule(self) -> None:
        """At T > 0 the profile must predict the rule the served route runs (upstream.sampling
        PATH_RULES: engine-flow draft-target resamples at a miss unless build.draft_logits, EAGLE
        through Triton decodes greedily, ...): unless the recipe names profile.accept_rule, it is
        the repository's. Written into the profile section, so the profile's cache key has it."""
        if self.triton is None or "accept_rule" in self.profile.model_fields_set:
            return
        draft_logits = bool(self.build is not None and self.build.draft_logits)
        rule = route_sampling(self.triton.flavor, self.mode, draft_logits=draft_logits)["accept_rule"]
        self.profile = self.profile.model_copy(update={"accept_rule": rule})

    # ---- derived facts the stages use ----

    @property
    def uses_default_target(self) -> bool:
        return self.target == DEFAULT_TARGET

    def ngram_sizes(self) -> list[int]:
        """The matching sizes the n-gram drafter is profiled at."""
        return list(self.profile.ngram_sizes or NGRAM_DEFAULT_SIZES)

    def workload_entries(self) -> list[str]:
        return [f"{n}={s}" for n, s in self.workloads.items()]

    def trained_heads(self) -> dict[str, str]:
        """{head name: the NAME=SOURCE list it trains on} for `draft: {train: ...}` (else empty): the
        general head (named by the mode, as a given `draft.eagle3` head is) on every workload, and
        with per_workload one head per workload on its prompts alone."""
        t = self.draft.train if self.draft is not None else None
        if t is None:
            return {}
        entries = t.workloads.split(",") if t.workloads else self.workload_entries()
        heads = {GENERAL_HEAD: ",".join(entries)}
        if t.per_workload and len(entries) > 1:  # (one workload: its head is the general one)
            heads |= {f"{GENERAL_HEAD}-{s.name}": e for s, e in zip(parse_workload_specs(entries), entries)}
        return heads


def _workload_entry(where: str, value: dict) -> WorkloadEntry:
    """A workload's source and sampling settings, validated; a problem names `where` and the field."""
    try:
        return WorkloadEntry.model_validate(value)
    except ValidationError as e:
        field, msg = first_problem(e)
        raise ValueError(f"{where}{'.' + field if field else ''}: {msg}") from None


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names of the model at `loc` (the parent of an unknown key)."""
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            break
        ann = field.annotation
        nested = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        model = nested[0] if nested else None
    return sorted(model.model_fields) if model is not None else []


def explain(e: ValidationError, where: str) -> TrtspecError:
    """The first validation problem as one line: file, dotted field, what was expected."""
    err = e.errors()[0]
    loc = field_path(err["loc"])  # union member tags dropped
    dotted = ".".join(str(x) for x in loc) or "(top level)"
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(Recipe, loc[:-1])
        return TrtspecError(f"{where}: unknown key {dotted!r}" + (f" (allowed here: {', '.join(allowed)})"
                                                                  if allowed else ""))
    if err["type"] == "missing":
        hint = " (an HF model directory or 'default')" if dotted == "target" else ""
        return TrtspecError(f"{where}: {dotted}: required{hint}")
    msg = err["msg"].removeprefix("Value error, ")
    return TrtspecError(f"{where}: {dotted}: {msg}" if loc else f"{where}: {msg}")


def parse_recipe(data: Any, where: str = "recipe") -> Recipe:
    if not isinstance(data, dict):
        raise TrtspecError(f"{where}: expected a YAML mapping of recipe sections, got {type(data).__name__}")
    try:
        return Recipe.model_validate(data)
    except ValidationError as e:
        raise explain(e, where) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, but a key given twice in one mapping is an error (YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)):
                continue  # an unhashable key: the base class reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_recipe(path: Path) -> Recipe:
    """Read, validate and resolve a recipe file; errors are one line naming the file and field."""
    path = Path(path)
    text = read_text(path, "recipe file", "YAML")
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise TrtspecError(f"{path}: not valid YAML{at} ({getattr(e, 'problem', None) or e})") from None
    return resolve_paths(parse_recipe(data, str(path)), path.resolve().parent, str(path))
