"""generate's EAGLE route stops the call behind a request that stops early, without a server:
generate.py and trtspec_triton_common.py run on a stand-in for triton_python_backend_utils,
with the parameters `trtspec triton` writes for each flavor.

What is pinned: once the request is cancelled, generate reads no further from the
tensorrt_llm_<profile> stream and cancels it, by the response iterator's cancel() where the
python backend has one (the TensorRT-LLM container: the C++ tensorrtllm backend honors it), else
by the cancel message when the profile is trtspec's cpu_llm (cpu flavor), and sends nothing to a
C++ backend that could not read it. (The cpu flavor's real cancel path, against a live server, is
tests/integration/test_triton_cancel.py.)
"""

from __future__ import annotations

import importlib
import json
import sys
import types

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from triton_fixtures import TREE_A, TREE_B, build_dir, cpu_repository, tiny_eagle, tiny_tokenizer_dir, \
    tuning_file
from triton_repo.test_models_common import HELPER_MODULES, MODELS
from trtspec.triton_repo.repo import RepoRequest, make_repository

CHOICES = {"chat": TREE_A, "code": TREE_B}
SEEN_BEFORE_CANCEL = 3  # responses of the LLM stream generate reads before its client cancels


@pytest.fixture(scope="module")
def generate_params(tmp_path_factory):
    """generate's parameters in a trtllm and a cpu EAGLE repository, as `trtspec triton` writes them."""
    d = tmp_path_factory.mktemp("generate_eagle").resolve()
    tok = tiny_tokenizer_dir(d / "tok")
    trt = d / "trt_repo"
    make_repository(RepoRequest(tuning=tuning_file(d / "te" / "tuning.json", "eagle", CHOICES), flavor="trtllm",
                                out=trt, engines=build_dir(d / "build", "eagle", tok)))
    cpu, _ = cpu_repository(d / "cpu", "eagle", tiny_eagle(d / "ck"), CHOICES)

    def params(repo):
        cfg = text_format.Parse((repo / "generate" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        return {k: v.string_value for k, v in cfg.parameters.items()}
    return {"trtllm": params(trt), "cpu": params(cpu)}


class Tensor:
    def __init__(self, name, value):
        self.name, self.value = name, np.asarray(value)

    def as_numpy(self):
        return self.value


class Response:
    def __init__(self, **outputs):
        self.outputs = {k: Tensor(k, v) for k, v in outputs.items()}

    def has_error(self):
        return False


class LlmStream:
    """tensorrt_llm_<profile>'s endless token stream (what a decoding engine sends until stopped)."""

    def __init__(self, with_cancel):
        self.pulled, self.cancelled = 0, 0
        if with_cancel:
            self.cancel = self._cancel

    def _cancel(self):
        self.cancelled += 1

    def __iter__(self):
        return self

    def __next__(self):
        self.pulled += 1
        return Response(output_ids=[[[7]]], sequence_length=[[1]], total_accepted_draft_tokens=[[self.pulled]],
                        total_draft_tokens=[[4 * self.pulled]])


class Server:
    """Answers generate's BLS calls: preprocessing, postprocessing, the LLM stream, cancel messages."""

    def __init__(self, with_cancel):
        self.streams, self.messages, self.with_cancel = [], [], with_cancel

    def exec(self, req, decoupled):
        if req.model == "preprocessing":
            return Response(INPUT_ID=[[5, 6, 7]], REQUEST_INPUT_LEN=[[3]], OUT_END_ID=[[2]], OUT_PAD_ID=[[0]])
        if req.model == "postprocessing":
            n = int(req.inputs["SEQUENCE_LENGTH"].reshape(-1)[0])
            return Response(OUTPUT=[[b"x" * n]])
        if "trtspec_cancel" in req.parameters:
            self.messages.append((req.model, req.parameters["trtspec_cancel"], sorted(req.inputs)))
            return iter([Response()])
        stream = LlmStream(self.with_cancel)
        self.streams.append((req.model, req.parameters.get("trtspec_stream_id"), stream))
        return stream


def fake_pb_utils(server):
    pb = types.ModuleType("triton_python_backend_utils")
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

    class InferenceRequest:
        def __init__(self, model_name, inputs, requested_output_names, parameters=None):
            self.model, self.parameters = model_name, dict(parameters or {})
            self.inputs = {t.name: t.value for t in inputs}

        def exec(self, decoupled=False):
            return server.exec(self, decoupled)

    pb.InferenceRequest, pb.Tensor, pb.TritonError = InferenceRequest, Tensor, str
    pb.get_output_tensor_by_name = lambda resp, name: resp.outputs.get(name)
    pb.get_input_tensor_by_name = lambda req, name: req.inputs.get(name)
    pb.InferenceResponse = Sent
    return pb


class Sent:
    """A response generate sent: its outputs by name."""

    def __init__(self, output_tensors=None, error=None):
        self.outputs, self.error = {t.name: t.value.reshape(-1)[0] for t in output_tensors or []}, error


class ClientRequest:
    """A streaming generate request that its client cancels once generate has read a few responses."""

    def __init__(self, server):
        self.server = server
        self.inputs = {"text_input": Tensor("text_input", np.array([[b"t5 t17"]], dtype=object)),
                       "max_tokens": Tensor("max_tokens", [[200]]), "stream": Tensor("stream", [[True]]),
                       "workload": Tensor("workload", np.array([[b"chat"]], dtype=object))}

    def is_cancelled(self):
        return any(s.pulled >= SEEN_BEFORE_CANCEL for _, _, s in self.server.streams)

    def parameters(self):
        return "{}"


class Sender:
    def __init__(self):
        self.sent = []

    def send(self, response=None, flags=0):
        self.sent.append((response, flags))


def load_generate(monkeypatch, params, with_cancel, server=None):
    """generate.py initialized with `params` on the stand-in pb_utils answering from `server`; returns
    (model, server, trtspec_triton_common). Call forget_models() when done."""
    server = server or Server(with_cancel)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_pb_utils(server))
    monkeypatch.syspath_prepend(str(MODELS))
    forget_models()
    module = importlib.import_module("generate")
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps({"parameters": {k: {"string_value": v}
                                                                  for k, v in params.items()}})})
    return model, server, importlib.import_module("trtspec_triton_common")


