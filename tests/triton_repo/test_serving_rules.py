"""The serving rules module: band choice, brace syntax, request validation, acceptance counters.

These are the rules the python-backend models apply to every request and that perf, routing and
the validator reuse, so each edge case here is a behaviour of the served repository.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from triton_fixtures import build_dir, tiny_tokenizer_dir, tuning_file
from trtspec.options import Sampling
from trtspec.triton_repo.models import serving_rules as r
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.validate import check_repository
from trtspec.upstream import sampling as upstream_sampling


@dataclass
class Band:
    concurrency: int
    draft_len: int


def test_pick_band_takes_the_largest_band_at_or_below_the_load():
    bands = [Band(16, 2), Band(1, 4), Band(4, 3)]  # unsorted on purpose
    assert [r.pick_band(bands, n).concurrency for n in (1, 3, 4, 15, 16, 100)] == [1, 1, 4, 4, 16, 16]


def test_pick_band_below_the_smallest_band_or_unknown_load_takes_the_smallest():
    bands = [Band(4, 3), Band(16, 2)]
    assert r.pick_band(bands, 1).concurrency == 4
    assert r.pick_band(bands, 0).concurrency == 4
    assert r.pick_band(bands, None).concurrency == 4  # open-loop runs have no fixed concurrency


def test_pick_band_without_bands_is_none():
    assert r.pick_band([], 8) is None


def test_pick_band_reads_the_routing_tables_dicts_too():
    bands = [{"concurrency": 1, "num_draft_tokens": 4}, {"concurrency": 16, "num_draft_tokens": 1}]
    assert r.pick_band(bands, 10)["num_draft_tokens"] == 4
    assert r.pick_band(bands, 16)["num_draft_tokens"] == 1


@pytest.mark.parametrize("choices", [[[0]], [[0], [1], [0, 0], [0, 1], [0, 0, 0]], [[12], [12, 3]]])
def test_braces_round_trip(choices):
    text = r.braces(choices)
    assert "[" not in text and r.parse_braces(text) == choices


def test_braces_text_is_the_cpp_backends_syntax():
    assert r.braces([[0], [0, 1]]) == "{0}, {0, 1}"
    assert r.parse_braces(" {0},{0,1} ") == [[0], [0, 1]]


@pytest.mark.parametrize("text, match", [("[[0], [0, 1]]", "expected the brace form"), ("", "expected the brace form"),
                                         ("{0}, {0, x}", r"bad choice \{0, x\}"), ("{0}, [1]", "brace form")])
def test_parse_braces_refuses_anything_but_braces(text, match):
    with pytest.raises(ValueError, match=match):
        r.parse_braces(text)


def test_tree_depth_is_the_longest_path():
    assert r.tree_depth([[0], [0, 1], [0, 1, 2], [1]]) == 3


def test_output_len_names_the_input():
    assert r.output_len(5, "max_tokens") == 5
    with pytest.raises(r.RequestError, match=r"^max_tokens: expected >= 1, got 0$"):
        r.output_len(0, "max_tokens")
    with pytest.raises(r.RequestError, match=r"^request_output_len: expected >= 1, got None$"):
        r.output_len(None, "request_output_len")


def test_draft_len_bounds():
    assert r.draft_len(None, 4) == 0 and r.draft_len(4, 4) == 4 and r.draft_len(9, 0) == 9
    with pytest.raises(r.RequestError, match=r"num_draft_tokens: 5 is outside \[0, max_draft_len=4\]"):
        r.draft_len(5, 4)
    with pytest.raises(r.RequestError, match=r"num_draft_tokens: -1 is outside"):
        r.draft_len(-1, 4)


@pytest.mark.parametrize("temperature, top_k", [(None, None), (0.0, None), (0, 5), (0.7, 1)])
def test_greedy_requests_are_not_sampled(temperature, top_k):
    assert not r.is_sampled(temperature, top_k)
    assert r.sampling_fallback(True, temperature, top_k) == ""
    assert Sampling(temperature=temperature or 0.0, top_k=top_k or 0).greedy  # the same rule as the model


def test_top_p_zero_is_read_as_the_engines_read_it():
    """TensorRT-LLM's regularizeTopKTopP (kernels/samplingTopKKernels.h): top_p 0 without a top_k is
    greedy (top_k 1); with a top_k it means no top-p (1.0). A client written for the engines sends it."""
    assert r.engine_top_k_top_p(0, 0.0) == (1, 1.0) and r.engine_top_k_top_p(None, 0.0) == (1, 1.0)
    assert r.engine_top_k_top_p(8, 0.0) == (8, 1.0)
    assert r.engine_top_k_top_p(0, 0.9) == (0, 0.9) and r.engine_top_k_top_p(5, None) == (5, None)
    assert not r.is_sampled(0.8, 0, 0.0) and r.is_sampled(0.8, 8, 0.0) and r.is_sampled(0.8, 0, 0.5)
    assert r.sampling_fallback(True, 0.8, None, 0.0) == ""  # greedy anyway: nothing was changed


@pytest.mark.parametrize("temperature, top_k", [(0.7, None), (1.0, 0), (0.1, 40)])
def test_sampled_requests_on_eagle_routes_are_flagged_greedy(temperature, top_k):
    assert r.is_sampled(temperature, top_k)
    assert not Sampling(temperature=temperature, top_k=top_k or 0).greedy
    assert r.sampling_fallback(True, temperature, top_k) == r.SAMPLING_FALLBACK_GREEDY == "greedy"
    assert r.sampling_fallback(False, temperature, top_k) == ""  # draft-target routes really sample


def test_rule_names_are_upstreams():
    names = {x.name for x in upstream_sampling.ACCEPT_RULES}
    assert {r.GREEDY_RULE, *r.SPEC_DECODE_RULES} <= names
    assert r.bls_rule(False) == upstream_sampling.EXACT_MATCH_RESAMPLE.name
    assert r.bls_rule(True) == upstream_sampling.REJECTION.name
    assert r.spec_decode_rule(None) == r.spec_decode_rule("") == upstream_sampling.EXACT_MATCH.name
    with pytest.raises(ValueError, match="accept_rule: 'greedy' is not one of"):
        r.spec_decode_rule("greedy")


def test_beam_width():
    r.check_beam_width(None)
    r.check_beam_width(1)
    with pytest.raises(r.RequestError, match="beam_width: the cpu flavor decodes with beam width 1 only"):
        r.check_beam_width(2)


def test_acceptance_definitions():
    assert r.acceptance_length(0, 0) == 1.0  # before the first step
    assert r.acceptance_length(6, 4) == 2.5  # 10 tokens in 4 verification steps
    assert r.acceptance_rate(3, 0) == 0.0 and r.acceptance_rate(3, 4) == 0.75
    # an EAGLE tree of depth 3: TRT-LLM counts 3 drafted per step, so 12 drafted = 4 steps
    assert r.trtllm_steps(12, 3) == 4 and r.trtllm_steps(0, 3) == 0
    assert r.acceptance_length(6, r.trtllm_steps(12, 3)) == 2.5


def test_acceptance_counters():
    a = r.Acceptance()
    assert (a.length, a.rate) == (1.0, 0.0)
    a.steps, a.accepted, a.drafted = 4, 6, 8
    assert (a.length, a.rate) == (2.5, 0.75)


def test_the_rules_module_runs_without_trtspec_numpy_or_triton():
    """It is copied into the repositories and imported in the TensorRT-LLM container, where only the
    standard library is certain."""
    tree = ast.parse(Path(r.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"re"}, imported


def test_every_python_model_ships_with_the_rules_and_the_validator_says_when_one_is_missing(tmp_path):
    tok = tiny_tokenizer_dir(tmp_path / "tokenizer")
    repo = tmp_path / "repo"
    make_repository(RepoRequest(tuning=tuning_file(tmp_path / "t" / "tuning.json", "draft-target", {"chat": [2, 1]}),
                                flavor="trtllm", engines=build_dir(tmp_path / "b", "draft-target", tok, max_draft_len=8),
                                out=repo))
    shipped = sorted(p.parent.parent.name for p in repo.glob("*/1/serving_rules.py"))
    assert shipped == ["generate", "postprocessing", "preprocessing", "spec_decode"]
    assert (repo / "generate" / "1" / "serving_rules.py").read_text() == Path(r.__file__).read_text()
    (repo / "spec_decode" / "1" / "serving_rules.py").unlink()
    assert check_repository(repo) == [f"{repo / 'spec_decode' / '1' / 'serving_rules.py'}: missing "
                                      "(imported by spec_decode's model.py)"]


def test_check_positions_and_one_row():
    from trtspec.triton_repo.models.serving_rules import RequestError, check_positions, one_row

    check_positions(10, 246, 256)
    check_positions(10, 10**9, 0)  # no known bound
    with pytest.raises(RequestError, match=r"max_tokens: 1000000000 output tokens .* ask for at most 246"):
        check_positions(10, 10**9, 256)
    with pytest.raises(RequestError, match=r"input_ids: the prompt has 300 tokens"):
        check_positions(300, 1, 256)
    one_row(1, "text_input")
    with pytest.raises(RequestError, match="text_input: 2 rows in one request"):
        one_row(2, "text_input")


def test_label_band_reads_the_band_a_route_label_names():
    assert r.label_band(r.band_label("chat", 4, "K=2")) == ("chat", 4, 2)
    assert r.label_band("default@1:K=3:ngram:n=2:head=code") == ("default", 1, 3)
    assert r.label_band(r.band_label("default", 1, r.chain_setting(3, 2, "code"))) == ("default", 1, 3)
    assert r.label_band(r.band_label("code", 1, "tensorrt_llm_c1_p0")) == ("code", 1, None)  # a served model
    routing = {"mode": "ngram"}
    swept = r.swept_route(routing, {"num_draft_tokens": 2, "label": "code@2:K=2"}, k="3")
    # a sweep, speculation off, a served model, nothing: no tuned band served the request
    for label in (swept["label"], "code:speculation-off:K=0", "sweep:tensorrt_llm_c1_p0", "chat:tensorrt_llm", None):
        assert r.label_band(label) is None


def test_min_tokens_on_the_cpu_flavor_is_any_count_from_zero():
    """Any min_tokens >= 0 is served, also one between 0 and request_output_len (the runtime masks
    the end ids until then, as TensorRT-LLM does: tests/triton_repo/test_cpu_llm.py); absent is 0;
    negative is refused, as TensorRT-LLM's executor refuses it."""
    assert r.check_min_tokens(None) == 0 and r.check_min_tokens(0) == 0
    assert [r.check_min_tokens(m) for m in (1, 15, 16, 40)] == [1, 15, 16, 40]
    with pytest.raises(r.RequestError, match=r"^min_tokens: -1; expected 0 or more"):
        r.check_min_tokens(-1)


