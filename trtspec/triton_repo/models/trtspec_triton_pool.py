"""The worker pool of trtspec's decoupled python-backend models (generate, spec_decode, cpu_llm),
copied next to each model.py with trtspec_triton_common.py and serving_rules.py.

A decoupled model's execute() must return at once; each request then streams its responses from
one of the pool's threads (Workers), which also answers cancel messages, drains for `trtspec
serve` and guarantees every request a final response (PooledModel: the model's shape). Standard
library only, plus the helpers of trtspec_triton_common.
"""

import os
import queue
import threading
import time
import traceback

import triton_python_backend_utils as pb_utils

from serving_rules import CONTROL_DIR, INFLIGHT_SUFFIX, STOP_FILE
from trtspec_triton_common import (CANCEL, FINAL, STREAM_ID, USER_ERRORS, CalleeError, Cancelled, Stopped,
                                   check_running, draining, error_response, parameters, release_ended_streams,
                                   request_parameter)


class Workers:
    """N daemon threads serving requests of a decoupled model: `execute` returns at once and each
    request streams its responses from a worker. Daemon threads (not a ThreadPoolExecutor, whose
    threads are joined at interpreter exit) so that a stub never outlives its server; `stop` is
    set by finalize() and checked by the request loops between steps.

    Every request handed over gets a final response, whatever happens: the handler's, an error
    (a RequestError, trtspec's own error or a called model's error (CalleeError) as the client's
    message, anything else with its type and a traceback in the log),
    or "the server is shutting down" for a request still queued when the pool closes. A decoupled
    stream left open is not harmless: the caller's BLS iterator waits on it without a timeout,
    and the python backend drains unfinished iterators before it lets a stub finish unloading."""

    def __init__(self, handler, count: int, name: str, front: bool = False):
        self.handler, self.stop, self.name, self.front = handler, threading.Event(), name, front
        self.busy = 0  # requests handed over and not finished (the in-flight count serve drains)
        self.jobs = queue.Queue()
        # stream names (STREAM_ID) of the requests handed over and not finished, and those of them
        # a caller cancelled; both are changed on the execute thread (submit, cancel) and by workers
        self.live, self.cancelled, self.names = set(), set(), threading.Lock()
        self.threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                        for i in range(max(1, int(count)))]
        for t in self.threads:
            t.start()

    def submit(self, request) -> None:
        # the sender is taken here, on the stub's execute thread, so a request never queues without one
        name = request_parameter(request, STREAM_ID)
        sender = request.get_response_sender()
        if self.front and draining():
            _send_final_error(sender, Cancelled("the server is shutting down: not taking new requests"))
            return
        with self.names:
            self.busy += 1
            if name:
                self.live.add(name)
        self.jobs.put((request, sender))

    def cancel(self, name) -> None:
        """A caller stopped reading the stream `name`: its worker stops at its next check. A name
        no longer live (the stream already ended) is dropped, so the set cannot grow."""
        with self.names:
            if name in self.live:
                self.cancelled.add(name)

    def is_cancelled(self, request) -> bool:
        name = request_parameter(request, STREAM_ID)
        return bool(name) and name in self.cancelled

    def _forget(self, request) -> None:
        name = request_parameter(request, STREAM_ID)
        with self.names:
            self.busy -= 1
            if name:
                self.live.discard(name)
                self.cancelled.discard(name)

    def _report_drain(self) -> None:
        """While serve drains, tell it how many requests are still in flight (see DRAIN_FILE)."""
        if self.front and draining():
            path = os.path.join(os.environ[CONTROL_DIR], self.name + INFLIGHT_SUFFIX)
            tmp = f"{path}.{threading.get_ident()}.tmp"  # one per worker thread: they report concurrently
            try:
                with open(tmp, "w") as f:
                    f.write(str(self.busy))
                os.replace(tmp, path)
            except OSError:  # serve removed its directory: it has stopped waiting
                pass

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                request, sender = self.jobs.get(timeout=0.2)
            except queue.Empty:
                self._report_drain()
                continue
            self.serve(request, sender)

    def serve(self, request, sender) -> None:
        try:
            if self.stop.is_set():
                raise Cancelled("the server is shutting down")
            self.handler(request, sender)
        except Stopped as e:
            release_ended_streams(request)
            if request_parameter(request, STREAM_ID) and not self.front:  # a trtspec model's BLS call
                _send_final(sender)
            else:  # a client: tell it why
                _send_final_error(sender, e)
        except USER_ERRORS as e:
            release_ended_streams(request)
            _send_final_error(sender, e)
        except Exception as e:  # a bug or a failed BLS call: report it, keep serving
            release_ended_streams(request)
            if self.front and draining():  # Triton refused the stream's next BLS call: it is stopping
                _send_final_error(sender, Cancelled("the server is shutting down: the request did not finish "
                                                    "within the drain period"))
                return
            if isinstance(e, CalleeError):  # the callee's own one-line message (see CalleeError)
                _send_final_error(sender, e)
                return
            traceback.print_exc()
            _send_final_error(sender, f"{type(e).__name__}: {e}")
        finally:
            self._forget(request)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the pool: running requests end at their next step, queued ones are refused."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        while True:
            try:
                _, sender = self.jobs.get_nowait()
            except queue.Empty:
                return
            _send_final_error(sender, Cancelled("the server is shutting down"))


def _send_final(sender) -> None:
    try:
        sender.send(flags=FINAL)
    except Exception:  # the stream is already closed
        pass


def _send_final_error(sender, message) -> None:
    try:
        sender.send(error_response(message), flags=FINAL)
    except Exception:  # the stream is already closed (a cancelled request): nothing left to tell
        pass


class PooledModel:
    """The shape of generate, spec_decode and cpu_llm: a decoupled python model whose requests
    each run on one of `max_concurrency` worker threads (parameter, default 8). execute() only
    hands requests to the pool; finalize() stops it. A model implements `setup(params)` (its
    parameters as {key: string}) and `handle(request, sender)`, which sends the responses, the
    last one with FINAL, and raises RequestError for a bad request."""

    pool_name = "model"
    front = False  # the model clients call (generate): it refuses new requests while serve drains

    def initialize(self, args):
        params = parameters(args)
        self.setup(params)
        self.workers = Workers(self.handle, int(params.get("max_concurrency") or 8), self.pool_name, self.front)

    def setup(self, params) -> None:
        raise NotImplementedError

    def handle(self, request, sender) -> None:
        raise NotImplementedError

    def execute(self, requests):
        for r in requests:
            name = request_parameter(r, CANCEL)
            if name:  # a cancel message (see CANCEL): answered here, never queued behind busy workers
                self.workers.cancel(name)
                r.get_response_sender().send(pb_utils.InferenceResponse(output_tensors=[]), flags=FINAL)
            else:
                self.workers.submit(r)
        return None

    def finalize(self):
        self.workers.close()

    def check_running(self, request) -> None:
        """Raise Cancelled when the client cancelled `request` (directly, or its BLS caller by a
        cancel message) or the model is being unloaded."""
        if self.workers.is_cancelled(request):
            raise Stopped("request cancelled by its caller")
        if draining(STOP_FILE):
            raise Stopped("the server is shutting down: the request did not finish within the drain period")
        check_running(request, self.workers.stop)