def forget_models():
    for name in ("generate", *HELPER_MODULES):
        sys.modules.pop(name, None)


@pytest.fixture()
def load(monkeypatch):
    yield lambda *args, **kw: load_generate(monkeypatch, *args, **kw)
    forget_models()


def run_cancelled(model, server, common):
    request, sender = ClientRequest(server), Sender()
    with pytest.raises(common.Cancelled, match="request cancelled"):
        model._generate(request, sender, 1)
    model.finalize()
    [(llm, stream_id, stream)] = server.streams
    assert llm.startswith("tensorrt_llm_") and model.mode == "eagle"
    assert stream.pulled == SEEN_BEFORE_CANCEL, "generate read on after its client cancelled"
    return llm, stream_id, stream


@pytest.mark.parametrize("flavor", ["trtllm", "cpu"])
def test_a_cancelled_eagle_request_cancels_the_llm_stream_with_the_iterators_cancel(generate_params, load, flavor):
    """A python backend with BLS cancellation (the TensorRT-LLM container): cancel() on the stream,
    whatever the callee, and no cancel message on top."""
    model, server, common = load(generate_params[flavor], with_cancel=True)
    _, _, stream = run_cancelled(model, server, common)
    assert stream.cancelled == 1 and server.messages == []


def test_without_bls_cancellation_the_cpu_flavor_sends_cpu_llm_the_cancel_message(generate_params, load):
    """Python backend r24.10 (the bundled tritonserver): cpu_llm gets the cancel message naming the stream."""
    assert generate_params["cpu"]["llm_cancel_messages"] == "true"
    model, server, common = load(generate_params["cpu"], with_cancel=False)
    llm, stream_id, _ = run_cancelled(model, server, common)
    # only required inputs the call itself sent: cpu_llm has no num_draft_tokens, and Triton refuses
    # a request with an input the model does not declare
    assert stream_id and server.messages == [(llm, stream_id, ["input_lengths", "request_output_len"])]


