"""Check 3 of `trtspec triton --check` (validate.py's docstring lists the checks): each model that
stands for TensorRT-LLM (`tensorrt_llm*` on the C++ backend, cpu-flavor `tensorrt_llm*`, llmapi
models) against its pinned template.

Apart from validate.py because each check here reads one model's config against upstream.triton's
templates and nothing else, while validate.py walks the repository and checks its models against
each other (calls, routing, limits). Each function returns its problems as lines naming the
model's config.pbtxt (`where`) and the field.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from .configs import params, tensor_of
from .models.serving_rules import parse_braces
from ..upstream.triton import (BATCHING_TYPES, BOOL_STRINGS, DECODING_MODES, LLMAPI_INPUTS, LLMAPI_KV_CACHE_CONFIG,
                               LLMAPI_KV_CACHE_FIELDS, LLMAPI_OUTPUTS, LLMAPI_SPEC_FIELDS, PARAM_KIND,
                               SCHEDULER_POLICIES, TENSORRT_LLM_INPUTS, TENSORRT_LLM_OUTPUTS, TENSORRT_LLM_PARAMETERS,
                               Tensor)


def _same(a: Tensor, b: Tensor, *, ragged: bool = True) -> bool:
    if not ragged:
        a, b = a._replace(ragged=False), b._replace(ragged=False)
    return a == b


def _filled(t: Tensor, actual: Tensor) -> bool:
    """Template tensor (possibly with a ${...} dtype) vs a parsed one: a placeholder matches any dtype."""
    if t.data_type.startswith("$"):
        t = t._replace(data_type=actual.data_type)
    return _same(t, actual)


def check_tensorrtllm(cfg, where: str) -> list[str]:
    probs = []
    got_in = [tensor_of(t) for t in cfg.input]
    got_out = [tensor_of(t) for t in cfg.output]
    for label, want, got in (("input", TENSORRT_LLM_INPUTS, got_in), ("output", TENSORRT_LLM_OUTPUTS, got_out)):
        by = {t.name: t for t in got}
        for t in want:
            if t.name not in by:
                probs.append(f"{where}: {label} '{t.name}' of the pinned tensorrt_llm template is missing")
            elif not _filled(t, by[t.name]):
                probs.append(f"{where}: {label} '{t.name}' is {by[t.name]}, the pinned template has {t}")
        extra = sorted(set(by) - {t.name for t in want})
        if extra:
            probs.append(f"{where}: {label} '{extra[0]}' is not in the pinned tensorrt_llm template")
    logits = {t.data_type for t in got_out if t.name in ("context_logits", "generation_logits")}
    logits |= {t.data_type for t in got_in if t.name == "draft_logits"}
    if len(logits) > 1:
        probs.append(f"{where}: context_logits / generation_logits / draft_logits disagree on the logits data type")
    p = params(cfg)
    missing = [k for k in TENSORRT_LLM_PARAMETERS if k not in p]
    if missing:
        probs.append(f"{where}: parameter '{missing[0]}' of the pinned template is missing")
    extra = sorted(set(p) - set(TENSORRT_LLM_PARAMETERS))
    if extra:
        probs.append(f"{where}: parameter '{extra[0]}' is not a key of the pinned template")
    for k, v in p.items():
        err = _param_problem(PARAM_KIND.get(k, "str"), v)
        if err:
            probs.append(f"{where}: parameter {k} = {v!r}: {err}")
    if cfg.backend != "tensorrtllm":
        probs.append(f"{where}: backend '{cfg.backend}', expected 'tensorrtllm'")
    return probs


MISSING_DIR = "directory not found"  # every --check problem of a path the repository names ends so (serve.check_servable)


def _param_problem(kind: str, v: str) -> str | None:
    if kind == "batching":
        return None if v in BATCHING_TYPES else f"expected one of {', '.join(BATCHING_TYPES)}"
    if kind == "path":
        return None if v and Path(v).is_dir() else MISSING_DIR
    if v == "":
        return None  # the backend's documented "unset" for every other kind
    if kind == "int":
        return None if re.fullmatch(r"-?\d+", v) else "expected an integer"
    if kind == "bool":
        return None if v in BOOL_STRINGS else f"expected one of {', '.join(BOOL_STRINGS)}"
    if kind == "fraction":
        try:
            return None if 0.0 <= float(v) <= 1.0 else "expected a number in [0, 1]"
        except ValueError:
            return "expected a number"
    if kind == "policy":
        return None if v in SCHEDULER_POLICIES else f"expected one of {', '.join(SCHEDULER_POLICIES)}"
    if kind == "decoding_mode":
        return None if v in DECODING_MODES else f"expected one of {', '.join(DECODING_MODES)}"
    if kind == "choices":
        try:
            parse_braces(v)
            return None
        except ValueError as e:
            return str(e)
    if kind in ("id_lists", "int_list"):
        return None if re.fullmatch(r"\d+(\s*,\s*\d+)*(\s*;\s*\d+(\s*,\s*\d+)*)*", v) else "expected '0,1' or '0,1;2,3'"
    if kind == "optional_path":
        return None if Path(v).exists() else "path not found"
    if kind == "guided_backend":
        return None if v == "xgrammar" else "expected 'xgrammar' or empty"
    return None


def check_subset(cfg, where: str) -> list[str]:
    probs = []
    for label, table, msgs in (("input", TENSORRT_LLM_INPUTS, cfg.input), ("output", TENSORRT_LLM_OUTPUTS, cfg.output)):
        by = {t.name: t for t in table}
        for m in msgs:
            t = tensor_of(m)
            if t.name not in by:
                probs.append(f"{where}: {label} '{t.name}' is not a tensorrt_llm tensor")
            elif not _filled(by[t.name], t):
                probs.append(f"{where}: {label} '{t.name}' is {t}, tensorrt_llm has {by[t.name]}")
    choices = params(cfg).get("eagle_choices", "")
    if choices:
        try:
            parse_braces(choices)
        except ValueError as e:
            probs.append(f"{where}: parameter eagle_choices: {e}")
    return probs


def check_llmapi(cfg, where: str, model_dir: Path) -> list[str]:
    probs = []
    got_in, got_out = [tensor_of(t) for t in cfg.input], [tensor_of(t) for t in cfg.output]
    if got_in != list(LLMAPI_INPUTS) or got_out != list(LLMAPI_OUTPUTS):
        probs.append(f"{where}: inputs/outputs differ from the llmapi template")
    y = model_dir / "1" / "model.yaml"
    if not y.is_file():
        probs.append(f"{y}: missing")
    else:
        try:
            data = yaml.safe_load(y.read_text())
        except yaml.YAMLError as e:
            return probs + [f"{y}: not valid YAML ({e})"]
        if not isinstance(data, dict) or "model" not in data:
            probs.append(f"{y}: expected a mapping with 'model'")
        else:
            spec = data.get("speculative_config")
            if spec is not None and not (isinstance(spec, dict) and isinstance(spec.get("max_draft_len"), int)):
                probs.append(f"{y}: speculative_config.max_draft_len must be an integer")
            tc = data.get("triton_config") or {}
            if bool(tc.get("decoupled")) != bool(cfg.model_transaction_policy.decoupled):
                probs.append(f"{y}: triton_config.decoupled disagrees with config.pbtxt")
            probs += _unknown_llmapi_keys(data, y)
    return probs


def _unknown_llmapi_keys(data: dict, y: Path) -> list[str]:
    """Keys TensorRT-LLM 1.2's LLM API would refuse at model load (its configs forbid extra fields),
    in the sections whose every field upstream.triton lists: speculative_config (per decoding type)
    and kv_cache_config. The top level takes every LLM() argument (a user may add max_num_tokens,
    say) and model.py pops triton_config, so neither is checked here."""
    spec = data.get("speculative_config")
    kind = spec.get("decoding_type") if isinstance(spec, dict) else None
    if isinstance(spec, dict) and kind not in LLMAPI_SPEC_FIELDS:
        return [f"{y}: speculative_config.decoding_type {kind!r} is not one of {', '.join(LLMAPI_SPEC_FIELDS)}"]
    sections = (("speculative_config.", spec, LLMAPI_SPEC_FIELDS.get(kind, ())),
                (f"{LLMAPI_KV_CACHE_CONFIG}.", data.get(LLMAPI_KV_CACHE_CONFIG), LLMAPI_KV_CACHE_FIELDS))
    return [f"{y}: {prefix}{k} is not a TensorRT-LLM 1.2 LLM API field" for prefix, section, known in sections
            if isinstance(section, dict) for k in section if k not in known]
