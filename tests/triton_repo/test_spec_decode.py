"""spec_decode's trtllm-flavor rounds at temperature > 0, without a server or TensorRT-LLM.

The BLS calls go to fake `tensorrt_llm_draft` / `tensorrt_llm` engines (a stand-in for
triton_python_backend_utils that records every request's inputs and answers with fixed tokens and
logits). What is pinned: draft_logits is the distribution the draft sampled from ([K, V]: log of
trtspec.runtime.sampling.probs at the request's settings, filtered tokens very negative, since
TensorRT-LLM applies no temperature or filtering to draft_logits); it is sent only when the
repository enables draft logits and the request samples; the draft samples with the request's
settings then and drafts greedily otherwise; each round's seeds differ and repeat with the seed.
"""

from __future__ import annotations

import importlib
import sys
import types

import numpy as np
import pytest
import torch

from triton_repo.test_models_common import HELPER_MODULES, MODELS, Request
from trtspec.options import Sampling
from trtspec.runtime.sampling import probs

V = 12
DRAFT_TOKENS = [3, 5, 7, 9]


def executor_stop(ids: list[int], tokens: list[int], stop_words_list) -> list[int]:
    """The executor's stop words on one answer: cut after the first token that completes a word,
    matched against input + output (stop_words_list [1, 2, N]: ids, then end offsets padded -1)."""
    if stop_words_list is None:
        return tokens
    flat, ends = stop_words_list[0].tolist()
    ends = [e for e in ends if e >= 0]
    words = [flat[a:b] for a, b in zip([0] + ends, ends)]
    for i in range(len(tokens)):
        seq = ids + tokens[:i + 1]
        if any(seq[-len(w):] == w for w in words):
            return tokens[:i + 1]
    return tokens


def fake_engines(calls: list, logits: np.ndarray):
    """pb_utils whose InferenceRequest.exec answers as the two engines: the draft returns the first
    request_output_len of DRAFT_TOKENS (+ their generation logits when asked), the target accepts
    one draft token and adds token 1, then decodes token 1 on to request_output_len, as the
    executor does (token 1 alone without drafts), and ends early on a stop word (executor_stop)."""
    pb = types.ModuleType("triton_python_backend_utils")
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

    class Resp:
        def __init__(self, outputs):
            self.outputs = outputs

        def has_error(self):
            return False

    class InferenceRequest:
        def __init__(self, model_name, inputs, requested_output_names, parameters=None):
            self.model, self.inputs = model_name, dict(inputs)

        def exec(self, decoupled=False):
            calls.append((self.model, self.inputs))
            n = int(self.inputs["request_output_len"].reshape(-1)[0])
            if self.model == "tensorrt_llm_draft":
                out = {"output_ids": np.array([[DRAFT_TOKENS[:n]]], np.int32),
                       "sequence_length": np.array([[n]], np.int32)}
                if "return_generation_logits" in self.inputs:
                    out["generation_logits"] = logits[None, None, :n]
            else:
                draft = self.inputs.get("draft_input_ids")
                tokens = (([int(draft.reshape(-1)[0])] if draft is not None else []) + [1] * n)[:n]
                tokens = executor_stop(self.inputs["input_ids"].reshape(-1).tolist(), tokens,
                                       self.inputs.get("stop_words_list"))
                out = {"output_ids": np.array([[tokens]], np.int32),
                       "sequence_length": np.array([[len(tokens)]], np.int32)}
            return iter([Resp(out)])

    pb.InferenceRequest = InferenceRequest
    pb.Tensor = lambda name, value: (name, value)
    pb.get_output_tensor_by_name = lambda resp, name: (
        types.SimpleNamespace(as_numpy=lambda: resp.outputs[name]) if name in resp.outputs else None)
    pb.get_input_tensor_by_name = lambda req, name: (
        types.SimpleNamespace(as_numpy=lambda: req.inputs[name]) if name in req.inputs else None)
    pb.InferenceResponse = lambda output_tensors=None, error=None: ("response", error)
    pb.TritonError = str
    return pb


@pytest.fixture()
def spec(monkeypatch):
    """(spec_decode module, calls, generation logits) with the fake engines installed."""
    calls: list = []
    logits = np.random.default_rng(0).normal(0, 2, (len(DRAFT_TOKENS), V)).astype(np.float32)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_engines(calls, logits))
    monkeypatch.syspath_prepend(str(MODELS))
    names = (*HELPER_MODULES, "spec_decode")
    for name in names:
        sys.modules.pop(name, None)
    yield importlib.import_module("spec_decode"), calls, logits
    for name in names:
        sys.modules.pop(name, None)