def test_without_bls_cancellation_nothing_is_sent_to_a_cpp_backend(generate_params, load):
    """The trtllm flavor's profiles are the C++ tensorrtllm backend, which has no cancel message."""
    assert "llm_cancel_messages" not in generate_params["trtllm"]
    model, server, common = load(generate_params["trtllm"], with_cancel=False)
    _, stream_id, _ = run_cancelled(model, server, common)
    assert stream_id is None and server.messages == []


@pytest.mark.parametrize("flavor", ["trtllm", "cpu"])
def test_a_request_beyond_the_repositorys_limits_is_refused_before_any_engine_call(generate_params, load, flavor):
    """The repository carries the limits (routing `limits`: the engines' max_input_len / max_seq_len,
    or the checkpoints' positions); generate refuses past them after tokenizing, calling nothing else."""
    routing = json.loads(generate_params[flavor]["routing"])
    limits = routing["limits"]
    assert limits["max_seq_len"] == (8192 if flavor == "trtllm" else 256)  # fake engine / tiny model positions
    assert routing["in_flight_batching"] is (flavor == "trtllm")  # what a perf sweep records of the server
    model, server, common = load(generate_params[flavor], with_cancel=True)
    request = ClientRequest(server)
    request.inputs["max_tokens"] = Tensor("max_tokens", [[limits["max_seq_len"] - 2]])  # + a 3-token prompt
    with pytest.raises(common.RequestError, match=rf"^max_tokens: {limits['max_seq_len'] - 2} output tokens after a "
                                                  rf"3-token prompt exceed this repository's max_seq_len="):
        model._generate(request, Sender(), 1)
    assert server.streams == [] and server.messages == []
    request.inputs["max_tokens"] = Tensor("max_tokens", [[limits["max_seq_len"] - 3]])  # exactly fits
    model.workers.stop.set()  # stop the allowed request at its first step: only the admission matters here
    with pytest.raises(common.Cancelled):
        model._generate(request, Sender(), 1)
    assert len(server.streams) == 1
    model.finalize()


class EndsOnEos:
    """A draft-target repository's spec_decode: a round of 3 tokens, then a round whose only token was
    the end id, which spec_decode does not return (as TensorRT-LLM's executor, executor_tokens): no
    tokens, only that round's counters."""
    EOS = 2

    def exec(self, req, decoupled):
        if req.model == "preprocessing":
            return Response(INPUT_ID=[[5, 6, 7]], REQUEST_INPUT_LEN=[[3]], OUT_END_ID=[[self.EOS]], OUT_PAD_ID=[[0]])
        if req.model == "postprocessing":
            ids = req.inputs["TOKENS_BATCH"].reshape(-1)[:int(req.inputs["SEQUENCE_LENGTH"].reshape(-1)[0])]
            return Response(OUTPUT=[["".join(chr(87 + int(t)) for t in ids if t != self.EOS).encode()]])
        assert req.model == "spec_decode", req.model
        return iter([Response(output_ids=[[[10, 11, 12]]], sequence_length=[[3]], acceptance_length=[[3.0]],
                              total_accepted_draft_tokens=[[2]], total_draft_tokens=[[3]]),
                     Response(output_ids=np.zeros((1, 1, 0), np.int32), sequence_length=[[0]],
                              acceptance_length=[[2.0]],
                              total_accepted_draft_tokens=[[2]], total_draft_tokens=[[6]])])


