"""A stand-in for Triton's streaming endpoint (ModelStreamInfer only), in the test process.

Why: cutting a run at a known point needs a server whose answers the test controls, and a real
tritonserver takes seconds to start. This one answers each request at once with one token and its
final flag, except prompts starting with "hang": those it holds, unanswered, until the test ends, and
counts (`held`), so a test can wait until every client worker is stuck on one.
"""

from __future__ import annotations

import struct
import threading
from concurrent import futures

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from trtspec.perf.client import ModelInfo
from trtspec.triton_repo.ports import free_port

INFO = ModelInfo("fake", {"text_input", "max_tokens"}, ["text_output", "num_output_tokens"], True)


def _answer(model: str) -> service_pb2.ModelStreamInferResponse:
    resp = service_pb2.ModelInferResponse(model_name=model)
    resp.outputs.add(name="text_output", datatype="BYTES", shape=[1, 1])
    resp.outputs.add(name="num_output_tokens", datatype="INT32", shape=[1, 1])
    resp.raw_output_contents.extend([struct.pack("<I", 3) + b"tok", struct.pack("<i", 1)])
    resp.parameters["triton_final_response"].bool_param = True
    return service_pb2.ModelStreamInferResponse(infer_response=resp)


class FakeTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self):
        self.lock, self.release = threading.Lock(), threading.Event()
        self.answered, self.held, self.held_changed = 0, 0, threading.Condition()
        self.server = grpc.server(futures.ThreadPoolExecutor(16))
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(self, self.server)
        self.url = f"127.0.0.1:{free_port()}"
        self.server.add_insecure_port(self.url)

    def ModelStreamInfer(self, requests, context):
        for req in requests:
            text = req.raw_input_contents[0][4:]
            if text.startswith(b"hang"):
                with self.held_changed:
                    self.held += 1
                    self.held_changed.notify_all()
                self.release.wait()
                return
            with self.lock:
                self.answered += 1
            yield _answer(req.model_name)

    def wait_held(self, n: int, timeout_s: float) -> bool:
        """Block until `n` requests are held (or the timeout passes); whether they are."""
        with self.held_changed:
            return self.held_changed.wait_for(lambda: self.held >= n, timeout_s)

    def __enter__(self) -> "FakeTriton":
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.stop(0)
