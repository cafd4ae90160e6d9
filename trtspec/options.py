"""The base of every stage's options model, and how the CLI and recipe layers read one.

Each stage has ONE pydantic options model in its own package (`trtspec/<stage>/options.py`): it is
the recipe section (trtspec/recipe.py composes them), the argument of the stage's library entry and
the source of the CLI flags' defaults and help (`default`, `doc`). So a default is written once;
tests/test_cli_options.py checks that the Typer commands and the recipe agree with the models.

Errors: library errors name the field as `SECTION.field` (`profile.max_k: ...`, `tune.cost: ...`), or
a library argument that is no options field by its Python name (`until: ...`, `` `draft_ckpt` `` inside
a message); the CLI re-words them with the flag the user typed (`from_cli` for validation,
`flag_context` for the library call: `--max-k: ...`), and the recipe layer adds the file
(recipe.explain) or the stage name (pipeline runner: `stage tune failed: tune.cost: ...`). Light at import (pydantic only): `trtspec --help` reads
the defaults without importing torch.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticUndefined

from .errors import TrtspecError
from .upstream.sampling import SEED_LIMIT

M = TypeVar("M", bound="StageOptions")
# One torch device as text, for options checked without importing torch (quantization.device,
# triton.device): cpu, cuda (the current GPU) or cuda:N (group 2: N).
ONE_DEVICE = re.compile(r"cpu|cuda(:(\d+))?")


class StageOptions(BaseModel):
    """A stage's options: unknown keys are errors (a misspelt recipe key must not fall back silently)."""
    model_config = ConfigDict(extra="forbid")
    section: ClassVar[str] = "options"  # the recipe section / error prefix, e.g. "profile"


def field_path(loc: tuple) -> tuple:
    """A validation error's location without pydantic's union member tags (`QualityReportOptions`,
    `bool`, `function-after[...]`), which are types, not keys a user writes."""
    def tag(x) -> bool:
        return isinstance(x, str) and ("[" in x or x[:1].isupper() or x in ("bool", "int", "float", "str"))
    return tuple(x for x in loc if not tag(x))


def first_problem(e: ValidationError) -> tuple[str, str]:
    """(dotted field, message) of a validation error's first problem."""
    err = e.errors()[0]
    return ".".join(str(x) for x in field_path(err["loc"])), err["msg"].removeprefix("Value error, ")


def flag_of(field: str) -> str:
    return "--" + field.replace("_", "-")


def from_cli(cls: type[M], flags: dict[str, str] | None = None, **values: Any) -> M:
    """The options of a CLI invocation; a bad value is reported with the flag (`--max-k: ...`).

    flags: {field: flag} where the flag is not `--field-name` (e.g. {"samples": "--calib-samples"});
    a nested field is looked up dotted first ("report.samples"), then by its top-level name."""
    try:
        return cls.model_validate(values)
    except ValidationError as e:
        field, msg = first_problem(e)
        top, flags = field.split(".")[0], flags or {}
        flag = flags.get(field) or flags.get(top) or flag_of(top)
        raise TrtspecError(f"{flag}: {msg}" if field else msg) from None


def default(cls: type[BaseModel], name: str) -> Any:
    """A field's default (calling its factory), for a Typer option's default."""
    f = cls.model_fields[name]
    if f.default_factory is not None:
        return f.default_factory()
    if f.default is PydanticUndefined:
        raise KeyError(f"{cls.__name__}.{name} has no default")
    return f.default


def doc(cls: type[BaseModel], name: str) -> str:
    """A field's description: the CLI help text and the recipe documentation."""
    return cls.model_fields[name].description or ""


class flag_context:
    """Re-word a library error's field names as the CLI flags the user typed.

        with flag_context(TuneOptions):
            tune_stage(...)   # "tune.cost: 'a100' is neither ..." -> "--cost: 'a100' is neither ..."

    section: a StageOptions class (or its section name). A leading `SECTION.field:` becomes the flag
    (`flags[field]`, else `--field-name`); `SECTION.field` later in the message is re-worded too when
    the field is the class's or in `flags` (so `build.sh` in a path is left alone). params: {Python
    parameter name: flag} for library arguments that are not options fields (`until` -> `--until`); a
    leading `name:` is re-worded, and later mentions written in backticks (`` `draft_ckpt` ``)."""

    def __init__(self, section: str | type[StageOptions] | None, flags: dict[str, str] | None = None,
                 params: dict[str, str] | None = None):
        known = set(section.model_fields) if isinstance(section, type) else set()
        self.section = section.section if isinstance(section, type) else section
        self.flags, self.params = flags or {}, params or {}
        self.known = known | set(self.flags)

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if type(err) is not TrtspecError:  # subclasses carry data callers catch them for (PerfRunError)
            return False
        text = self.reword(str(err))
        if text == str(err):
            return False
        raise TrtspecError(text) from None

    def reword(self, text: str) -> str:
        head, sep, rest = text.partition(":")
        flag = self._head_flag(head) if sep and " " not in head else None
        return f"{flag}:{self._body(rest)}" if flag else self._body(text)

    def _head_flag(self, head: str) -> str | None:
        if self.section and head.startswith(self.section + "."):
            field = head[len(self.section) + 1:]
            return self.flags.get(field) or flag_of(field)
        return self.params.get(head)

    def _body(self, text: str) -> str:
        if self.section:
            def field(m: re.Match) -> str:
                name = m.group(1)
                if name in self.flags:
                    return self.flags[name]
                return flag_of(name) if name in self.known else m.group(0)
            text = re.sub(rf"(?<![\w./-]){re.escape(self.section)}\.([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)",
                          field, text)
        for name, flag in self.params.items():
            text = text.replace(f"`{name}`", flag)
        return text


class Sampling(StageOptions):
    """How a request is sampled: the same four settings everywhere (a workload's `sampling:`, the
    `--temperature/--top-k/--top-p/--seed` flags of generate and profile, a Triton request's inputs,
    the runtime's accept rules). temperature 0 (or top_k 1) is greedy decoding.

    Order, as in transformers' warpers and TensorRT-LLM's sampling layers: logits / temperature,
    then keep the top_k most likely (0 = all), then the smallest set whose probability reaches top_p
    (1.0 = all). `seed` makes a request reproducible: every random draw is keyed by (seed, output
    position), see trtspec/runtime/sampling.py."""
    section = "sampling"
    temperature: float = Field(0.0, ge=0.0, le=100.0, allow_inf_nan=False,
                               description="Sampling temperature; 0 is greedy.")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens (0 = no limit).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False,
                         description="Keep the smallest set of tokens whose probability reaches top_p.")
    seed: int = Field(0, ge=0, lt=SEED_LIMIT, description="Seed of the request's random draws (uint64, as "
                      "TensorRT-LLM's).")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    def label(self) -> str:
        """Short text for tables and plots: `T=0.7 top_p=0.9`, or `greedy`."""
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        parts += [f"top_k={self.top_k}"] if self.top_k else []
        parts += [f"top_p={self.top_p:g}"] if self.top_p < 1.0 else []
        return " ".join(parts)


GREEDY_SAMPLING = Sampling()