def test_end_id_absent_is_the_models_own_and_minus_one_is_none():
    """As TensorRT-LLM: -1 stops on no token (the request runs to its length); absent, the model's
    eos ids; another negative id is refused naming the input."""
    assert r.stop_ids(None, (2, 7)) == (2, 7)
    assert r.stop_ids(5, (2, 7)) == (5,) and r.stop_ids(0, (2,)) == (0,)
    assert r.stop_ids(-1, (2, 7)) == ()
    with pytest.raises(r.RequestError, match=r"^end_id: -3; expected a token id, or -1 for none"):
        r.stop_ids(-3, (2,))


def test_the_llmapi_flavor_refuses_what_its_model_cannot_take():
    """Its model stops at its own end token and has no repetition penalty: a request setting either
    is refused naming the input, end_id -1 too (TensorRT-LLM's "run to the length", which it cannot
    do); unset (or repetition_penalty 1: the default) passes."""
    for given in ({}, {"repetition_penalty": 1.0}, {"presence_penalty": 0.5}):
        r.check_llmapi_inputs(given.get)
    for name, value in (("end_id", 7), ("end_id", -1), ("repetition_penalty", 1.2)):
        with pytest.raises(r.RequestError, match=rf"^{name}: the llmapi flavor's model takes no {name}"):
            r.check_llmapi_inputs({name: value}.get)