def run_rounds(mod, draft_logits: bool, inputs: dict, k: int = 2, n: int = 5, arrays: dict | None = None):
    """_bls on prompt [11, 4] with scalar `inputs` ({name: (value, dtype)}) and whole `arrays`."""
    m = mod.TritonPythonModel.__new__(mod.TritonPythonModel)
    m.target_model, m.draft_model, m.draft_logits = "tensorrt_llm", "tensorrt_llm_draft", draft_logits
    req = Request()
    req.inputs = {**{name: np.array([[v]], dtype) for name, (v, dtype) in inputs.items()}, **(arrays or {})}
    stats = mod.__dict__["Acceptance"]()
    return [t for piece in m._bls(req, [11, 4], n, k, None, stats) for t in piece], stats


SETTINGS = [Sampling(temperature=0.7), Sampling(temperature=1.3, top_k=5), Sampling(temperature=0.8, top_p=0.9),
            Sampling(temperature=0.5, top_k=4, top_p=0.8)]


@pytest.mark.parametrize("sampling", SETTINGS, ids=lambda s: s.label())
def test_draft_distribution_is_the_filtered_draft_distribution(spec, sampling):
    mod, _, logits = spec
    q = mod.draft_distribution(logits, sampling.temperature, sampling.top_k, sampling.top_p)
    want = probs(torch.tensor(logits), sampling).numpy()
    assert q.shape == (len(DRAFT_TOKENS), V) and q.dtype == np.float32
    kept = want > 0
    assert np.allclose(q[kept], np.log(want[kept]), atol=1e-5)  # log-probs of the filtered distribution
    assert (q[~kept] == mod.MASKED_LOGIT).all()
    assert (~kept).any() == (sampling.top_k > 0 or sampling.top_p < 1)
    assert np.allclose(torch.tensor(q).double().softmax(-1).numpy(), want, atol=1e-6)  # softmax as sent = q


def sampled_inputs(seed=5):
    return {"temperature": (0.8, np.float32), "runtime_top_k": (4, np.int32), "runtime_top_p": (0.9, np.float32),
            "seed": (seed, np.uint64)}


def test_draft_logits_are_sent_with_the_draft_tokens_when_enabled_and_sampled(spec):
    mod, calls, logits = spec
    tokens, stats = run_rounds(mod, True, sampled_inputs())
    # rounds draft 2 (the target answers 3 tokens), then 1 (two output tokens left)
    assert tokens == [3, 1, 1, 3, 1] and (stats.steps, stats.accepted, stats.drafted) == (2, 2, 3)
    drafts = [i for m, i in calls if m == "tensorrt_llm_draft"]
    targets = [i for m, i in calls if m == "tensorrt_llm"]
    assert len(drafts) == len(targets) == 2
    for d, t, k in zip(drafts, targets, (2, 1)):
        assert d["return_generation_logits"].all() and d["temperature"].item() == pytest.approx(0.8)
        assert d["runtime_top_k"].item() == 4 and d["runtime_top_p"].item() == pytest.approx(0.9)
        assert t["draft_input_ids"].tolist() == [DRAFT_TOKENS[:k]]
        want = mod.draft_distribution(logits[:k], 0.8, 4, 0.9)
        assert t["draft_logits"].shape == (1, k, V) and np.allclose(t["draft_logits"][0], want, atol=1e-5)
        assert t["temperature"].item() == pytest.approx(0.8)
    seeds = [int(i["seed"].item()) for _, i in calls]
    assert len(set(seeds)) == len(seeds) and 5 not in seeds  # every engine request draws afresh
    calls.clear()
    run_rounds(mod, True, sampled_inputs())
    assert [int(i["seed"].item()) for _, i in calls] == seeds  # same seed, same rounds
    calls.clear()
    run_rounds(mod, True, sampled_inputs(seed=6))
    assert not set(int(i["seed"].item()) for _, i in calls) & set(seeds)


