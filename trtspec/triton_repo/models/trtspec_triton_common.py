"""Helpers shared by trtspec's python-backend models (copied next to each model.py): request and
tensor access, BLS calls and their cancellation, draining. The worker pool that runs a decoupled
model's requests is trtspec_triton_pool.py.

Standard library + numpy only (plus trtspec's error class when trtspec is importable, which is the
cpu flavor): this file also runs in the TensorRT-LLM Triton container. The serving rules
themselves (bands, brace syntax, request bounds, acceptance) are in serving_rules.py, copied
along with this file.
"""

import json
import os
import sys
import threading
import traceback
import uuid
from collections import namedtuple

import numpy as np
import triton_python_backend_utils as pb_utils

from serving_rules import CONTROL_DIR, DRAIN_FILE, STOP_FILE, RequestError, check_positions, one_row, output_len

try:  # cpu flavor: the models run trtspec in-process, and its errors are the request's fault
    from trtspec.errors import TrtspecError

    USER_ERRORS = (RequestError, TrtspecError)
except ImportError:  # TensorRT-LLM container: trtspec is not installed
    USER_ERRORS = (RequestError,)

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
TRUE = ("true", "1", "yes", "on")

# Cancellation across a BLS call. The python backend we serve with (r24.10, tritonserver 2.51)
# has no way to cancel a BLS request: its response iterator has no cancel(), and dropping it only
# stops the caller from reading, while the callee decodes on to request_output_len (measured: a
# 1000-token request burned 77 s of CPU after its client had gone). So a caller names each
# cancellable call with a request parameter (STREAM_ID) and, when it stops reading early, sends
# the callee a second, tiny request whose CANCEL parameter names that call; the callee's execute()
# answers it at once and its worker sees the name at its next check_running(), i.e. within one
# decoding step. Only PooledModels understand it (spec_decode, cpu_llm), so it is sent to nothing else.
# Where the python backend has Triton's own BLS cancellation (the response iterator's cancel(), in
# the TensorRT-LLM containers), that is used instead, for every callee: the C++ tensorrtllm backend
# then cancels the request in its executor (it polls every cancellation_check_period_ms), and a
# PooledModel sees request.is_cancelled() at its next step.
STREAM_ID = "trtspec_stream_id"
CANCEL = "trtspec_cancel"
# Draining (cpu flavor, `trtspec serve`): Triton 2.51 refuses every new request once it has its
# SIGTERM, BLS calls included, so a stream in flight dies at its next postprocessing call ("Server
# not ready"). So serve drains first: it creates DRAIN_FILE in the directory named by CONTROL_DIR
# (its environment, inherited by every stub); the front model (generate) then refuses new requests
# with "the server is shutting down" and, while idle between requests, writes its in-flight count
# to <CONTROL_DIR>/<pool name>.inflight; serve sends Triton its SIGTERM once that is 0 (or the
# drain period is over). Then it creates STOP_FILE, and every pooled model stops its streams at
# their next step: after Triton's SIGTERM a cancel message could no longer reach spec_decode, and a
# stream left decoding holds its caller's unload (the python backend drains a stub's BLS iterators
# before it finalizes it) past Triton's exit timeout. The names are in serving_rules, which serve
# imports too.
# the required inputs of spec_decode / tensorrt_llm, so that a cancel message passes Triton's checks:
# a message carries those the cancelled call sent (cpu_llm has no num_draft_tokens and refuses it)
CANCEL_INPUTS = {"input_lengths": np.array([[0]], np.int32), "request_output_len": np.array([[1]], np.int32),
                 "num_draft_tokens": np.array([[0]], np.int32)}


class CalleeError(RuntimeError):
    """A model this one called (BLS) answered with an error: its message, after the callee's name,
    is what the client gets, in one line. The callee already said why in its own log (a traceback
    where it was a bug); a traceback of the caller's BLS call would add nothing."""


class Cancelled(RequestError):
    """The client cancelled the request, or the server is shutting down: stop early, but still
    close the response stream (an unclosed decoupled request would hold the server's shutdown)."""


class Stopped(Cancelled):
    """A stop whose cause the BLS caller knows (it cancelled the stream, or serve ended the drain,
    which the caller sees too): a callee ends a stream of trtspec's own caller (a request naming a
    STREAM_ID) with a bare final response, no error; a client calling it directly gets the error.
    The python backend we serve with (r24.10) never finalizes a caller's instance once it has
    received an error response in the middle of a decoupled BLS stream (measured: generate did not
    unload, tritonserver hit its exit timeout and exited 1); the caller tells its client itself."""


def check_running(request, stop) -> None:
    """Raise Cancelled when the model is being unloaded or the client cancelled `request`.

    request.is_cancelled() is a round trip through the stub's one stub-to-parent queue, so it
    also tells that every BLS stream this thread retired before it (see `bls`) is out of the
    stub's iterator map: those are released here, in Python, holding the GIL."""
    if stop is not None and stop.is_set():
        raise Cancelled("the server is shutting down")
    ended = len(_ended_streams())
    try:
        cancelled = bool(request.is_cancelled())
    except Exception:  # the request may already be released: no round trip was made
        return
    if cancelled:  # (a cancellation, once seen, is answered from a cache: no round trip either)
        raise Stopped("request cancelled")
    del _ended_streams()[:ended]


