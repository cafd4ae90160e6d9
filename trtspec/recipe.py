"""The recipe YAML of `trtspec run`: every input and setting of the pipeline in one file.

A recipe names the models, the workloads and one section per stage; `trtspec run` turns it into
stage calls (trtspec/pipeline). Why pydantic with `extra="forbid"` everywhere: a misspelt key in a
long-lived YAML file must fail loudly (naming the key and what is allowed) instead of silently
falling back to a default and producing a different engine or tuning.

Relative paths are resolved against the recipe file's directory, so a recipe and its prompt files
can be moved together and run from anywhere. `target: default` is the embedded SmolLM2-135M-Instruct
(trtspec.checkpoints.default_model). Packaged workload names (mt-bench, humaneval) are not paths.

    name: demo
    target: default                      # or an HF directory
    draft: {derive: {layers: 10}}        # or {hf: DIR} | {eagle: HEAD_DIR}
    mode: draft-target                   # eagle | draft-target (inferred from the draft if left out)
    quantization: {format: fp8, kv_cache: fp8}   # or none
    build: {gpu: h100}
    workloads: {chat: mt-bench, code: humaneval}
    profile: {samples: 8, max_new_tokens: 64, max_k: 4}
    tune: {cost: cpu, concurrency_bands: [1, 2]}
    triton: {flavor: cpu}
    perf: {concurrency: [1], requests: 8, max_tokens: 48}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import TrtspecError

DEFAULT_TARGET = "default"
PACKAGED_WORKLOADS = ("mt-bench", "humaneval")  # trtspec.workloads.PACKAGED, without importing it
COST_PRESETS = ("h100", "h200", "cpu")          # trtspec.tuning.cost.PRESETS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Derive(_Strict):
    """A draft made of the target's first `layers` decoder layers (same tokenizer by construction)."""
    layers: int = Field(ge=1)


class Draft(_Strict):
    """Exactly one of: an HF draft model, an EAGLE-1 head, or a draft derived from the target."""
    hf: Optional[str] = None
    eagle: Optional[str] = None
    derive: Optional[Derive] = None

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("hf", "eagle", "derive") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of hf, eagle, derive (got {', '.join(given) or 'none'})")
        return self

    @property
    def kind(self) -> str:
        return "hf" if self.hf is not None else "eagle" if self.eagle is not None else "derive"


class EagleOptions(_Strict):
    max_draft_len: int = Field(63, ge=1)
    num_eagle_layers: int = Field(4, ge=1)
    max_non_leaves: int = Field(10, ge=1)


class QualityReport(_Strict):
    """The quantized-vs-reference report written next to the checkpoint (trtspec.calib.report)."""
    workloads: dict[str, str] = Field(default_factory=lambda: {"chat": "mt-bench"})
    samples: int = Field(4, ge=1)
    max_new_tokens: int = Field(32, ge=1)


class Quantization(_Strict):
    format: Literal["fp8", "int8_sq", "w8a16", "w4a16_awq"]
    kv_cache: Optional[Literal["fp8", "int8"]] = None
    draft_format: Literal["same", "fp8", "int8_sq", "w8a16", "w4a16_awq", "none"] = "same"
    calib: Optional[dict[str, str]] = Field(None, description="NAME: SOURCE; default: the recipe's workloads")
    samples: int = Field(512, ge=1)
    seq_len: int = Field(512, ge=1)
    seed: int = 0
    awq_group_size: int = Field(128, ge=1)
    report: Union[QualityReport, bool] = False


class Build(_Strict):
    """trtspec.builders.BuildOptions, plus whether to run trtllm-build when it is on PATH."""
    gpu: Literal["h100", "h200"] = "h100"
    max_batch_size: int = Field(64, ge=1)
    max_input_len: Optional[int] = Field(None, ge=1)
    max_seq_len: Optional[int] = Field(None, ge=1)
    max_num_tokens: Optional[int] = Field(None, ge=1)
    max_draft_len: Optional[int] = Field(None, ge=1, description="draft-target; default: profile.max_k")
    draft_logits: bool = False
    engines: bool = Field(False, description="run trtllm-build when it is on PATH (else plan + build.sh only)")
    timeout_s: float = Field(7200.0, gt=0)


class Profile(_Strict):
    samples: Optional[int] = Field(16, ge=1, description="prompts per workload (seeded sample); null: all")
    max_new_tokens: Optional[int] = Field(None, ge=1, description="null: each workload's default")
    max_k: int = Field(8, ge=1, description="longest draft chain / EAGLE depth measured")
    tree_top_k: int = Field(10, ge=1)
    seed: int = 0


class Tune(_Strict):
    cost: str = Field("h100", description="h100 | h200 | cpu, or a measured cost table (JSON path)")
    concurrency_bands: list[int] = Field(default_factory=lambda: [1, 4, 16, 64])
    eagle_node_budget: Optional[int] = Field(None, ge=1)
    max_profiles: Optional[int] = Field(None, ge=1)
    context_tokens: Optional[int] = Field(None, ge=0)

    @field_validator("concurrency_bands")
    @classmethod
    def _bands(cls, v: list[int]) -> list[int]:
        if not v or any(b < 1 for b in v) or len(set(v)) != len(v):
            raise ValueError("expected distinct positive integers, e.g. [1, 4, 16, 64]")
        return sorted(v)