def test_a_swept_chain_route_keeps_the_workloads_head_in_route_and_label():
    """A sweep of a workload routed to its own EAGLE-3 head drafts with that head, and says so."""
    route = r.chain_route(2, None, "code", r.band_label("code", 1, r.chain_setting(2, None, "code")))
    assert route == {"num_draft_tokens": 2, "draft_head": "code", "label": "code@1:K=2:head=code"}
    swept = r.swept_route({"mode": "eagle3"}, route, k="4")
    assert swept == {"num_draft_tokens": 4, "draft_head": "code", "label": "code:sweep:K=4:head=code"}


def test_an_ngram_sweep_of_a_repository_without_ngram_drafting_names_the_parameter():
    """spec_decode's own error named its input (max_matching_ngram_size), which the client never sent."""
    band = {"concurrency": 1, "num_draft_tokens": 2}
    routing = {"mode": "draft-target", "workloads": {"code": [band]}, "default": {"bands": [band]}}
    route = {"num_draft_tokens": 2, "label": "code@1:K=2"}
    with pytest.raises(r.RequestError, match=rf"^{r.SWEEP_NGRAM}: this draft-target repository drafts no n-grams$"):
        r.swept_route(routing, route, k="3", ngram="2")
    assert r.swept_route(routing, route, k="3")["num_draft_tokens"] == 3
    chosen = {**routing, "workloads": {"code": [{**band, "max_matching_ngram_size": 2}]}}  # the drafter choice
    assert r.swept_route(chosen, route, k="3", ngram="3")["max_matching_ngram_size"] == 3


