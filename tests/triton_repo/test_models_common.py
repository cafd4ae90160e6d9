"""trtspec_triton_common's plumbing without a server: a stand-in for triton_python_backend_utils.

What is pinned here: a decoupled BLS stream is released only after an is_cancelled() round trip
(the python backend of tritonserver 2.51 frees an iterator it still holds on a thread without the
GIL; see bls()), the worker pool answers every request it took, and trtspec's own error reaches
the client as its message.
"""

from __future__ import annotations

import gc
import importlib
import sys
import threading
import types
import weakref
from pathlib import Path

import numpy as np
import pytest

from trtspec.triton_repo.models import HELPERS

MODELS = Path(__file__).resolve().parents[2] / "trtspec" / "triton_repo" / "models"
HELPER_MODULES = tuple(Path(name).stem for name in HELPERS)  # what a model.py imports next to it


class Stream:
    """A decoupled BLS response iterator: two responses, then the end."""

    def __init__(self, values):
        self.values = list(values)

    def __iter__(self):
        return self

    def __next__(self):
        if not self.values:
            raise StopIteration
        return Response(self.values.pop(0))


class Response:
    def __init__(self, value):
        self.value = value

    def has_error(self):
        return False


class Sender:
    def __init__(self):
        self.sent, self.done = [], threading.Event()

    def send(self, response=None, flags=0):
        self.sent.append((response, flags))
        if flags:
            self.done.set()


class Request:
    def __init__(self, cancelled=False):
        self._cancelled, self.sender, self.round_trips = cancelled, Sender(), 0

    def is_cancelled(self):
        self.round_trips += 1
        return self._cancelled

    def get_response_sender(self):
        return self.sender


def fake_pb_utils(streams):
    pb = types.ModuleType("triton_python_backend_utils")
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

    class InferenceRequest:
        def __init__(self, model_name, inputs, requested_output_names):
            self.model = model_name

        def exec(self, decoupled=False):
            stream = Stream([1, 2])
            streams.append(weakref.ref(stream))
            return stream if decoupled else Response(7)

    pb.InferenceRequest = InferenceRequest
    pb.Tensor = lambda name, value: (name, value)
    pb.get_output_tensor_by_name = lambda resp, name: types.SimpleNamespace(as_numpy=lambda: np.array([resp.value]))
    pb.InferenceResponse = lambda output_tensors=None, error=None: ("response", error)
    pb.TritonError = str
    return pb


@pytest.fixture()
def common(monkeypatch):
    streams: list = []
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_pb_utils(streams))
    monkeypatch.syspath_prepend(str(MODELS))
    for name in HELPER_MODULES:
        sys.modules.pop(name, None)
    helpers = [importlib.import_module(name) for name in HELPER_MODULES]
    yield types.SimpleNamespace(**{k: v for m in helpers for k, v in vars(m).items()}), streams  # all their names
    for name in HELPER_MODULES:
        sys.modules.pop(name, None)


def alive(streams):
    gc.collect()
    return sum(ref() is not None for ref in streams)


def test_a_finished_decoupled_stream_is_released_only_after_an_is_cancelled_round_trip(common):
    m, streams = common
    got = [r["output_ids"].item() for r in m.bls("tensorrt_llm", {}, ["output_ids"], True)]
    assert got == [1, 2] and alive(streams) == 1  # held: the stub may still hold it too
    request = Request()
    m.check_running(request, threading.Event())
    assert request.round_trips == 1 and alive(streams) == 0


def test_a_cancelled_request_releases_nothing(common):
    m, streams = common
    list(m.bls("tensorrt_llm", {}, ["output_ids"], True))
    with pytest.raises(m.Cancelled, match="request cancelled"):
        m.check_running(Request(cancelled=True), None)  # answered from a cache: no round trip to rely on
    assert alive(streams) == 1
    m.check_running(Request(), None)
    assert alive(streams) == 0


def test_an_abandoned_stream_is_retired_too(common):
    m, streams = common
    it = m.bls("tensorrt_llm", {}, ["output_ids"], True)
    next(it)
    it.close()
    assert alive(streams) == 1
    m.check_running(Request(), None)
    assert alive(streams) == 0