class Ports(_Strict):
    """null (the default): a free port is picked at serve time."""
    http: Optional[int] = Field(None, ge=1, le=65535)
    grpc: Optional[int] = Field(None, ge=1, le=65535)
    metrics: Optional[int] = Field(None, ge=1, le=65535)


class Triton(_Strict):
    flavor: Literal["trtllm", "cpu", "llmapi"]
    ports: Ports = Field(default_factory=Ports)
    max_batch_size: Optional[int] = Field(None, ge=1)
    instances: int = Field(1, ge=1)
    eagle_band: Optional[int] = Field(None, ge=1)
    default_workload: Optional[str] = None
    start_timeout_s: float = Field(300.0, gt=0, description="cpu: seconds to wait for the server to be ready")


class Perf(_Strict):
    concurrency: list[int] = Field(default_factory=lambda: [1])
    request_rate: Optional[float] = Field(None, gt=0)
    requests: Optional[int] = Field(16, ge=1, description="measured requests per run")
    duration_s: Optional[float] = Field(None, gt=0)
    warmup: int = Field(2, ge=0)
    max_tokens: int = Field(128, ge=1)
    baseline: bool = True
    timeout_s: float = Field(300.0, gt=0)
    seed: int = 0
    model: str = "generate"

    @field_validator("concurrency")
    @classmethod
    def _conc(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v) or len(set(v)) != len(v):
            raise ValueError("expected distinct positive integers, e.g. [1, 4]")
        return v


class Recipe(_Strict):
    name: Optional[str] = None
    target: str = Field(description="an HF model directory, or 'default' (the embedded SmolLM2-135M-Instruct)")
    draft: Draft
    mode: Optional[Literal["eagle", "draft-target"]] = None
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    tp: int = Field(1, ge=1)
    threads: Optional[int] = Field(None, ge=1, description="torch intra-op threads of the CPU stages")
    eagle: EagleOptions = Field(default_factory=EagleOptions)
    quantization: Optional[Quantization] = None
    build: Optional[Build] = None
    workloads: dict[str, str]
    profile: Profile = Field(default_factory=Profile)
    tune: Tune = Field(default_factory=Tune)
    triton: Optional[Triton] = None
    perf: Optional[Perf] = None

    @field_validator("quantization", mode="before")
    @classmethod
    def _none(cls, v: Any) -> Any:
        return None if v in ("none", False) else v

    @field_validator("draft", mode="before")
    @classmethod
    def _draft_shorthand(cls, v: Any) -> Any:
        return {"hf": v} if isinstance(v, str) else v  # `draft: /models/small` = an HF draft model

    @field_validator("workloads")
    @classmethod
    def _workloads(cls, v: dict[str, str]) -> dict[str, str]:
        import re

        if not v:
            raise ValueError("give at least one NAME: SOURCE (mt-bench, humaneval or a .jsonl/.csv path)")
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ValueError(f"workload name {name!r}: use letters, digits, '_', '.', '-'")
        return v

    @model_validator(mode="after")
    def _consistent(self):
        kind = "eagle" if self.draft.kind == "eagle" else "draft-target"
        if self.mode is None:
            self.mode = kind
        elif self.mode != kind:
            raise ValueError(f"mode {self.mode!r} does not match draft.{self.draft.kind} "
                             f"(an EAGLE head means mode eagle; an HF or derived draft means draft-target)")
        if self.perf is not None and self.triton is None:
            raise ValueError("perf needs a triton section (the repository it measures)")
        if self.perf is not None and not self.perf.concurrency and self.perf.request_rate is None:
            raise ValueError("perf: give concurrency or request_rate")
        return self

    # ---- derived facts the stages use ----

    @property
    def uses_default_target(self) -> bool:
        return self.target == DEFAULT_TARGET

    def workload_entries(self) -> list[str]:
        return [f"{n}={s}" for n, s in self.workloads.items()]


def _resolve(base: Path, value: str | None) -> str | None:
    if value is None or value in PACKAGED_WORKLOADS or value == DEFAULT_TARGET:
        return value
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p).resolve())


def resolve_paths(recipe: Recipe, base: Path) -> Recipe:
    """Every path field made absolute against `base` (the recipe file's directory)."""
    r = recipe.model_copy(deep=True)
    r.target = _resolve(base, r.target)
    r.draft.hf = _resolve(base, r.draft.hf)
    r.draft.eagle = _resolve(base, r.draft.eagle)
    r.workloads = {n: _resolve(base, s) for n, s in r.workloads.items()}
    if r.quantization is not None and r.quantization.calib is not None:
        r.quantization.calib = {n: _resolve(base, s) for n, s in r.quantization.calib.items()}
    if isinstance(r.quantization and r.quantization.report, QualityReport):
        rep = r.quantization.report
        rep.workloads = {n: _resolve(base, s) for n, s in rep.workloads.items()}
    if r.tune.cost not in COST_PRESETS:
        r.tune.cost = _resolve(base, r.tune.cost)
    return r


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
    loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and "[" in x))  # drop union member tags
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


def load_recipe(path: Path) -> Recipe:
    """Read, validate and resolve a recipe file; errors are one line naming the file and field."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TrtspecError(f"{path}: recipe file not found") from None
    except OSError as e:
        raise TrtspecError(f"{path}: cannot read the recipe ({e.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise TrtspecError(f"{path}: not valid YAML{at} ({getattr(e, 'problem', None) or e})") from None
    return resolve_paths(parse_recipe(data, str(path)), path.resolve().parent)
