"""trtspec.upstream.triton against the upstream templates we did not write.

When the reference copies of the v0.19.0 templates are present (/work/shared/reference/upstream-triton,
or $TRTSPEC_UPSTREAM_TRITON), the pinned 1.2 tables must equal the v0.19.0 template after exactly
the documented 1.x changes (renames, additions, the prompt-table dtype placeholder), tensor by
tensor (name, dtype, dims, reshape, optional, ragged) and parameter key by key. Without them the
cross-check is skipped; the self-consistency checks always run."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from trtspec.upstream import triton as f
from trtspec.triton_repo.configs import parse_text, tensor_of

REF = Path(os.environ.get("TRTSPEC_UPSTREAM_TRITON", "/work/shared/reference/upstream-triton")) / "v0.19.0" / "all_models"
STRUCTURAL = {"triton_backend": "tensorrtllm", "triton_max_batch_size": "64", "decoupled_mode": "true",
              "max_queue_delay_microseconds": "0", "max_queue_size": "0",
              "encoder_input_features_data_type": "TYPE_FP16", "logits_datatype": "TYPE_FP32"}
needs_ref = pytest.mark.skipif(not REF.is_dir(), reason=f"{REF} not present")


def _template(rel: str):
    text = (REF / rel).read_text()
    for k, v in STRUCTURAL.items():
        text = text.replace("${" + k + "}", v)
    return text, parse_text(text, rel)


def test_tables_are_self_consistent():
    names = [t.name for t in f.TENSORRT_LLM_INPUTS]
    assert len(names) == len(set(names)) == 62
    assert len({t.name for t in f.TENSORRT_LLM_OUTPUTS}) == len(f.TENSORRT_LLM_OUTPUTS) == 21
    assert [t.name for t in f.TENSORRT_LLM_INPUTS if not t.optional] == ["input_lengths", "request_output_len"]
    assert set(f.PARAM_KIND) == set(f.TENSORRT_LLM_PARAMETERS) and len(f.TENSORRT_LLM_PARAMETERS) == 46
    assert set(f.REQUIRED_PARAMETER_KEYS) <= set(f.TENSORRT_LLM_PARAMETERS)
    placeholders = {t.data_type for t in f.TENSORRT_LLM_INPUTS + f.TENSORRT_LLM_OUTPUTS if t.data_type.startswith("$")}
    assert placeholders == {f.LOGITS_DTYPE, f.ENCODER_FEATURES_DTYPE, f.PROMPT_TABLE_DTYPE}
    assert {p.strip("${}") for p in placeholders} <= set(f.STRUCTURAL_PLACEHOLDERS)


@needs_ref
def test_tensorrt_llm_tables_are_the_v0_19_template_plus_the_documented_1x_changes():
    text, cfg = _template("inflight_batcher_llm/tensorrt_llm/config.pbtxt")
    ref_in = [tensor_of(t) for t in cfg.input]
    ref_out = [tensor_of(t) for t in cfg.output]
    ren = f.RENAMED_SINCE_V0_19
    expect_in = [t._replace(name=ren.get(t.name, t.name)) for t in ref_in]
    ours = {t.name: t for t in f.TENSORRT_LLM_INPUTS}
    for t in expect_in:
        o = ours[t.name]
        if t.name in f.DTYPE_PLACEHOLDERS_ADDED_SINCE_V0_19:
            assert o.data_type == f.DTYPE_PLACEHOLDERS_ADDED_SINCE_V0_19[t.name] and t.data_type == "TYPE_FP16"
            o = o._replace(data_type=t.data_type)
        elif o.data_type.startswith("$"):
            o = o._replace(data_type=STRUCTURAL[o.data_type.strip("${}")])
        assert o == t, t.name
    assert [t.name for t in f.TENSORRT_LLM_INPUTS if t.name not in {x.name for x in expect_in}] == \
        list(f.INPUTS_ADDED_SINCE_V0_19)
    # same order as the template, the additions where the 1.x template puts them (after return_perf_metrics)
    order = [t.name for t in f.TENSORRT_LLM_INPUTS if t.name not in f.INPUTS_ADDED_SINCE_V0_19]
    assert order == [t.name for t in expect_in]
    ours_out = [t._replace(data_type=STRUCTURAL[t.data_type.strip("${}")]) if t.data_type.startswith("$") else t
                for t in f.TENSORRT_LLM_OUTPUTS]
    assert ours_out == ref_out + [t for t in ours_out if t.name in f.OUTPUTS_ADDED_SINCE_V0_19]
    assert [t.name for t in ours_out[len(ref_out):]] == list(f.OUTPUTS_ADDED_SINCE_V0_19)
    keys = list(cfg.parameters.keys())
    assert sorted(keys + list(f.PARAMETERS_ADDED_SINCE_V0_19)) == sorted(f.TENSORRT_LLM_PARAMETERS)
    commented = re.findall(r'^#\s*key:\s*"(\w+)"', text, re.M)
    assert commented == list(f.PARAMETERS_ADDED_SINCE_V0_19)
    assert cfg.parameters["executor_worker_path"].string_value == f.EXECUTOR_WORKER_PATH
    assert cfg.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"


@needs_ref
def test_llmapi_tables_match_the_template():
    _, cfg = _template("llmapi/tensorrt_llm/config.pbtxt")
    ren = f.LLMAPI_RENAMED_SINCE_V0_19
    assert [tensor_of(t)._replace(name=ren.get(t.name, t.name)) for t in cfg.input] == list(f.LLMAPI_INPUTS)
    assert [tensor_of(t) for t in cfg.output] == list(f.LLMAPI_OUTPUTS)
    assert cfg.backend == "python" and cfg.max_batch_size == 0


@needs_ref
def test_our_preprocessing_and_postprocessing_use_upstream_names_and_types():
    from trtspec.triton_repo import contracts as c

    for rel, ours_in, ours_out in (("inflight_batcher_llm/preprocessing/config.pbtxt", c.PRE_INPUTS, c.PRE_OUTPUTS),
                                   ("inflight_batcher_llm/postprocessing/config.pbtxt", c.POST_INPUTS, c.POST_OUTPUTS)):
        text = (REF / rel).read_text().replace("${triton_max_batch_size}", "8")
        text = re.sub(r"\$\{\w+\}", "1", text)
        cfg = parse_text(text, rel)
        for ours, theirs in ((ours_in, cfg.input), (ours_out, cfg.output)):
            up = {t.name: tensor_of(t) for t in theirs}
            for t in ours:
                if t.name == "REQUEST_OUTPUT_LEN" and ours is ours_out:
                    assert up[t.name].dims == (-1,)  # upstream's pass-through output; ours is [1] like the input
                    continue
                assert (up[t.name].data_type, up[t.name].dims, up[t.name].optional) == \
                    (t.data_type, t.dims, t.optional), t.name


def test_llmapi_sampling_inputs_are_ones_the_1x_helpers_read():
    """Every sampling_param_* scalar our llmapi config.pbtxt declares is one the 1.x helpers.py turns into a
    SamplingParams argument (upstream.triton LLMAPI_SAMPLING_PARAM_ARGS): v0.19's beam_width is not."""
    scalars = {t.name for t in f.LLMAPI_INPUTS if t.name.startswith("sampling_param_")} - {"sampling_param_stop"}
    assert scalars <= {f"sampling_param_{a}" for a in f.LLMAPI_SAMPLING_PARAM_ARGS}
    assert "sampling_param_best_of" in scalars and "sampling_param_beam_width" not in scalars
