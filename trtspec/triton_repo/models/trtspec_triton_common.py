"""Helpers shared by trtspec's python-backend models (copied next to each model.py).

Standard library + numpy only: this file also runs in the TensorRT-LLM Triton container.
"""

import json
import queue
import threading
import traceback

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
TRUE = ("true", "1", "yes", "on")


class UserError(Exception):
    """A bad request: sent back to the client as the response error, without a traceback."""


class Cancelled(UserError):
    """The client cancelled the request, or the server is shutting down: stop early, but still
    close the response stream (an unclosed decoupled request would hold the server's shutdown)."""


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
        raise Cancelled("request cancelled")
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


def tensor(request, name):
    """The input as a numpy array, or None when the client did not send it."""
    t = pb_utils.get_input_tensor_by_name(request, name)
    return None if t is None else t.as_numpy()


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
    """A token-id input of one request as a list (the first batch row, cut at its length)."""
    arr = tensor(request, ids_name)
    if arr is None:
        raise UserError(f"missing input '{ids_name}'")
    row = arr.reshape(-1) if arr.ndim <= 1 else arr.reshape(arr.shape[0], -1)[0]
    n = scalar(request, len_name) if len_name else None
    return [int(x) for x in (row[: int(n)] if n is not None else row)]


def out(name, value, dtype):
    return pb_utils.Tensor(name, np.asarray(value, dtype=dtype))


def error_response(message):
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(message)))


def bls(model, inputs, outputs, decoupled, stop=None):
    """Call another model. Yields {output name: array} per non-empty response; raises on errors.
    `inputs`: {name: numpy array with the batch dimension}.

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
    request = pb_utils.InferenceRequest(
        model_name=model, inputs=[pb_utils.Tensor(k, v) for k, v in inputs.items()],
        requested_output_names=list(outputs))
    responses = request.exec(decoupled=True) if decoupled else [request.exec()]
    try:
        for resp in responses:
            if resp.has_error():
                raise RuntimeError(f"{model}: {resp.error().message()}")
            got = {}
            for name in outputs:
                t = pb_utils.get_output_tensor_by_name(resp, name)
                if t is not None:
                    got[name] = t.as_numpy()
            if got:
                yield got
            if stop is not None and stop.is_set():
                return
    finally:
        if decoupled:
            _ended_streams().append(responses)


class Workers:
    """N daemon threads serving requests of a decoupled model: `execute` returns at once and each
    request streams its responses from a worker. Daemon threads (not a ThreadPoolExecutor, whose
    threads are joined at interpreter exit) so that a stub never outlives its server; `stop` is
    set by finalize() and checked by the request loops between steps."""

    def __init__(self, handler, count: int, name: str):
        self.handler, self.stop = handler, threading.Event()
        self.jobs = queue.Queue()
        self.threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                        for i in range(max(1, int(count)))]
        for t in self.threads:
            t.start()

    def submit(self, request) -> None:
        self.jobs.put(request)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                request = self.jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            sender = request.get_response_sender()
            try:
                self.handler(request, sender)
            except UserError as e:
                _send_final_error(sender, e)
            except Exception as e:  # a bug or a failed BLS call: report it, keep serving
                traceback.print_exc()
                _send_final_error(sender, f"{type(e).__name__}: {e}")

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=2.0)


def _send_final_error(sender, message) -> None:
    try:
        sender.send(error_response(message), flags=FINAL)
    except Exception:  # the stream is already closed (a cancelled request): nothing left to tell
        pass