def release_ended_streams(request) -> None:
    """check_running's release without its checks, for a request that ended on an error: a stream
    retired by a request that raised before its next round trip would otherwise stay referenced
    on an idle thread until that thread's next request."""
    ended = len(_ended_streams())
    try:
        if request.is_cancelled():  # answered from a cache: no round trip was made
            return
    except Exception:  # released already: no round trip either
        return
    del _ended_streams()[:ended]


_thread = threading.local()


def _ended_streams() -> list:
    """This worker thread's decoupled BLS response iterators that `bls` finished with."""
    if not hasattr(_thread, "streams"):
        _thread.streams = []
    return _thread.streams


def parameters(args) -> dict:
    """The model config's `parameters` as {key: string}."""
    cfg = json.loads(args["model_config"])
    return {k: v.get("string_value", "") for k, v in (cfg.get("parameters") or {}).items()}


def is_true(value, default=False) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, str):
        return value.strip().lower() in TRUE
    return bool(value)


def load_tokenizer(tokenizer_dir: str, **kwargs):
    """The model's Hugging Face tokenizer, for preprocessing / postprocessing. Tokenizers need no
    deep-learning framework: transformers is kept from importing torch (about 5 s of start-up per
    stub on a small CPU box, and memory); it reads these variables when first imported."""
    for name in ("USE_TORCH", "USE_TF", "USE_FLAX"):
        os.environ.setdefault(name, "0")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import AutoTokenizer  # lazy: only the tokenizer models load transformers

    return AutoTokenizer.from_pretrained(tokenizer_dir, legacy=False, trust_remote_code=False, **kwargs)


def tensor(request, name):
    """The input as a numpy array, or None when the client did not send it. Every input of our
    models has the batch dimension first: a request of several rows is refused (see one_row)."""
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return None
    arr = t.as_numpy()
    if arr.ndim >= 2:
        one_row(arr.shape[0], name)
    return arr


def max_positions(*checkpoint_dirs) -> int:
    """The positions every one of these TRT-LLM checkpoints holds (the smallest
    max_position_embeddings of their config.json; 0 when none states one): a cpu-flavor request's
    prompt + output tokens must fit (see check_positions)."""
    found = []
    for d in checkpoint_dirs:
        if d:
            with open(os.path.join(d, "config.json")) as f:
                n = json.load(f).get("max_position_embeddings")
            if n:
                found.append(int(n))
    return min(found, default=0)


def scalar(request, name, default=None):
    """A [1]- or [batch, 1]-shaped input as one Python value (bytes decoded), or `default`."""
    arr = tensor(request, name)
    if arr is None or arr.size == 0:
        return default
    value = arr.reshape(-1)[0]
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8", errors="replace")
    return value.item() if hasattr(value, "item") else value


def ids_input(request, ids_name, len_name=None):
    """A token-id input of one request as a list (the first batch row, cut at its length). A length
    beyond the row, or below 1, is refused: read as given it would silently serve a shorter prompt
    than the client said, or none."""
    arr = tensor(request, ids_name)
    if arr is None:
        raise RequestError(f"missing input '{ids_name}'")
    row = arr.reshape(-1) if arr.ndim <= 1 else arr.reshape(arr.shape[0], -1)[0]
    n = scalar(request, len_name) if len_name else None
    if n is not None and not 1 <= int(n) <= row.size:
        raise RequestError(f"{len_name}: {int(n)}; expected 1 to the length of '{ids_name}' ({row.size} tokens)")
    return [int(x) for x in (row[: int(n)] if n is not None else row)]


LlmRequest = namedtuple("LlmRequest", "prompt output_len end_id streaming")


def llm_request(request, positions=0) -> LlmRequest:
    """What every model taking tensorrt_llm's request tensors reads first (spec_decode and the cpu
    tensorrt_llm): the prompt, request_output_len (>= 1), end_id (None if not sent), streaming;
    refused when prompt + output exceed `positions` (0: not checked here, e.g. a TensorRT-LLM
    engine, which enforces its own max_input_len / max_seq_len)."""
    req = LlmRequest(ids_input(request, "input_ids", "input_lengths"),
                     output_len(scalar(request, "request_output_len", 0), "request_output_len"),
                     scalar(request, "end_id"), bool(scalar(request, "streaming", False)))
    check_positions(len(req.prompt), req.output_len, positions)
    return req