def test_top_p_zero_samples_as_the_engines_read_it(spec):
    """top_p 0 with a top_k is top-k alone for TensorRT-LLM (regularizeTopKTopP): the draft_logits'
    q must be that distribution, not an empty one (log 0 everywhere); without a top_k it is greedy,
    so no draft logits are sent."""
    mod, calls, logits = spec
    run_rounds(mod, True, {**sampled_inputs(), "runtime_top_p": (0.0, np.float32)})
    target = next(i for m, i in calls if m == "tensorrt_llm" and "draft_logits" in i)
    k = target["draft_input_ids"].shape[1]
    assert np.allclose(target["draft_logits"][0], mod.draft_distribution(logits[:k], 0.8, 4, 1.0), atol=1e-5)
    calls.clear()
    run_rounds(mod, True, {"temperature": (0.8, np.float32), "runtime_top_p": (0.0, np.float32),
                           "seed": (5, np.uint64)})
    assert calls and not any("draft_logits" in i for _, i in calls)


def test_no_draft_logits_without_the_switch_or_at_temperature_0(spec):
    mod, calls, _ = spec
    run_rounds(mod, False, sampled_inputs())  # engine-flow exact_match_resample: greedy draft
    for model, inputs in calls:
        assert "draft_logits" not in inputs and "return_generation_logits" not in inputs
        assert ("temperature" in inputs) == (model == "tensorrt_llm")
    calls.clear()
    run_rounds(mod, True, {"temperature": (0.0, np.float32), "seed": (5, np.uint64)})  # greedy request
    for model, inputs in calls:
        assert "draft_logits" not in inputs and "return_generation_logits" not in inputs
        assert "temperature" not in inputs or model == "tensorrt_llm"
    assert {int(i["seed"].item()) for m, i in calls if m == "tensorrt_llm"} == {5}  # greedy: passed as is


def test_a_draft_without_generation_logits_is_an_error(spec, monkeypatch):
    mod, _, _ = spec
    real = mod.TritonPythonModel._call

    def no_logits(self, model, ids, n, end_id, pad_id, extra, logits=False):
        tokens, _ = real(self, model, ids, n, end_id, pad_id, extra, logits)
        return tokens, None
    monkeypatch.setattr(mod.TritonPythonModel, "_call", no_logits)
    with pytest.raises(RuntimeError, match="built with --gather_generation_logits"):
        run_rounds(mod, True, sampled_inputs())


def test_a_target_answer_short_of_its_length_ends_the_request(spec, monkeypatch):
    """The executor returns no end id (its sequence length does not count it): a target that stops
    short of request_output_len has ended, and no further round may decode past that end (upstream's
    BLS stops there too). Here the target's second token would be the end id: the draft token it
    returns is an accepted one (no bonus token of the target's is returned)."""
    mod, calls, _ = spec
    real = mod.TritonPythonModel._call

    def ends_after_one(self, model, ids, n, end_id, pad_id, extra, logits=False):
        tokens, rows = real(self, model, ids, n, end_id, pad_id, extra, logits)
        return (tokens[:1], rows) if model == "tensorrt_llm" else (tokens, rows)
    monkeypatch.setattr(mod.TritonPythonModel, "_call", ends_after_one)
    for inputs in ({}, sampled_inputs()):
        calls.clear()
        tokens, stats = run_rounds(mod, False, inputs)
        assert tokens == [3] and [m for m, _ in calls] == ["tensorrt_llm_draft", "tensorrt_llm"]
        assert (stats.steps, stats.accepted, stats.drafted) == (1, 1, 2)


# ---- stopping rules: min_tokens, stop_words_list, bad_words_list on the BLS rounds -----------------
# Oracle: upstream's tensorrt_llm model (trtspec.upstream.triton.TENSORRT_LLM_INPUTS): the lists are
# [batch, 2, N] int32 (ids, then cumulative end offsets padded with -1), min_tokens a [batch, 1] int32
# that counts the executor request's own generated tokens, which a round's request starts at 0.
STOP_NEVER = np.array([[[8], [1]]], np.int32)  # token 8 is never produced by the fake engines
BAD = np.array([[[5, 6, 7], [1, 3, -1]]], np.int32)  # (5,) and (6, 7)
NUMPY = {"TYPE_INT32": np.int32, "TYPE_FP32": np.float32, "TYPE_BOOL": np.bool_, "TYPE_UINT64": np.uint64}


def stop_list(*words) -> dict:
    flat = [t for w in words for t in w]
    ends = [int(e) for e in np.cumsum([len(w) for w in words])]
    return {"stop_words_list": np.array([[flat, ends + [-1] * (len(flat) - len(ends))]], np.int32)}


