"""trtspec.upstream.sampling is consistent with itself and with the other upstream tables.

These are facts read from TensorRT-LLM's source, not behaviour we can run here, so the checks are
about coherence: every path names a defined rule, a profile mode and a flavor that exist, every
request field is a real input of the model it is sent to, and every default lies in its range."""

from __future__ import annotations

import math

from trtspec.triton_repo.flavors import FLAVORS
from trtspec.tuning.schema import Profile
from trtspec.upstream import sampling as s
from trtspec.upstream import triton

RULE_NAMES = {r.name for r in s.ACCEPT_RULES}


def _input_names(tensors) -> set[str]:
    return {t.name for t in tensors}


def test_rules_are_distinct_and_sourced():
    assert len(RULE_NAMES) == len(s.ACCEPT_RULES)
    assert all(r.source and r.p_accept for r in s.ACCEPT_RULES)
    # Only the rules that emit the target's own sample (or the rejection residual) are lossless.
    assert {r.name for r in s.ACCEPT_RULES if r.lossless} == {s.EXACT_MATCH.name, s.REJECTION.name}


def test_every_path_uses_a_defined_rule_mode_and_flavor():
    modes = set(Profile.model_fields["mode"].annotation.__args__)
    assert len({p.path for p in s.PATH_RULES}) == len(s.PATH_RULES)
    for p in s.PATH_RULES:
        assert p.rule in RULE_NAMES, p.path
        assert p.mode in modes, p.path
        assert p.flavor is None or p.flavor in FLAVORS, p.path
    # Every rule is reached by some path, and through Triton an EAGLE engine is greedy.
    assert {p.rule for p in s.PATH_RULES} == RULE_NAMES
    eagle_triton = [p for p in s.PATH_RULES if p.flavor == "trtllm" and p.mode == "eagle"]
    assert [p.rule for p in eagle_triton] == [s.GREEDY.name]


def test_typical_acceptance_defaults_are_in_range():
    lo, hi = s.TYPICAL_POSTERIOR_THRESHOLD_RANGE
    eps = s.TYPICAL_DEFAULT_POSTERIOR_THRESHOLD
    assert lo <= eps < hi
    alpha = eps ** s.TYPICAL_ALPHA_EXPONENT
    assert math.isclose(alpha, 0.3)  # the default pair (eps, alpha) = (0.09, 0.3)
    assert 0 < s.TYPICAL_ARGMAX_BELOW_TEMPERATURE < 1e-3
    assert s.EAGLE_GREEDY_SAMPLING_DEFAULT is True and s.EAGLE_TRITON_PARAMETERS == ("eagle_choices",)
    assert set(s.EAGLE_TRITON_PARAMETERS) <= set(triton.TENSORRT_LLM_PARAMETERS)
    assert not set(s.EAGLE_TYPICAL_FIELDS) & set(triton.TENSORRT_LLM_PARAMETERS)


def test_draft_logits_facts_match_the_tensorrt_llm_inputs():
    inputs = {t.name: t for t in triton.TENSORRT_LLM_INPUTS}
    assert inputs[s.DRAFT_LOGITS_INPUT].data_type == triton.LOGITS_DTYPE
    assert inputs[s.DRAFT_LOGITS_INPUT].dims == (-1, -1)
    assert s.DRAFT_TOKENS_INPUT in inputs and s.DRAFT_ACCEPTANCE_THRESHOLD_INPUT in inputs
    assert s.DRAFT_LOGITS_REQUEST_FLAG in inputs
    lo, hi = s.DRAFT_ACCEPTANCE_THRESHOLD_RANGE
    assert 0 == lo < hi == 1
    assert s.DRAFT_LOGITS_BUILD_FLAG.startswith("--")


def test_sampling_settings_go_to_real_inputs():
    fields = {"temperature", "top_k", "top_p", "seed"}
    for table in (s.TRTLLM_SAMPLING_INPUTS, s.BLS_SAMPLING_INPUTS, s.LLMAPI_SAMPLING_INPUTS):
        assert set(table) == fields
    assert set(s.TRTLLM_SAMPLING_INPUTS.values()) <= _input_names(triton.TENSORRT_LLM_INPUTS)
    assert set(s.LLMAPI_SAMPLING_INPUTS.values()) <= _input_names(triton.LLMAPI_INPUTS)
    assert s.LLMAPI_ADVANCED_SAMPLING_DEFAULT is False


def test_penalties_are_tensorrt_llm_inputs_and_the_llmapi_model_lacks_what_generate_refuses_there():
    from trtspec.triton_repo.models import serving_rules

    assert set(s.PENALTY_OFF) <= _input_names(triton.TENSORRT_LLM_INPUTS)
    llmapi = _input_names(triton.LLMAPI_INPUTS)
    assert {"sampling_param_presence_penalty", "sampling_param_frequency_penalty"} <= llmapi
    for name, unset in serving_rules.LLMAPI_REFUSED.items():  # the models' own copy of the facts
        assert f"sampling_param_{name}" not in llmapi and name not in llmapi
        assert unset == s.PENALTY_OFF.get(name)  # a penalty's off value; end_id: none passes


def test_end_id_none_is_the_serving_rules_no_stop():
    """TensorRT-LLM's end_id -1 runs a request to its length; the cpu flavor's stop rule agrees."""
    from trtspec.triton_repo.models import serving_rules

    assert serving_rules.stop_ids(s.END_ID_NONE, (2,)) == ()
