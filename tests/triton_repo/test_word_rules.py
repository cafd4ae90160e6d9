"""generate's stopping-rule inputs: upstream's names and types, the [2, N] word-list format, refusals.

Oracles: the v0.19.0 ensemble template (reference data) for bad_words / stop_words / return_log_probs,
and TensorRT-LLM 1.x's ensemble (triton_backend @2a9abd95) for min_tokens (v0.19.0 calls it
min_length); upstream preprocessing's `_to_word_list_format` for the layout, written out by hand
below (ids then cumulative offsets, padded with 0 and -1 to the batch's longest, at least 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trtspec.triton_repo import contracts as c
from trtspec.triton_repo.models.serving_rules import RequestError
from trtspec.triton_repo.models.word_rules import (check_llmapi_words, check_log_probs, ends_with_any,
                                                   parse_word_list, word_list_format)

ENSEMBLE = Path("/work/shared/reference/upstream-triton/v0.19.0/all_models/inflight_batcher_llm/ensemble/config.pbtxt")


def test_generate_declares_upstreams_stopping_inputs_as_optional():
    by = {t.name: t for t in c.GENERATE_INPUTS}
    want = {"stop_words": ("TYPE_STRING", (-1,)), "bad_words": ("TYPE_STRING", (-1,)),
            "min_tokens": ("TYPE_INT32", (1,)), "min_length": ("TYPE_INT32", (1,)),
            "return_log_probs": ("TYPE_BOOL", (1,))}
    for name, (dtype, dims) in want.items():
        assert (by[name].data_type, by[name].dims, by[name].optional) == (dtype, dims, True), name


@pytest.mark.skipif(not ENSEMBLE.is_file(), reason="reference templates not present")
def test_the_names_and_types_are_the_ensembles():
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    text = ENSEMBLE.read_text().replace("${triton_max_batch_size}", "1").replace("${logits_datatype}", "TYPE_FP32")
    cfg = text_format.Parse(text, model_config_pb2.ModelConfig())
    upstream = {i.name: (model_config_pb2.DataType.Name(i.data_type), tuple(i.dims)) for i in cfg.input}
    upstream["min_tokens"] = upstream["min_length"]  # the 1.x name (trtspec.upstream.triton RENAMED_SINCE_V0_19)
    by = {t.name: t for t in c.GENERATE_INPUTS}
    for name in ("stop_words", "bad_words", "min_tokens", "min_length", "return_log_probs"):
        assert (by[name].data_type, by[name].dims) == upstream[name], name


def test_word_list_format_is_upstreams():
    items = [[[5, 6], [7]], [[9]], []]
    assert word_list_format(items) == [[[5, 6, 7], [2, 3, -1]], [[9, 0, 0], [1, -1, -1]], [[0, 0, 0], [-1, -1, -1]]]
    assert word_list_format([[]]) == [[[0], [-1]]]  # at least one column
    assert word_list_format([[[], [4]]]) == [[[4], [1]]]  # a word encoding to nothing is skipped
    for row, words in zip(word_list_format(items), items):
        assert parse_word_list(row, "stop_words_list") == tuple(tuple(w) for w in words)


def test_bad_word_lists_are_refused_naming_the_tensor():
    with pytest.raises(RequestError, match=r"^stop_words_list: expected \[2, N\]"):
        parse_word_list([[1, 2], [2]], "stop_words_list")
    with pytest.raises(RequestError, match=r"^bad_words_list: offset 5 after 0; expected increasing offsets within"):
        parse_word_list([[1, 2], [5, -1]], "bad_words_list")


def test_log_probs_are_refused_by_name_and_false_is_accepted():
    check_log_probs(None)
    check_log_probs(False)
    with pytest.raises(RequestError, match=r"^return_log_probs: not supported by trtspec's generate"):
        check_log_probs(True)


def test_llmapi_refuses_what_its_model_cannot_take():
    check_llmapi_words([], 0)
    with pytest.raises(RequestError, match=r"^stop_words: the llmapi flavor's model takes no stop_words"):
        check_llmapi_words(["stop_words"], 0)
    with pytest.raises(RequestError, match=r"^min_tokens: the llmapi flavor's model takes no min_tokens"):
        check_llmapi_words([], 3)


def test_llmapi_refusal_names_the_min_input_the_client_sent():
    """genai-perf sends min_length (min_tokens' 0.x name): the refusal names that, not min_tokens."""
    check_llmapi_words([], None, 0)
    with pytest.raises(RequestError, match=r"^min_length: the llmapi flavor's model takes no min_length"):
        check_llmapi_words([], None, 3)


def test_the_bls_stop_rule_is_the_runtimes():
    """word_rules.ends_with_any (shipped without trtspec) and runtime.words.ends_with_stop are two
    copies of one rule (see ends_with_any): they must agree."""
    from trtspec.runtime.words import ends_with_stop

    stops = ((4, 5), (7,), (1, 2, 3))
    for tokens in ([], [5], [4, 5], [9, 4, 5], [5, 4], [7], [7, 8], [2, 3], [1, 2, 3], [0, 1, 2, 3, 4]):
        assert ends_with_any(tokens, stops) == ends_with_stop(tokens, stops), tokens
        assert ends_with_any(tokens, [list(s) for s in stops]) == ends_with_stop(tokens, stops), tokens
    assert not ends_with_any([1, 2], ()) and not ends_with_stop([1, 2], ())