def assert_upstream_request(inputs: dict):
    """Every tensor is an input of upstream's tensorrt_llm, with its dtype and [batch, *dims] shape."""
    from trtspec.upstream.triton import TENSORRT_LLM_INPUTS

    declared = {t.name: t for t in TENSORRT_LLM_INPUTS}
    for name, value in inputs.items():
        t = declared[name]
        assert value.ndim == len(t.dims) + 1 and value.shape[0] == 1, name
        assert all(d == -1 or d == s for d, s in zip(t.dims, value.shape[1:])), name
        if not t.data_type.startswith("$"):  # draft_logits: the engine's logits dtype
            assert value.dtype == NUMPY[t.data_type], name


@pytest.mark.parametrize("draft_logits", [False, True])
def test_min_tokens_goes_to_each_target_round_less_what_was_emitted(spec, draft_logits):
    mod, calls, _ = spec
    for min_tokens, per_round in ((4, [4, 1]), (3, [3, None]), (0, [None, None])):
        calls.clear()
        tokens, _ = run_rounds(mod, draft_logits, {**sampled_inputs(), "min_tokens": (min_tokens, np.int32)})
        assert tokens == [3, 1, 1, 3, 1]  # rounds of 3 then 2 tokens
        targets = [i for m, i in calls if m == "tensorrt_llm"]
        assert [i["min_tokens"].tolist() if "min_tokens" in i else None for i in targets] \
            == [None if v is None else [[v]] for v in per_round]
        assert not any("min_tokens" in i for m, i in calls if m == "tensorrt_llm_draft")
        for _, inputs in calls:
            assert_upstream_request(inputs)


@pytest.mark.parametrize("draft_logits", [False, True])
def test_word_lists_go_to_every_target_round_and_never_to_the_draft(spec, draft_logits):
    """A draft engine with bad words would sample from a masked distribution that its generation
    logits (draft_logits' q) do not show; a stop word there only shortens a draft. The target's
    rules decide what is emitted."""
    mod, calls, _ = spec
    arrays = {"stop_words_list": STOP_NEVER, "bad_words_list": BAD}
    tokens, _ = run_rounds(mod, draft_logits, sampled_inputs(), arrays=arrays)
    assert tokens == [3, 1, 1, 3, 1]
    targets = [i for m, i in calls if m == "tensorrt_llm"]
    drafts = [i for m, i in calls if m == "tensorrt_llm_draft"]
    assert len(targets) == len(drafts) == 2
    for inputs in targets:
        assert inputs["stop_words_list"].tolist() == STOP_NEVER.tolist()
        assert inputs["bad_words_list"].tolist() == BAD.tolist()
    for inputs in drafts:
        assert "stop_words_list" not in inputs and "bad_words_list" not in inputs
    for _, inputs in calls:
        assert_upstream_request(inputs)


def test_plain_decoding_sends_the_rules_once(spec):
    mod, calls, _ = spec
    arrays = {"stop_words_list": STOP_NEVER, "bad_words_list": BAD}
    tokens, _ = run_rounds(mod, False, {"min_tokens": (3, np.int32)}, k=0, arrays=arrays)
    assert tokens == [1] * 5 and [m for m, _ in calls] == ["tensorrt_llm"]
    inputs = calls[0][1]
    assert inputs["min_tokens"].tolist() == [[3]] and inputs["stop_words_list"].tolist() == STOP_NEVER.tolist()
    assert inputs["bad_words_list"].tolist() == BAD.tolist()
    assert_upstream_request(inputs)


@pytest.mark.parametrize("words, want, rounds", [
    (((1, 1),), [3, 1, 1], 1),  # completed by a round's last token: the executor's answer is full length
    (((3, 1),), [3, 1], 1),  # inside a round: the executor ends short
    (((4, 3),), [3], 1),  # matched with the prompt's last token
    (((1, 3), (9, 9)), [3, 1, 1, 3], 2),  # across two rounds (the second round's input holds the first)
    (((8,),), [3, 1, 1, 3, 1], 2),  # never produced: the request runs to its length
])
def test_a_stop_word_ends_the_request_where_the_executor_ends_it(spec, words, want, rounds):
    mod, calls, _ = spec
    tokens, _ = run_rounds(mod, False, {}, arrays=stop_list(*words))
    assert tokens == want
    assert [m for m, _ in calls] == ["tensorrt_llm_draft", "tensorrt_llm"] * rounds
