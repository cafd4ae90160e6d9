"""perf.sampling and the sampling inputs of a perf request: which settings each workload is sent
with (the perf options, else tuning.json's workload sampling, else greedy), per-prompt seeds."""

from __future__ import annotations

import struct
import types

import pytest

from trtspec.errors import TrtspecError
from trtspec.options import GREEDY_SAMPLING, Sampling
from trtspec.perf.client import ModelInfo, build_request, sampling_inputs
from trtspec.perf.options import PerfSettings
from trtspec.perf.sampling import accept_rule, request_seed, workload_sampling

INFO = ModelInfo("generate", {"text_input", "max_tokens", "stream", "temperature", "top_k", "top_p", "seed"}, [],
                 True)


def tuning(**workloads):
    return types.SimpleNamespace(workloads={k: types.SimpleNamespace(**v) for k, v in workloads.items()})


def test_options_then_tuning_json_then_greedy():
    t = tuning(chat={"sampling": {"temperature": 0.7, "top_p": 0.9, "seed": 3}, "accept_rule": "exact_match"},
               code={})
    assert workload_sampling(PerfSettings(), t, "chat") == Sampling(temperature=0.7, top_p=0.9, seed=3)
    assert workload_sampling(PerfSettings(), t, "code") == GREEDY_SAMPLING  # tuning.json without sampling
    assert workload_sampling(PerfSettings(), None, "chat") == GREEDY_SAMPLING
    assert workload_sampling(PerfSettings(temperature=0.5, top_k=20), t, "chat") == Sampling(temperature=0.5, top_k=20)
    assert accept_rule(t, "chat") == "exact_match" and accept_rule(t, "code") is None and accept_rule(None, "x") is None


def test_seeds_are_per_prompt_and_reproducible():
    s = Sampling(temperature=0.8)
    a = request_seed(0, s, "chat", "p1")
    assert a == request_seed(0, s, "chat", "p1") and 0 <= a < 2 ** 63
    others = {request_seed(0, s, "chat", "p2"), request_seed(1, s, "chat", "p1"), request_seed(0, s, "code", "p1"),
              request_seed(0, Sampling(temperature=0.8, seed=9), "chat", "p1")}
    assert a not in others and len(others) == 4


def test_sampling_inputs_are_the_front_models_tensors():
    assert sampling_inputs(INFO, GREEDY_SAMPLING, 5) == []
    got = {n: (dt, raw) for n, dt, raw in sampling_inputs(INFO, Sampling(temperature=0.8, top_k=4, top_p=0.9), 5)}
    assert got["temperature"][0] == "FP32" and struct.unpack("<f", got["temperature"][1])[0] == pytest.approx(0.8)
    assert got["seed"] == ("UINT64", struct.pack("<Q", 5)) and got["top_k"] == ("INT32", struct.pack("<i", 4))
    assert got["top_p"][0] == "FP32"
    assert set(sampling_inputs(INFO, Sampling(temperature=0.8), 5)) == {x for x in sampling_inputs(
        INFO, Sampling(temperature=0.8, top_k=4, top_p=0.9), 5) if x[0] in ("temperature", "seed")}
    req = build_request("generate", INFO, "hi", 8, None, None, sampling_inputs(INFO, Sampling(temperature=0.8), 5))
    assert [i.name for i in req.inputs] == ["text_input", "max_tokens", "stream", "temperature", "seed"]
    plain = ModelInfo("other", {"text_input", "max_tokens"}, [], True)
    with pytest.raises(TrtspecError, match="^perf.temperature: model 'other' has no 'temperature' input"):
        sampling_inputs(plain, Sampling(temperature=0.8), 5)


def test_top_p_without_temperature_is_refused():
    with pytest.raises(ValueError, match="top_k / top_p need a temperature"):
        PerfSettings(top_p=0.9)
    with pytest.raises(ValueError, match="temperature"):
        PerfSettings(temperature=-1.0)
