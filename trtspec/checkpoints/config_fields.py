"""Typed reads of one config.json object (HF or TRT-LLM), each error naming the file and the field.

Every field trtspec reads from a model config goes through `ConfigFields`, so that a wrong type or
range (`rms_norm_eps: "tiny"`, `hidden_size: 64.9`, `max_position_embeddings: [256]`) is refused
here, as `PATH/config.json: rms_norm_eps: expected a positive number, got 'tiny'`, instead of being
truncated by `int()` or surfacing later as a tensor-shape error or a traceback deep inside torch.
A JSON null counts as absent (HF writes `"head_dim": null`), so an optional field takes its default.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, NoReturn

from ..errors import TrtspecError
from ..upstream.transformers import HF_UNSCALED_ROPE_TYPE

_REQUIRED = object()
_JSON_KINDS = {list: "list", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
# The numeric parameters each RoPE scaling type needs (HF `rope_scaling` / TRT-LLM `rotary_scaling`).
ROPE_SCALING_FIELDS = {"linear": ("factor",),
                       "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                                  "original_max_position_embeddings")}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class ConfigFields:
    """One config object; `where` is the file (`.../config.json`), `prefix` a nested block's path."""

    def __init__(self, cfg: Any, where: str | Path, prefix: str = ""):
        if not isinstance(cfg, dict):
            kind = _JSON_KINDS.get(type(cfg), type(cfg).__name__)
            raise TrtspecError(f"{where}: {prefix.rstrip('.') or 'config'}: expected a JSON object, got a JSON {kind}")
        self.cfg, self.where, self.prefix = cfg, str(where), prefix

    def fail(self, key: str, expected: str, got: Any) -> NoReturn:
        raise TrtspecError(f"{self.where}: {self.prefix}{key}: expected {expected}, got {got!r}")

    def _value(self, key: str, default: Any) -> Any:
        """The raw value, or `_REQUIRED`-checked absence (None and missing are the same)."""
        value = self.cfg.get(key)
        if value is None and default is _REQUIRED:
            raise TrtspecError(f"{self.where}: missing field '{self.prefix}{key}'")
        return value

    def _checked(self, key: str, default: Any, ok: Callable[[Any], bool], expected: str) -> Any:
        value = self._value(key, default)
        if value is None:
            return default
        if not ok(value):
            self.fail(key, expected, value)
        return value

    def int(self, key: str, default: Any = _REQUIRED, minimum: int = 1, expected: str | None = None) -> Any:
        """An integer >= `minimum`; an integral float (64.0) is accepted, 64.9 is refused, not truncated.
        `expected` words the error's "expected ..." when the field's meaning says more than its type."""
        value = self._checked(key, default, lambda v: _is_number(v) and v == int(v) and v >= minimum,
                              expected or ("a positive integer" if minimum == 1 else f"an integer >= {minimum}"))
        return value if value is default else int(value)

    def number(self, key: str, default: Any = _REQUIRED) -> Any:
        """A finite number > 0 (epsilons, RoPE bases and factors are all strictly positive)."""
        value = self._checked(key, default, lambda v: _is_number(v) and v > 0, "a positive number")
        return value if value is default else float(value)

    def flag(self, key: str, default: bool) -> bool:
        return self._checked(key, default, lambda v: isinstance(v, bool), "true or false")

    def text(self, key: str, default: Any = _REQUIRED) -> Any:
        return self._checked(key, default, lambda v: isinstance(v, str), "a string")

    def choice(self, key: str, allowed, default: Any = _REQUIRED) -> Any:
        """A string among `allowed` (the values a reader has a meaning for)."""
        return self._checked(key, default, lambda v: isinstance(v, str) and v in allowed,
                             "one of " + ", ".join(allowed))

    def rope_scaling(self, key: str) -> dict | None:
        """The RoPE scaling block: null, or an object whose type names its numeric parameters. Type
        "default" (transformers' unscaled RoPE) reads as null, which every TensorRT-LLM version takes
        as unscaled; older ones refuse the name (upstream.trtllm.ROTARY_SCALING_TYPES)."""
        value = self._value(key, None)
        if not value:
            return None
        if not isinstance(value, dict):
            self.fail(key, 'an object such as {"rope_type": "linear", "factor": 2.0} or null', value)
        inner = ConfigFields(value, self.where, f"{self.prefix}{key}.")
        kind = inner.text("rope_type", None) or inner.text("type", None)
        for name in ROPE_SCALING_FIELDS.get(kind or "default", ()):
            inner.number(name)
        return None if kind == HF_UNSCALED_ROPE_TYPE else value

    def head_counts(self, hidden: int, heads: int, kv_heads: int, explicit_head_size: bool) -> None:
        """Head counts that make a decoder: named by field here, not as a tensor shape later."""
        if heads % kv_heads:
            raise TrtspecError(f"{self.where}: {self.prefix}num_key_value_heads: {kv_heads} does not divide "
                               f"num_attention_heads={heads} (each KV head serves a whole group of query heads)")
        if not explicit_head_size and hidden % heads:
            raise TrtspecError(f"{self.where}: {self.prefix}hidden_size: {hidden} is not divisible by "
                               f"num_attention_heads={heads} (and no head size is given)")