@pytest.mark.parametrize("param, value", [(r.SWEEP_K, "abc"), (r.SWEEP_K, "3.0"), (r.SWEEP_NGRAM, "two")])
def test_a_sweep_parameter_that_is_not_an_integer_is_a_one_line_error_naming_it(param, value):
    """Request parameters reach generate as strings; int() of a bad one was a bare ValueError
    ("invalid literal for int()", a traceback in the server log, no parameter named)."""
    route = {"num_draft_tokens": 2, "label": "code@1:K=2"}
    kw = {"k": value} if param == r.SWEEP_K else {"ngram": value}
    with pytest.raises(r.RequestError, match=rf"^{param}: expected an integer, got '{value}'$"):
        r.swept_route({"mode": "ngram"}, route, **kw)


def test_new_suffix_keeps_the_stream_append_only_and_says_what_the_client_has():
    """A re-segmented (shorter, changed) text sends nothing; what follows is sent beyond the length
    the client already has, and the returned text is always what the client holds."""
    sent, got = "", ""
    for text in ("abcd", "abX", "abXdef"):
        piece, sent = r.new_suffix(text, sent)
        got += piece
        assert sent == got
    assert got == "abcdef"


def test_a_stream_of_cleaned_up_text_adds_up_to_the_final_text():
    """Each step's text is transformers' clean_up_tokenization of all text so far (a tokenizer with
    clean_up_tokenization_spaces, SmolLM2's), which can rewrite what an earlier step decoded:
    the pieces streamed before the final one hold back what may still change, so they add up to
    the final text whatever comes next. Random texts of the fragments that clean-up acts on."""
    import random

    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    cleanup = PreTrainedTokenizerBase.clean_up_tokenization
    fragments = [" ", "'", ".", "s", "n", "t", "a", ",", "?", "!", "m", "v", "e", "r", "'t", " '", "  ", " .", "'s",
                 "\ufffd"]
    rng = random.Random(0)
    for _ in range(20000):
        steps = [rng.choice(fragments) for _ in range(rng.randint(1, 10))]
        sent, pieces = "", []
        for i in range(1, len(steps) + 1):
            piece, sent = r.new_suffix(cleanup("".join(steps[:i])), sent, final=i == len(steps))
            pieces.append(piece)
        assert "".join(pieces) == cleanup("".join(steps)), steps
    assert r.new_suffix("a \ufffd", "", final=False) == ("a", "a")  # an incomplete character waits, as before
    assert r.new_suffix(" it '", " it", final=False) == ("", " it")
