"""The cpu flavor's tensorrt_llm model (cpu_llm.py) without a server: min_tokens reaches the runtime,
and the end id is left out of the output as TensorRT-LLM's executor leaves it out.

A request's end_id is the token the tiny target's greedy output emits at index 2. With min_tokens 0
the request ends there; with a min_tokens between 0 and request_output_len it runs on, and its
tokens are the runtime's with that min_tokens, also when the first step verifies
draft_input_ids (the continuation after that step owes min_tokens less what it emitted). The end
id that ends a request is in no response: the executor's sampling kernels do not count it in the
sequence length and its batch manager returns only the tokens within it (upstream's BLS relies on
that: a target answering fewer tokens than asked has ended). The cpu flavor's spec_decode, running
the same runtime in-process, returns the same tokens with and without speculation.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading

import numpy as np
import pytest
import torch

from triton_fixtures import tiny_pair
from triton_repo.test_models_common import HELPER_MODULES, MODELS, Request
from triton_repo.test_spec_decode import fake_engines
from trtspec.runtime.generate import generate_batch, load_models

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NEW, M = 14, 8


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("cpu_llm"))


@pytest.fixture(scope="module")
def target(pair):
    """The tiny target, a prompt, its greedy output and an end id that output first emits at index 2
    and that comes again before M once index 2 is masked (so every masked index matters)."""
    models = load_models(pair / "target", tokenizer=False)
    g = torch.Generator().manual_seed(6)
    for _ in range(30):
        prompt = torch.randint(3, 1001, (5,), generator=g).tolist()
        greedy = generate_batch(models, [prompt], NEW, "greedy", ignore_eos=True)[0].output_ids
        end_id = greedy[2]
        after = generate_batch(dataclasses.replace(models, eos_ids=(end_id,)), [prompt], NEW, "greedy",
                               min_tokens=3)[0].output_ids
        if end_id not in greedy[:2] and end_id in after[3:M]:
            return models, prompt, greedy, end_id
    raise AssertionError("no prompt whose greedy output comes back to its third token")


def shipped_model(monkeypatch, name: str):
    """A shipped model's TritonPythonModel, not initialized, with a pb_utils whose responses are
    {output name: value}; its helpers and it are imported afresh (and dropped again by the caller)."""
    pb = fake_engines([], np.zeros((1, 1), np.float32))
    pb.InferenceResponse = lambda output_tensors=None, error=None: dict(output_tensors or [])
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    monkeypatch.syspath_prepend(str(MODELS))
    for module in (*HELPER_MODULES, name):
        sys.modules.pop(module, None)
    mod = importlib.import_module(name)
    monkeypatch.setattr(mod.TritonPythonModel, "check_running", lambda self, request: None)
    return mod.TritonPythonModel.__new__(mod.TritonPythonModel)


def drop_shipped(name: str):
    for module in (*HELPER_MODULES, name):
        sys.modules.pop(module, None)


@pytest.fixture()
def cpu_llm(monkeypatch, target):
    """A cpu_llm TritonPythonModel holding the tiny target."""
    model = shipped_model(monkeypatch, "cpu_llm")
    model.role, model.choices, model.exclude_default, model.positions = "target", None, True, 0
    model.models, model.load_lock = target[0], threading.Lock()
    yield model
    drop_shipped("cpu_llm")


@pytest.fixture()
def spec_decode(monkeypatch, pair):
    """A cpu-flavor spec_decode TritonPythonModel (engine trtspec.runtime) on the tiny pair."""
    model = shipped_model(monkeypatch, "spec_decode")
    model.engine, model.draft_mode, model.accept_rule, model.positions = "trtspec.runtime", "draft-target", None, 0
    model.max_draft_len, model.drafters, model.heads = 0, frozenset({"model"}), {}
    model.models = load_models(pair / "target", pair / "draft", tokenizer=False)
    yield model
    drop_shipped("spec_decode")


def responses(model, prompt: list[int], end_id: int, min_tokens: int | None, draft: list[int] | None = None,
              streaming: bool = False, **scalars) -> list[dict]:
    """The responses with outputs of one request (the last, bare final one of a stream left out);
    `scalars`: more int32 inputs."""
    request = Request()
    request.inputs = {"input_ids": np.array([prompt], np.int32), "input_lengths": np.array([[len(prompt)]], np.int32),
                      "request_output_len": np.array([[NEW]], np.int32), "end_id": np.array([[end_id]], np.int32),
                      "streaming": np.array([[streaming]], bool),
                      **{name: np.array([[v]], np.int32) for name, v in scalars.items()}}
    if min_tokens is not None:
        request.inputs["min_tokens"] = np.array([[min_tokens]], np.int32)
    if draft:
        request.inputs["draft_input_ids"] = np.array([draft], np.int32)
    model.handle(request, request.sender)
    return [r for r, _ in request.sender.sent if r is not None]


def serve(model, prompt: list[int], end_id: int, min_tokens: int | None, draft: list[int] | None = None) -> list[int]:
    (response,) = responses(model, prompt, end_id, min_tokens, draft)
    return response["output_ids"].reshape(-1).tolist()


def without_end(tokens: list[int], end_id: int) -> list[int]:
    """The runtime's output as the executor returns it: cut before the end id."""
    return tokens[:tokens.index(end_id)] if end_id in tokens else tokens


