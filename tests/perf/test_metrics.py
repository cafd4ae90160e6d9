"""The per-request metrics (trtspec/perf/metrics.py) from streams as the client reads them: a fake
ModelStreamInfer call hands perf.client.Stream the responses of a trtspec `generate`, at set times,
and the record must give genai-perf's TTFT / E2E / ITL on those times (its
LLMProfileDataParser._parse_requests) with the server's token count."""

from __future__ import annotations

import asyncio
import struct
import types

import pytest
from tritonclient.grpc import service_pb2

from trtspec.perf import client
from trtspec.perf.metrics import itl, to_record


def response(t: float, text: str | None = None, tokens: int | None = None, final: bool = False):
    """(arrival time, the stream message): text_output / num_output_tokens when given."""
    r = service_pb2.ModelInferResponse()
    if text is not None:
        raw = text.encode()
        r.outputs.add(name="text_output", datatype="BYTES", shape=[1, 1])
        r.raw_output_contents.append(struct.pack("<I", len(raw)) + raw)
    if tokens is not None:
        r.outputs.add(name="num_output_tokens", datatype="INT32", shape=[1, 1])
        r.raw_output_contents.append(struct.pack("<i", tokens))
    r.parameters["triton_final_response"].bool_param = final
    return t, service_pb2.ModelStreamInferResponse(infer_response=r)


class FakeCall:
    """One ModelStreamInfer call: each read moves the clock to the response's arrival time."""

    def __init__(self, clock: list, messages: list):
        self.clock, self.messages = clock, list(messages)

    async def write(self, request) -> None:
        pass

    async def read(self):
        t, msg = self.messages.pop(0)
        self.clock[0] = t
        return msg

    def cancel(self) -> None:
        pass


def measure(monkeypatch, messages: list):
    """The record of one request sent at t = 0 and answered by `messages`."""
    clock = [0.0]
    monkeypatch.setattr(client, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    stub = types.SimpleNamespace(ModelStreamInfer=lambda: FakeCall(clock, messages))
    result = asyncio.run(client.Stream(stub, "fake").send(service_pb2.ModelInferRequest(), "p0", 60.0, True))
    assert result.status == "ok", result.error
    return to_record(0, result, 0.0)


def test_a_stream_ending_on_an_end_id_alone_counts_no_token_for_that_round(monkeypatch):
    """A chain flavor's last round brought only the end id, which no model returns (as TensorRT-LLM's
    executor): the response carrying that round's counters has empty text and the same count. TTFT
    and E2E are genai-perf's (first response, final response); ITL is the whole decode over the
    tokens after the first, as genai-perf's, whose re-tokenized text has no end id either; that
    round brought no token, so it adds no chunk gap."""
    rec = measure(monkeypatch, [response(1.0, "ab", 2), response(1.5, "c", 3), response(2.0, "", 3),
                                response(2.001, final=True)])
    assert (rec.ttft_s, rec.e2e_s, rec.output_tokens, rec.responses) == (1.0, 2.001, 3, 2)
    assert rec.itl_s == pytest.approx((2.001 - 1.0) / 2)
    assert rec.chunk_gaps_s == pytest.approx([0.5])


def test_tokens_without_text_yet_are_an_arrival(monkeypatch):
    """A last round whose tokens decode to no text (a special token postprocessing drops): empty
    text, more tokens; the server's count decides, so it is a token arrival with its chunk gap."""
    rec = measure(monkeypatch, [response(1.0, "ab", 2), response(1.5, "c", 3), response(2.0, "", 4),
                                response(2.001, final=True)])
    assert (rec.ttft_s, rec.e2e_s, rec.output_tokens, rec.responses) == (1.0, 2.001, 4, 3)
    assert rec.itl_s == pytest.approx((2.001 - 1.0) / 3)
    assert rec.chunk_gaps_s == pytest.approx([0.5, 0.5])


def test_the_llmapi_flavors_restated_count_is_the_count_and_not_an_arrival(monkeypatch):
    """llmapi: per-piece counts while streaming (5 here), then the whole text's count (genai-perf's,
    4) in an empty-text response: that count is the request's, and no token arrived with it."""
    rec = measure(monkeypatch, [response(1.0, "Hello", 2), response(1.4, " world", 5), response(1.41, "", 4),
                                response(1.42, final=True)])
    assert (rec.ttft_s, rec.e2e_s, rec.output_tokens, rec.responses) == (1.0, 1.42, 4, 2)
    assert rec.itl_s == pytest.approx(0.42 / 3) and rec.chunk_gaps_s == pytest.approx([0.4])


def test_an_answer_in_one_final_response_has_no_itl(monkeypatch):
    """Every token in the response that ended the request (an unstreamed answer): nothing was timed
    after the first token, so there is no inter-token latency, not an ITL of 0 (genai-perf
    computes it only from 2 responses on)."""
    rec = measure(monkeypatch, [response(1.0, "abc", 3, final=True)])
    assert (rec.ttft_s, rec.e2e_s, rec.output_tokens) == (1.0, 1.0, 3)
    assert rec.itl_s is None
    assert itl(1.0, 1.0, 3) is None and itl(1.0, 0.2, 5) == pytest.approx(0.2)