def executor_tokens(piece):
    """The tokens TensorRT-LLM's executor returns for one trtspec.runtime step (a RowStep): an end
    id that finishes the request is not among them. Its sampling and accept kernels do not advance
    the sequence length for the end id, and the batch manager (TrtGptModelInflightBatching::
    updateRequests) adds only the tokens within that length to the request, which is what a
    response returns, so output_ids / sequence_length / num_output_tokens leave it out. Every
    cpu-flavor model that stands for that executor (cpu_llm, spec_decode) returns these."""
    return piece.tokens[:-1] if piece.finish_reason == "eos" else piece.tokens


def out(name, value, dtype):
    return pb_utils.Tensor(name, np.asarray(value, dtype=dtype))


def error_response(message):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(message)))


def request_parameter(request, key):
    """A request parameter as a string, or None (absent, or a backend without parameters())."""
    try:
        params = request.parameters()
    except Exception:
        return None
    if isinstance(params, str):
        params = json.loads(params or "{}")
    value = (params or {}).get(key)
    return None if value is None else str(value)


def bls(model, inputs, outputs, decoupled, stop=None, cancellable=False):
    """Call another model. Yields {output name: array} per non-empty response; raises on errors.
    `inputs`: {name: numpy array with the batch dimension}. A decoupled call the caller stops
    reading before its last response (close() of this generator, or `stop`) is cancelled, by the
    iterator's cancel() where it exists, else (cancellable: the callee is a PooledModel) by a
    cancel message (see CANCEL).

    A decoupled call's response iterator is not dropped here but retired to this thread's list,
    which check_running empties. The reason is a bug of the python backend we serve with
    (r24.10, in tritonserver 2.51 of nvidia-pytriton 0.7; fixed upstream in r24.12, "Hold GIL when
    deleting numpy array"): the iterator keeps every response, each output tensor keeps the
    numpy array as_numpy() made, and when the iterator's last owner is the stub's own map, the
    stub frees it on its stub-to-parent thread, which does not hold the GIL. Freeing Python
    objects there races with the worker threads (the cpu-flavor generate stub died with
    "malloc(): unaligned fastbin chunk detected" under 8 concurrent streams). A stream retired
    before an is_cancelled() round trip has left that map by the time the round trip returns, so
    the last reference is then ours and is dropped with the GIL held."""
    stream_id = uuid.uuid4().hex if cancellable else None
    request = pb_utils.InferenceRequest(
        model_name=model, inputs=[pb_utils.Tensor(k, v) for k, v in inputs.items()],
        requested_output_names=list(outputs), **({"parameters": {STREAM_ID: stream_id}} if stream_id else {}))
    responses = request.exec(decoupled=True) if decoupled else [request.exec()]
    finished = False
    try:
        for resp in responses:
            if resp.has_error():
                raise CalleeError(f"{model}: {resp.error().message()}")
            got = {}
            for name in outputs:
                t = pb_utils.get_output_tensor_by_name(resp, name)
                if t is not None:
                    got[name] = t.as_numpy()
            if got:
                yield got
            if stop is not None and stop.is_set():
                return
        finished = True
    finally:
        if decoupled:
            _ended_streams().append(responses)
            if not finished:
                _stop_call(model, responses, stream_id, inputs)


def _stop_call(model, responses, stream_id, inputs) -> None:
    """The caller stopped reading a decoupled call early: cancel it (see CANCEL)."""
    cancel = getattr(responses, "cancel", None)
    if cancel is not None:
        cancel()
    # (once serve has stopped the drain, the callee stops itself, and Triton, stopping, would not
    # answer a new request: the message would hang this thread)
    elif stream_id and not draining(STOP_FILE):
        _send_cancel(model, stream_id, {k: v for k, v in CANCEL_INPUTS.items() if k in inputs})


def _send_cancel(model, stream_id, inputs) -> None:
    """Tell `model` (a PooledModel) to stop the stream named `stream_id` (see CANCEL)."""
    message = pb_utils.InferenceRequest(
        model_name=model, inputs=[pb_utils.Tensor(k, v) for k, v in inputs.items()],
        requested_output_names=[], parameters={CANCEL: stream_id})
    try:
        answers = message.exec(decoupled=True)
        for answer in answers:  # one empty final response, sent at once by the callee's execute()
            if answer.has_error():  # refused (e.g. by Triton's input checks): say so in the server log
                print(f"cancel message to {model} refused: {answer.error().message()}", file=sys.stderr)
        _ended_streams().append(answers)
    except Exception:  # the callee is gone (unloading): its own stop ends the stream
        traceback.print_exc()


def draining(marker=DRAIN_FILE) -> bool:
    """serve has begun a drain (DRAIN_FILE) or ended it (STOP_FILE); never outside `trtspec serve`."""
    d = os.environ.get(CONTROL_DIR)
    return bool(d) and os.path.exists(os.path.join(d, marker))


def load_device(params: dict) -> dict:
    """load_models' keyword arguments for the model's `device` parameter (triton_repo/runtime_device.py):
    none on the CPU, the runtime's default, so a CPU repository loads exactly as before."""
    device = params.get("device") or "cpu"
    return {} if device == "cpu" else {"device": device}