def test_a_stream_whose_last_round_decodes_to_no_text_still_sends_the_final_statistics(load):
    """perf reads a request's statistics from its last response with outputs: a stream that ends on
    an end id must send them (with empty text) rather than stop at the previous round's numbers."""
    band = {"concurrency": 1, "num_draft_tokens": 3}
    routing = {"mode": "draft-target", "workloads": {"chat": [band]}, "default": {"bands": [band]}}
    model, _, _ = load({"routing": json.dumps(routing), "max_concurrency": "1"}, False, EndsOnEos())
    sent = {}
    for stream in (False, True):
        request, sender = ClientRequest(None), Sender()
        request.inputs["stream"] = Tensor("stream", [[stream]])
        model._generate(request, sender, 1)
        assert sender.sent[-1][1] == 1  # FINAL
        sent[stream] = [r.outputs for r, _ in sender.sent if r is not None]
    model.finalize()
    [whole], pieces = sent[False], sent[True]
    assert whole["text_output"] == b"abc" and b"".join(p["text_output"] for p in pieces) == b"abc"
    assert [p["num_output_tokens"] for p in pieces] == [3, 3] and pieces[-1]["text_output"] == b""
    for name in ("num_output_tokens", "acceptance_length", "total_draft_tokens", "total_accepted_draft_tokens"):
        assert pieces[-1][name] == whole[name], name
    assert (whole["num_output_tokens"], whole["acceptance_length"], whole["total_draft_tokens"]) == (3, 2.0, 6)


class CountersLast(EndsOnEos):
    """A stream whose last response carries updated counters and no tokens."""

    def exec(self, req, decoupled):
        if req.model != "spec_decode":
            return super().exec(req, decoupled)
        return iter([Response(output_ids=[[[10, 11, 12]]], sequence_length=[[3]], acceptance_length=[[3.0]],
                              total_accepted_draft_tokens=[[2]], total_draft_tokens=[[3]]),
                     Response(acceptance_length=[[2.5]], total_accepted_draft_tokens=[[2]], total_draft_tokens=[[9]])])


def test_a_stream_whose_last_response_carries_counters_only_sends_them(load):
    band = {"concurrency": 1, "num_draft_tokens": 3}
    routing = {"mode": "draft-target", "workloads": {"chat": [band]}, "default": {"bands": [band]}}
    model, _, _ = load({"routing": json.dumps(routing), "max_concurrency": "1"}, False, CountersLast())
    request, sender = ClientRequest(None), Sender()
    request.inputs["stream"] = Tensor("stream", [[True]])
    model._generate(request, sender, 1)
    model.finalize()
    last = [r.outputs for r, _ in sender.sent if r is not None][-1]
    assert (last["total_draft_tokens"], last["acceptance_length"], last["num_output_tokens"]) == (9, 2.5, 3)


class LlmapiModel:
    """TensorRT-LLM's llmapi model.py as generate sees it: every streamed response carries the whole
    completion so far (CompletionOutput.text), and no token ids or counts."""
    TEXTS = ["t5", "t5 t17", "t5 t17", "t5 t17 t9 t9"]

    def exec(self, req, decoupled):
        from trtspec.upstream.triton import LLMAPI_TEXT_IS_CUMULATIVE

        assert LLMAPI_TEXT_IS_CUMULATIVE  # the upstream fact this stand-in plays
        assert req.model == "tensorrt_llm_k2" and bool(req.inputs["streaming"].reshape(-1)[0])
        return iter([Response(text_output=np.array([t.encode()], dtype=object)) for t in self.TEXTS])


