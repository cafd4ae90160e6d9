"""perf.client.Stream: one worker's stream across its requests, against a stand-in for grpc.aio's
stream call that behaves as the real one does where it matters (checked against a live server:
cancel() on an open stream whose last request has ended returns True and ends the call, and a
write on an ended call raises asyncio.InvalidStateError "RPC already finished")."""

from __future__ import annotations

import asyncio
import time

from tritonclient.grpc import service_pb2

from trtspec.perf.client import Stream

TIMEOUT_S = 0.1


def final_response() -> service_pb2.ModelStreamInferResponse:
    msg = service_pb2.ModelStreamInferResponse()
    msg.infer_response.parameters["triton_final_response"].bool_param = True
    return msg


class Call:
    """A bidirectional stream call: each write is answered by one final response. `late`: the
    answer comes in while the event loop is held up past the request's timeout, so that the
    response and the request's timer are due in the same loop turn (a busy client loop)."""

    def __init__(self, late: bool):
        self.late, self.cancelled, self.answer = late, False, None

    async def write(self, request) -> None:
        if self.cancelled:
            raise asyncio.InvalidStateError("RPC already finished.")
        loop = asyncio.get_running_loop()
        self.answer = loop.create_future()
        if not self.late:
            self.answer.set_result(final_response())
            return

        def busy() -> None:  # the loop stalls; the answer's I/O callback then runs before the timer
            time.sleep(TIMEOUT_S * 2)
            loop.call_at(loop.time() - 1.0, self.answer.set_result, final_response())

        loop.call_soon(busy)

    async def read(self):
        if self.cancelled:
            raise asyncio.CancelledError()
        return await self.answer

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class Stub:
    def __init__(self, late: list[bool]):
        self.late, self.calls = list(late), []

    def ModelStreamInfer(self) -> Call:
        self.calls.append(Call(self.late.pop(0)))
        return self.calls[-1]


def test_a_timer_that_fires_as_the_final_response_arrives_does_not_break_the_next_request():
    """The timer and the final response due in one loop turn: the response resumes the request,
    but the timer has cancelled its call by then. That request took longer than its timeout (a
    timeout); the next one on the stream must open a new call instead of writing on the cancelled
    one (InvalidStateError, which no caller handles: the whole perf invocation died)."""
    stub = Stub([True, False])
    stream = Stream(stub, "127.0.0.1:1")

    async def two():
        return [await stream.send(object(), f"p{i}", TIMEOUT_S, True) for i in range(2)]

    first, second = asyncio.run(two())
    assert first.status == "timeout" and f"within {TIMEOUT_S:g} s" in first.error
    assert second.status == "ok" and second.e2e is not None
    assert len(stub.calls) == 2 and stub.calls[0].cancelled and not stub.calls[1].cancelled
