"""Reading our versioned JSON files (profile.json, tuning.json, results.json) into pydantic models.

One place for the rule every loader follows: the `schema` field must name the exact version this
code reads (a newer or foreign file is refused rather than half-understood), and a validation
error becomes one line naming the file and the first offending field.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from .errors import TrtspecError
from .fsutil import read_json

M = TypeVar("M", bound=BaseModel)


def pydantic_error(path: Path | str, e: ValidationError) -> TrtspecError:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return TrtspecError(f"{path}: {'field ' + repr(loc) + ': ' if loc else ''}{msg}")


def load_versioned(path: Path | str, model: type[M], schema_id: str, what: str,
                   retired: dict[str, str] | None = None) -> M:
    """retired: {an earlier schema id: why its files are not read}, said in the error."""
    path = Path(path)
    data = read_json(path, what)
    if isinstance(data, dict) and data.get("schema") != schema_id:
        why = (retired or {}).get(data.get("schema"))
        raise TrtspecError(f"{path}: field 'schema' is {data.get('schema')!r}; expected {schema_id!r}"
                           + (f" ({why})" if why else ""))
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise pydantic_error(path, e) from None