def test_the_llmapi_route_streams_the_new_text_and_counts_its_tokens(load, tmp_path):
    """The llmapi model resends the whole text each time: generate forwards only what is new (the
    client's concatenation is the text, not its prefixes repeated), and num_output_tokens is the
    text's token count by the target's tokenizer, the count genai-perf would make (not 0)."""
    from transformers import AutoTokenizer

    tok_dir = tiny_tokenizer_dir(tmp_path / "tok")
    entry = {"model": "tensorrt_llm_k2", "num_draft_tokens": 2}
    routing = {"mode": "llmapi", "band": 1, "workloads": {"chat": entry}, "default": {"source": "x", **entry},
               "models": []}
    model, _, _ = load({"routing": json.dumps(routing), "max_concurrency": "1", "tokenizer_dir": str(tok_dir)},
                       False, LlmapiModel())
    final = LlmapiModel.TEXTS[-1]
    want = len(AutoTokenizer.from_pretrained(tok_dir)(final, add_special_tokens=False)["input_ids"])
    assert want > 1
    for stream in (True, False):
        request, sender = ClientRequest(None), Sender()
        request.inputs["stream"] = Tensor("stream", [[stream]])
        model._generate(request, sender, 1)
        outs = [r.outputs for r, _ in sender.sent if r is not None]
        assert b"".join(o["text_output"] for o in outs) == final.encode(), stream
        counts = [int(o["num_output_tokens"]) for o in outs]
        assert counts[-1] == want and counts == sorted(counts), (stream, counts)
        assert sender.sent[-1][1] == 1  # FINAL
        assert all(o["route"] == b"chat@1:tensorrt_llm_k2" for o in outs)
    model.finalize()


class AnyLlmapiModel:
    """An llmapi model that answers every call with one final text (which model: not checked)."""

    def exec(self, req, decoupled):
        return iter([Response(text_output=np.array([b"t5 t17"], dtype=object))])


def test_only_eagle3_llmapi_models_flag_sampled_requests(load, tmp_path):
    """One-model EAGLE-3 decodes greedily at any temperature, but tensorrt_llm_k0 (no
    speculative_config) samples: a sampled request routed there is not reported as greedy."""
    target = tiny_tokenizer_dir(tmp_path / "hf_target")  # generate counts tokens with the target's tokenizer
    head = tmp_path / "hf_eagle3"
    head.mkdir()
    for d, arch in ((target, "LlamaForCausalLM"), (head, "LlamaForCausalLMEagle3")):
        (d / "config.json").write_text(json.dumps({"architectures": [arch], "torch_dtype": "bfloat16",
                                                   "eagle_config": {"use_aux_hidden_state": True}}))
    repo = tmp_path / "repo"
    make_repository(RepoRequest(tuning=tuning_file(tmp_path / "t" / "tuning.json", "eagle3",
                                                   {"chat": [3, 2], "math": [0, 0]}),
                                flavor="llmapi", out=repo, ckpt=target, draft_ckpt=head))
    cfg = text_format.Parse((repo / "generate" / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    model, _, _ = load({k: v.string_value for k, v in cfg.parameters.items()}, False, AnyLlmapiModel())
    flags = {}
    for workload in ("chat", "math"):
        request, sender = ClientRequest(None), Sender()
        request.inputs.update(workload=Tensor("workload", np.array([[workload.encode()]], dtype=object)),
                              temperature=Tensor("temperature", np.array([[0.8]], np.float32)))
        model._generate(request, sender, 1)
        flags[workload] = [r.outputs["sampling_fallback"] for r, _ in sender.sent if r is not None][-1]
    model.finalize()
    assert flags == {"chat": b"greedy", "math": b""}


def test_an_llmapi_refusal_names_the_min_input_the_client_sent(load, tmp_path):
    """genai-perf sends min_tokens under its 0.x name min_length; the llmapi model takes neither,
    and the refusal names the input the request has."""
    routing = {"mode": "llmapi", "workloads": {}, "default": {"model": "llm_k3", "num_draft_tokens": 3}, "band": 1}
    model, server, common = load({"routing": json.dumps(routing), "max_concurrency": "1",
                                  "tokenizer_dir": str(tiny_tokenizer_dir(tmp_path / "tok"))}, False)
    request = ClientRequest(server)
    request.inputs["min_length"] = Tensor("min_length", [[4]])
    with pytest.raises(common.RequestError, match=r"^min_length: the llmapi flavor's model takes no min_length"):
        model._generate(request, Sender(), 1)
    assert server.streams == []
    model.finalize()
