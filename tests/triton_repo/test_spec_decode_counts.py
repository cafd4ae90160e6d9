"""spec_decode's BLS engine (trtllm flavor) counts acceptance as the trtspec.runtime engine does.

Oracle: trtspec/runtime/stats.py `counted_step`, the project's one rule (TensorRT-LLM's count of a
served request): each verification step counts; the step that ends a request counts the tokens it
emits, the end id included, and accepts at most those less one. The executor returns no end id, so
a BLS round whose first token is the end id answers nothing: it is still one step, 0 accepted, and
its drafts were sent (the runtime engine path reports K per step for a draft model). With K = 0
every target token is a step, the end id's too (the runtime's target_calls). The rounds run against
the stand-in engines of test_spec_decode.py, with the target's answers scripted per round.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from triton_repo.test_models_common import HELPER_MODULES, MODELS, Request
from triton_repo.test_spec_decode import DRAFT_TOKENS, fake_engines, stop_list
from trtspec.runtime.stats import RequestStats, Step, counted_step

END = -1  # the end id in a round's emitted tokens (no answer holds it)
K, N = 2, 8
DRAFT = DRAFT_TOKENS[:K]


@pytest.fixture()
def mod(monkeypatch):
    """spec_decode with the stand-in engines installed."""
    logits = np.zeros((len(DRAFT_TOKENS), 12), np.float32)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_engines([], logits))
    monkeypatch.syspath_prepend(str(MODELS))
    names = (*HELPER_MODULES, "spec_decode")
    for name in names:
        sys.modules.pop(name, None)
    yield importlib.import_module("spec_decode")
    for name in names:
        sys.modules.pop(name, None)


def runtime_counts(rounds, k=K):
    """(acceptance_length, verify_steps, total_accepted_draft_tokens, total_draft_tokens) of the
    trtspec.runtime engine path for these verify steps: (draft, tokens emitted, END last when the
    end id ended the request, whether the step ended the request); draft-model drafts, K per step."""
    stats = RequestStats(max_positions=k)
    for draft, emitted, last in rounds:
        a = 0
        while a < min(len(draft), len(emitted)) and draft[a] == emitted[a]:
            a += 1
        stats.steps.append(counted_step(Step(a, min(a + 1, len(draft))), len(emitted) if last else None))
    return stats.acceptance_length, stats.verify_steps, stats.accepted_draft_tokens, k * stats.verify_steps


def run(mod, monkeypatch, answers, k=K, n=N, arrays=None):
    """_bls on prompt [11, 4] with the target answering `answers` in turn: (pieces, counters)."""
    real, answers = mod.TritonPythonModel._call, list(answers)

    def scripted(self, model, ids, n, end_id, pad_id, extra, logits=False):
        return real(self, model, ids, n, end_id, pad_id, extra, logits) if model != "tensorrt_llm" \
            else (answers.pop(0), None)
    monkeypatch.setattr(mod.TritonPythonModel, "_call", scripted)
    m = mod.TritonPythonModel.__new__(mod.TritonPythonModel)
    m.target_model, m.draft_model, m.draft_logits = "tensorrt_llm", "tensorrt_llm_draft", False
    req = Request()
    req.inputs = dict(arrays or {})
    stats = mod.__dict__["Acceptance"]()
    pieces = list(m._bls(req, [11, 4], n, k, None, stats))
    assert not answers  # every scripted round ran
    return pieces, (stats.length, stats.steps, stats.accepted, stats.drafted)


@pytest.mark.parametrize("answers, rounds, arrays", [
    # the second round's first token is the end id: the executor answers nothing
    ([[3, 1, 1], []], [(DRAFT, [3, 1, 1], False), (DRAFT, [END], True)], None),
    # the first round's first token is the end id
    ([[]], [(DRAFT, [END], True)], None),
    # the end id after two accepted drafts: the answer holds both
    ([[3, 1, 1], [3, 5]], [(DRAFT, [3, 1, 1], False), (DRAFT, [3, 5, END], True)], None),
    # a stop word (4, 3) completed by an accepted draft ends the request: nothing after it is compared
    ([[3]], [(DRAFT, [3], True)], stop_list((4, 3))),
], ids=["end-id-first", "end-id-first-round", "end-id-after-drafts", "stop-word-on-a-draft"])
def test_a_round_that_ends_the_request_counts_as_the_runtime_counts_it(mod, monkeypatch, answers, rounds, arrays):
    pieces, counts = run(mod, monkeypatch, answers, arrays=arrays)
    assert pieces == [[t for t in emitted if t != END] for _, emitted, _ in rounds]  # an empty last piece: stats
    assert counts == pytest.approx(runtime_counts(rounds))


def test_a_round_answering_nothing_is_one_step_with_nothing_accepted(mod, monkeypatch):
    """The first case above in numbers: 2 steps, 1 accepted, AL 1.5 (not 2.0 over one step)."""
    assert run(mod, monkeypatch, [[3, 1, 1], []])[1] == (1.5, 2, 1, 2 * K)


@pytest.mark.parametrize("responses, n, arrays, steps", [
    ([[1, 1], [1], []], 5, None, 4),  # the end id ended it: its step counts (an empty last response)
    ([[1, 1], [1]], 5, None, 4),  # the same without that empty response
    ([[1, 1], [1]], 3, None, 3),  # the length ended it
    ([[1, 1]], 5, stop_list((1, 1)), 2),  # a stop word ended it
])
def test_plain_decoding_counts_a_step_per_target_token_and_the_end_ids(mod, monkeypatch, responses, n, arrays, steps):
    """K = 0: the runtime engine path reports verify_steps = target calls, one per emitted token,
    the end id included."""
    def stream(model, inputs, outputs, decoupled, *args):
        assert model == "tensorrt_llm"
        return iter({"output_ids": np.array([[r]], np.int32).reshape(1, 1, -1),
                     "sequence_length": np.array([[len(r)]], np.int32)} for r in responses)
    monkeypatch.setattr(mod, "bls", stream)
    m = mod.TritonPythonModel.__new__(mod.TritonPythonModel)
    m.target_model = "tensorrt_llm"
    req = Request()
    req.inputs = dict(arrays or {})
    stats = mod.__dict__["Acceptance"]()
    pieces = list(m._bls(req, [11, 4], n, 0, None, stats))
    assert [t for p in pieces for t in p] == [t for r in responses for t in r]
    assert (stats.steps, stats.accepted, stats.drafted, stats.length) == (steps, 0, 0, 1.0)


def test_round_accepted_is_counted_step(mod):
    """The BLS model's restatement (numpy only: it runs without trtspec) of counted_step's accepted
    count, for every accepted / emitted / last within a round of up to 6 drafts."""
    for accepted in range(7):
        for emitted in range(1, 9):
            for last in (False, True):
                want = counted_step(Step(accepted, min(accepted + 1, 6)), emitted if last else None).accepted
                assert mod.round_accepted(accepted, emitted, last) == want, (accepted, emitted, last)
