"""Sampling in a repository: a served request's settings (cpu flavor), and each route's accept rule.

The cpu models (`tensorrt_llm*` on trtspec.runtime, `spec_decode` with engine trtspec.runtime)
take tensorrt_llm's request tensors (`temperature`, `runtime_top_k`, `runtime_top_p`, `seed`:
upstream.sampling.TRTLLM_SAMPLING_INPUTS) and turn them into the one sampling model,
trtspec.options.Sampling, whose bounds are the only ones checked. A bad value is the request's
fault: a TrtspecError naming the input (the models send it to the client as a one-line error).
Absent inputs keep Sampling's defaults (temperature 0: greedy; seed 0).

`route_sampling` says which accept rule a generated repository's route runs at temperature > 0
(written to trtspec-repo.json's `sampling` and the README).
"""

from __future__ import annotations

from pydantic import ValidationError

from ..errors import TrtspecError
from ..options import Sampling, first_problem
from .flavors import PYTORCH, canonical
from ..upstream.sampling import (BLS_SAMPLING_INPUTS, EXACT_MATCH, EXACT_MATCH_RESAMPLE, GREEDY, PATH_RULES,
                                PENALTY_OFF, REJECTION, TRTLLM_SAMPLING_INPUTS)


def input_name(field: str) -> str:
    """How a Sampling field is named to the client: the tensorrt_llm input, and the front model's
    name where it differs (`runtime_top_k (top_k)`), since requests usually come through generate."""
    trt, front = TRTLLM_SAMPLING_INPUTS[field], BLS_SAMPLING_INPUTS[field]
    return trt if trt == front else f"{trt} ({front})"


def request_sampling(get, engine_reading=None) -> Sampling:
    """Sampling from `get(tensorrt_llm input name) -> value or None`; errors name the input. The
    runtime applies no penalties: one set to anything but off is refused, not ignored.
    engine_reading: (top_k, top_p) -> the pair as the engines sample with it (the models pass
    serving_rules.engine_top_k_top_p; this module does not import the models it serves)."""
    for name, off in PENALTY_OFF.items():
        value = get(name)
        if value is not None and float(value) != off:
            raise TrtspecError(f"{name}: {float(value):g}; trtspec.runtime (the cpu flavor) applies no penalties, "
                               f"leave it unset or {off:g} (TensorRT-LLM's engines apply it: the trtllm flavor)")
    given = {}
    for field, name in TRTLLM_SAMPLING_INPUTS.items():
        value = get(name)
        if value is not None:
            given[field] = value.item() if hasattr(value, "item") else value
    if engine_reading is not None and "top_p" in given:  # top_p 0: greedy, or top-k alone
        given["top_k"], given["top_p"] = engine_reading(given.get("top_k", 0), given["top_p"])
    try:
        return Sampling.model_validate(given)
    except ValidationError as e:
        field, msg = first_problem(e)
        got = given.get(field)
        raise TrtspecError(f"{input_name(field) if field in TRTLLM_SAMPLING_INPUTS else field}: {msg} "
                           f"(got {got!r})") from None


# ---- which rule a repository's route runs at temperature > 0 (manifest + README) -----------------

def route_sampling(flavor: str, mode: str, draft_logits: bool = False, cpu_rule: str | None = None) -> dict:
    """The accept rule a repository's speculative route runs at temperature > 0 and the upstream
    deployment path it is (upstream.sampling.PATH_RULES), for the manifest's `sampling` entry.
    cpu_rule: the cpu flavor's spec_decode `accept_rule` (draft-target). serving_rules states the
    same per model; this is the repository-level summary the README prints."""
    flavor = canonical(flavor)
    if flavor == "llmapi" and mode == "eagle3":
        path = "llmapi-eagle3-one-model"
    elif mode == "eagle":  # trtllm engines or the cpu flavor (the PyTorch backend has no EAGLE-1: repo.py)
        path = "engine-eagle-triton"
    elif flavor == "trtllm":
        path = "engine-draft-target-logits" if draft_logits else "engine-draft-target"
    elif flavor == "llmapi":
        path = "llmapi-two-model"
    else:
        path = {EXACT_MATCH.name: "llmapi-two-model", EXACT_MATCH_RESAMPLE.name: "engine-draft-target",
                REJECTION.name: "engine-draft-target-logits"}[cpu_rule or EXACT_MATCH.name]
    rule = next(r for r in PATH_RULES if r.path == path)
    accept = (cpu_rule or rule.rule) if flavor == PYTORCH and mode == "draft-target" else rule.rule
    return {"accept_rule": accept, "path": path, "condition": rule.condition, "draft": rule.draft,
            "draft_logits": bool(draft_logits), "sampling_fallback": GREEDY.name if accept == GREEDY.name else None}


def tuned_rule(tuning) -> str | None:
    """The accept rule tuning.json says it assumed (per workload `accept_rule`, or top-level), if
    one rule for all workloads; None when absent (a greedy tuning) or when workloads disagree."""
    rules = {getattr(w, "accept_rule", None) for w in tuning.workloads.values()}
    rules |= {getattr(tuning, "accept_rule", None)}
    rules.discard(None)
    return rules.pop() if len(rules) == 1 else None
