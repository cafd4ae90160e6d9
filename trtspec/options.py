"""The base of every stage's options model, and how the CLI and recipe layers read one.

Each stage has ONE pydantic options model in its own package (`trtspec/<stage>/options.py`): it is
the recipe section (trtspec/recipe.py composes them), the argument of the stage's library entry and
the source of the CLI flags' defaults and help (`default`, `doc`). So a default is written once;
tests/test_cli_options.py checks that the Typer commands and the recipe agree with the models.

Errors: library errors name the field as `SECTION.field` (`profile.max_k: ...`, `tune.cost: ...`);
the CLI re-words them with the flag the user typed (`from_cli` for validation, `flag_context` for the
library call: `--max-k: ...`), and the recipe layer adds the file (recipe.explain) or the stage name
(pipeline runner: `stage tune failed: tune.cost: ...`). Light at import (pydantic only): `trtspec --help` reads
the defaults without importing torch.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticUndefined

from .errors import TrtspecError

M = TypeVar("M", bound="StageOptions")


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
    """Re-word a library error's leading `SECTION.field:` as the CLI flag the user typed.

        with flag_context("tune", {"cost": "--cost"}):
            tune_stage(...)   # "tune.cost: 'a100' is neither ..." -> "--cost: 'a100' is neither ..."

    Only the leading name is replaced; fields not in `flags` become `--field-name`."""

    def __init__(self, section: str, flags: dict[str, str] | None = None):
        self.prefix, self.flags = f"{section}.", flags or {}

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if type(err) is not TrtspecError:  # subclasses carry data callers catch them for (PerfRunError)
            return False
        text = str(err)
        head, sep, rest = text.partition(":")
        if not sep or not head.startswith(self.prefix) or " " in head:
            return False
        field = head[len(self.prefix):]
        raise TrtspecError(f"{self.flags.get(field) or flag_of(field)}:{rest}") from None