def test_min_tokens_between_zero_and_the_length_reaches_the_runtime(cpu_llm, target):
    models, prompt, greedy, end_id = target
    assert serve(cpu_llm, prompt, end_id, None) == serve(cpu_llm, prompt, end_id, 0) == greedy[:2]
    with_end_id = dataclasses.replace(models, eos_ids=(end_id,))
    want = without_end(generate_batch(with_end_id, [prompt], NEW, "greedy", min_tokens=M)[0].output_ids, end_id)
    assert end_id not in want[:M] and len(want) >= M
    assert serve(cpu_llm, prompt, end_id, M) == want
    # draft_input_ids: the verify step (indices 0..2) and the continuation are both masked
    assert serve(cpu_llm, prompt, end_id, M, draft=greedy[:2]) == want


def test_min_tokens_past_the_length_runs_to_the_length(cpu_llm, target):
    _, prompt, _, end_id = target
    got = serve(cpu_llm, prompt, end_id, NEW)
    assert len(got) == NEW and end_id not in got


@pytest.mark.parametrize("streaming", [False, True], ids=["one-response", "streamed"])
@pytest.mark.parametrize("draft", [0, 2], ids=["plain", "draft_input_ids"])
def test_the_end_id_that_ends_a_request_is_not_returned(cpu_llm, target, streaming, draft):
    """TensorRT-LLM's executor returns no end id: output_ids, sequence_length and num_output_tokens
    stop before it (sampling / accept kernels: "Do not increase seq len when EOS is generated";
    updateRequests adds only the tokens within the sequence length)."""
    _, prompt, greedy, end_id = target
    got = responses(cpu_llm, prompt, end_id, None, greedy[:draft], streaming)
    ids = [t for r in got for t in r["output_ids"].reshape(-1).tolist()]
    assert ids == greedy[:2] and end_id not in ids
    assert sum(int(r["sequence_length"].item()) for r in got) == 2
    counted = [int(r["num_output_tokens"].item()) for r in got]
    assert (sum(counted) if streaming else counted[-1]) == 2


@pytest.mark.parametrize("streaming", [False, True], ids=["one-response", "streamed"])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_spec_decode_returns_no_end_id_either(spec_decode, target, streaming, k):
    """The cpu flavor's spec_decode returns the tokens the executor would (those of the target
    alone, the cpu tensorrt_llm model above), so a request's token count does not depend on the
    engine; its acceptance statistics still count the step that produced the end id, as
    trtspec.runtime.stats and TensorRT-LLM's samplers do: the verify steps emitted every returned
    token but the first (the prefill's) and the end id."""
    _, prompt, greedy, end_id = target
    got = responses(spec_decode, prompt, end_id, None, None, streaming, num_draft_tokens=k)
    ids = [t for r in got for t in r["output_ids"].reshape(-1).tolist()]
    assert ids == greedy[:2] and end_id not in ids
    assert sum(int(r["sequence_length"].item()) for r in got) == 2
    last = got[-1]
    steps, emitted = int(last["verify_steps"].item()), len(ids) + 1
    if k:
        assert last["acceptance_length"].item() * steps == pytest.approx(emitted - 1)
        assert int(last["total_accepted_draft_tokens"].item()) == emitted - 1 - steps
    else:  # plain decoding: one target call per token, the prefill's included
        assert steps == emitted and last["acceptance_length"].item() == 1.0
