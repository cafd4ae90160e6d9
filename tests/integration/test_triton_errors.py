"""What a client of a live cpu-flavor server gets back at the edges of the request contract.

- A request that spec_decode refuses (generate passes the client's end_id and sampling settings on
  to it) gets spec_decode's own one-line message, named after the model, with no exception type of
  generate's BLS call in front and no traceback in the server log: the refusal is the client's
  doing, not a server bug.
- The cpu `tensorrt_llm` answers as TensorRT-LLM's executor: the end id that ends a request is not
  among its output_ids (the executor's sequence length does not count it), streamed or not.
"""

from __future__ import annotations

import pytest

from serve_helpers import request, start_cli, stop_cli
from triton_fixtures import cpu_repository, tiny_pair

pytest.importorskip("tritonclient.grpc")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [5, 17, 300]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_errors").resolve()
    repo, _ = cpu_repository(d, "draft-target", tiny_pair(d), {"chat": [2, 1]})
    proc, ports = start_cli(repo, d / "server.log")
    yield {"url": f"127.0.0.1:{ports['grpc']}", "log": d / "server.log"}
    stop_cli(proc, repo)


def refusal(server, **extra) -> str:
    with pytest.raises(Exception) as e:
        request(server["url"], "t5 t17 t300", "chat", extra=extra)
    return e.value.message()


def test_a_request_spec_decode_refuses_gets_its_one_line_message(server):
    assert refusal(server, end_id=(-5, "INT32")) == "spec_decode: end_id: -5; expected a token id, or -1 for none"
    message = refusal(server, temperature=(0.7, "FP32"), top_k=(-1, "INT32"))
    assert message.startswith("spec_decode: runtime_top_k (top_k): ") and "\n" not in message
    assert "Traceback" not in server["log"].read_text()
    pieces, _ = request(server["url"], "t5 t17 t300", "chat", max_tokens=3)  # and the server still serves
    assert pieces


def tokens(server, streaming: bool, end_id: int) -> list[int]:
    pieces, _ = request(server["url"], "", model="tensorrt_llm", extra={
        "input_ids": (PROMPT, "INT32"), "input_lengths": (len(PROMPT), "INT32"), "request_output_len": (6, "INT32"),
        "end_id": (end_id, "INT32"), "streaming": (streaming, "BOOL"), "exclude_input_in_output": (True, "BOOL")})
    return [int(t) for p in pieces for t in p.as_numpy("output_ids").reshape(-1)]


@pytest.mark.parametrize("streaming", [False, True], ids=["one-response", "streamed"])
def test_the_cpu_tensorrt_llm_returns_no_end_id(server, streaming):
    greedy = tokens(server, streaming, -1)  # -1: no end id, the request runs to its length
    assert len(greedy) == 6 and greedy[2] not in greedy[:2]
    assert tokens(server, streaming, greedy[2]) == greedy[:2]


def test_top_p_zero_is_greedy_as_on_the_engines(server):
    """top_p 0 without a top_k is greedy for TensorRT-LLM (regularizeTopKTopP): at temperature 0.9
    the live server answers with the greedy text, through spec_decode and the cpu tensorrt_llm."""
    def text(**extra):
        pieces, _ = request(server["url"], "t5 t17 t300", "chat", max_tokens=8, extra=extra)
        return "".join(p.as_numpy("text_output").reshape(-1)[0].decode() for p in pieces)

    assert text(temperature=(0.9, "FP32"), top_p=(0.0, "FP32"), seed=(3, "UINT64")) == text()
    direct = {"input_ids": (PROMPT, "INT32"), "input_lengths": (len(PROMPT), "INT32"),
              "request_output_len": (6, "INT32"), "end_id": (-1, "INT32"), "exclude_input_in_output": (True, "BOOL")}
    greedy = tokens(server, False, -1)
    pieces, _ = request(server["url"], "", model="tensorrt_llm", extra={
        **direct, "temperature": (0.9, "FP32"), "runtime_top_p": (0.0, "FP32"), "seed": (3, "UINT64")})
    assert [int(t) for p in pieces for t in p.as_numpy("output_ids").reshape(-1)] == greedy