def test_non_decoupled_calls_keep_nothing(common):
    m, streams = common
    assert next(m.bls("preprocessing", {}, ["output_ids"], False))["output_ids"].item() == 7
    assert m._ended_streams() == []


def test_the_pool_answers_every_request_and_maps_library_errors_by_class(common):
    m, _ = common
    from trtspec.errors import TrtspecError

    class Sub(TrtspecError):
        pass

    def handler(request, sender):
        raise {"lib": Sub("profile.max_k: too large"), "bad": m.RequestError("max_tokens: expected >= 1, got 0"),
               "bug": KeyError("x")}[request.kind]

    pool = m.Workers(handler, 2, "t")
    requests = []
    for kind in ("lib", "bad", "bug"):
        r = Request()
        r.kind = kind
        requests.append(r)
        pool.submit(r)
    for r in requests:
        assert r.sender.done.wait(10)
    messages = [r.sender.sent[-1][0][1] for r in requests]
    assert messages == ["profile.max_k: too large", "max_tokens: expected >= 1, got 0", "KeyError: 'x'"]
    pool.close()


def test_requests_still_queued_when_the_pool_closes_get_a_final_error(common):
    m, _ = common
    release = threading.Event()
    pool = m.Workers(lambda request, sender: release.wait(10), 1, "t")
    first, queued = Request(), Request()
    pool.submit(first)
    pool.submit(queued)
    pool.stop.set()  # what close() does first; the worker is still busy with `first`
    release.set()
    pool.close(timeout=5)
    assert queued.sender.done.is_set() and "shutting down" in str(queued.sender.sent[-1][0][1])


def test_a_stop_the_caller_knows_ends_a_callees_stream_with_a_bare_final(common):
    """A callee (spec_decode, cpu_llm) stopped by its caller's cancel or by the end of the drain
    sends no error response, only the final flag: python backend r24.10 never finalizes a caller
    that received an error in the middle of a BLS stream. The front model tells its client why."""
    m, _ = common

    def handler(request, sender):
        sender.send("piece")
        raise m.Stopped("request cancelled by its caller")

    callee, front = m.Workers(handler, 1, "spec_decode"), m.Workers(handler, 1, "generate", front=True)
    from_generate, direct, to_front = Request(), Request(), Request()
    from_generate.parameters = lambda: {m.STREAM_ID: "s1"}  # generate names its cancellable calls
    callee.submit(from_generate)
    callee.submit(direct)  # a client calling spec_decode / tensorrt_llm itself
    front.submit(to_front)
    for r in (from_generate, direct, to_front):
        assert r.sender.done.wait(10)
    told = [("piece", 0), (("response", "request cancelled by its caller"), 1)]
    assert from_generate.sender.sent == [("piece", 0), (None, 1)]
    assert direct.sender.sent == told and to_front.sender.sent == told
    callee.close()
    front.close()


def test_models_load_the_runtime_where_the_parameter_says(common):
    """The `device` parameter (triton_repo/runtime_device.py) as load_models' arguments."""
    load_device = common[0].load_device
    assert load_device({}) == {} and load_device({"device": "cpu"}) == {}
    assert load_device({"device": "cuda:1"}) == {"device": "cuda:1"}


def test_an_input_length_outside_the_input_ids_row_is_refused(common, monkeypatch):
    """input_lengths says how many of the row's tokens are the prompt: 1 to the row's length. More
    than the row (or 0) was read as the whole row (or passed on as an empty prompt)."""
    m, _ = common
    monkeypatch.setattr(sys.modules["triton_python_backend_utils"], "get_input_tensor_by_name", lambda req, name: (
        types.SimpleNamespace(as_numpy=lambda: req.inputs[name]) if name in req.inputs else None), raising=False)
    request = Request()
    for n, want in ((2, [5, 17]), (3, [5, 17, 300])):
        request.inputs = {"input_ids": np.array([[5, 17, 300]], np.int32), "input_lengths": np.array([[n]], np.int32)}
        assert m.ids_input(request, "input_ids", "input_lengths") == want
    for n in (4, 0):
        request.inputs["input_lengths"] = np.array([[n]], np.int32)
        with pytest.raises(m.RequestError, match=rf"^input_lengths: {n}; expected 1 to the length of 'input_ids' "
                                                 r"\(3 tokens\)$"):
            m.ids_input(request, "input_ids", "input_lengths")
