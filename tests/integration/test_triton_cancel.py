"""Cancellation on a live cpu-flavor server: a client that cancels a long `generate` stream must stop
the decoding behind it (generate -> spec_decode over BLS, where python backend 2.51 has no BLS
cancellation: generate sends spec_decode a cancel message, see trtspec_triton_common.CANCEL).

What is measured: the CPU time all server processes (tritonserver and its python stubs) spend in
the seconds after the cancel, against what the same request costs when it is left to run, and
the latency of the next short request against one taken before the cancel.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path

import numpy as np
import pytest

from serve_helpers import DT, PROMPTS, bounded, procs_mentioning, request, start_cli, stop_cli
from tiny_models import make_eagle_head, make_hf_model, save_tiny_tokenizer
from triton_fixtures import TREE_A, TREE_B, cpu_repository
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.pair import convert_pair

grpcclient = pytest.importorskip("tritonclient.grpc")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

LONG = 3000  # tokens: many seconds of decoding on the small pair below if nothing stops it
NEVER = 5000  # an end_id outside the vocabulary: the long request runs to LONG tokens
TICK = 100  # /proc/<pid>/stat counts CPU time in clock ticks of 1/100 s


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of `pids` (those still alive), in seconds."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def cpu_over(pids: list[int], seconds: float) -> float:
    before = cpu_seconds(pids)
    time.sleep(seconds)
    return cpu_seconds(pids) - before


def small_pair(d: Path) -> Path:
    """A draft-target pair a little larger than the tests' tiny one (milliseconds per step, not
    microseconds, and 4096 positions), so that an uncancelled long request is plainly measurable."""
    dims = dict(num_key_value_heads=1, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                max_position_embeddings=4096)
    make_hf_model("llama", d / "hf", **dims)
    make_hf_model("llama", d / "draft_hf", seed=1, **{**dims, "num_hidden_layers": 1})
    for m in ("hf", "draft_hf"):
        save_tiny_tokenizer(d / m)
    convert_pair(d / "hf", d / "draft_hf", d / "pair", dtype="float32")
    return d / "pair"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_cancel").resolve()
    pair = small_pair(d)
    repo, _ = cpu_repository(d, "draft-target", pair, DT)
    proc, ports = start_cli(repo, d / "server.log")
    yield {"repo": repo, "url": f"127.0.0.1:{ports['grpc']}", "pids": procs_mentioning(str(repo))}
    stop_cli(proc, repo)


def start_long(url: str, max_tokens: int = LONG):
    """A streaming chat generate request of `max_tokens` tokens that ignores eos; returns (client,
    queue of (result, error))."""
    c = grpcclient.InferenceServerClient(url)
    q: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    inputs = []
    for name, value, dtype, np_dtype in (("text_input", PROMPTS["chat"].encode(), "BYTES", object),
                                         ("max_tokens", max_tokens, "INT32", np.int32), ("stream", True, "BOOL", bool),
                                         ("workload", b"chat", "BYTES", object),
                                         ("end_id", NEVER, "INT32", np.int32)):
        x = grpcclient.InferInput(name, [1, 1], dtype)
        x.set_data_from_numpy(np.array([[value]], dtype=np_dtype))
        inputs.append(x)
    c.async_stream_infer("generate", inputs, enable_empty_final_response=True)
    return c, q


def timed_short(url: str) -> float:
    t0 = time.monotonic()
    pieces, _ = request(url, PROMPTS["code"], "code", max_tokens=16)
    assert pieces
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def eagle_server(tmp_path_factory):
    """A cpu-flavor EAGLE repository (generate -> tensorrt_llm_<profile>, trtspec's cpu_llm) over an
    EAGLE checkpoint of the small pair's size."""
    d = tmp_path_factory.mktemp("serve_cancel_eagle").resolve()
    make_hf_model("llama", d / "hf", num_key_value_heads=1, hidden_size=256, intermediate_size=512,
                  num_hidden_layers=4, max_position_embeddings=4096)
    save_tiny_tokenizer(d / "hf")
    make_eagle_head(d / "hf", d / "head")
    convert_eagle(d / "hf", d / "head", d / "eagle", dtype="float32", num_eagle_layers=4)
    repo, _ = cpu_repository(d, "eagle", d / "eagle", {"chat": TREE_A, "code": TREE_B})
    proc, ports = start_cli(repo, d / "server.log")
    yield {"repo": repo, "url": f"127.0.0.1:{ports['grpc']}", "pids": procs_mentioning(str(repo))}
    stop_cli(proc, repo)


def test_cancelled_stream_stops_decoding(server):
    cancel_stops_decoding(server)


def test_cancelled_eagle_stream_stops_decoding(eagle_server):
    """The EAGLE route: generate cancels the tensorrt_llm_<profile> stream (cpu_llm) too."""
    cancel_stops_decoding(eagle_server)


def cancel_stops_decoding(server):
    url, pids = server["url"], server["pids"]
    assert pids, "no server processes found"
    baseline = min(timed_short(url) for _ in range(3))

    # uncancelled, the long request keeps the server busy: that is what a cancel must save
    c, q = start_long(url)
    for _ in range(3):
        result, error = q.get(timeout=120)
        assert error is None, error
    busy = cpu_over(pids, 2.0)
    bounded(lambda: c.stop_stream(cancel_requests=True), "stop_stream")
    c.close()

    time.sleep(1.0)  # one decoding step of the tiny pair is milliseconds; this covers the cancel round trips
    after = cpu_over(pids, 3.0)
    follow_up = timed_short(url)
    print(f"cancel: busy {busy:.2f} CPU-s / 2 s, after cancel {after:.2f} CPU-s / 3 s, "
          f"short request {baseline:.3f} s before, {follow_up:.3f} s after")
    assert busy > 1.0, f"the long request did not load the server ({busy:.2f} CPU-s in 2 s): the test measures nothing"
    assert after < 0.3, f"the server spent {after:.2f} CPU-s in the 3 s after the cancel: decoding went on"
    assert follow_up < 3 * baseline + 0.5, f"follow-up request took {follow_up:.3f} s (before the cancel: {baseline:.3f} s)"


def test_request_limits_refused_before_decoding(server):
    """max_tokens beyond the model's positions (10^9 included) and a request of two prompts get a
    clear error, and the server serves on. generate refuses them itself, from the limits the
    repository carries (the checkpoints' 4096 positions), before calling any model."""
    url = server["url"]
    for max_tokens, words in ((10**9, ("max_tokens", "max_seq_len=4096")), (4096, ("max_tokens", "ask for at most"))):
        with pytest.raises(Exception) as e:
            request(url, PROMPTS["chat"], "chat", max_tokens=max_tokens)
        assert all(w in str(e.value) for w in words), str(e.value)
        assert "Traceback" not in str(e.value) and "alloc" not in str(e.value).lower()

    c = grpcclient.InferenceServerClient(url)
    q: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    inputs = []
    for name, value, dtype, np_dtype in (("text_input", [[b"t5 t17"], [b"t9 t8"]], "BYTES", object),
                                         ("max_tokens", [[4], [4]], "INT32", np.int32)):
        x = grpcclient.InferInput(name, [2, 1], dtype)
        x.set_data_from_numpy(np.array(value, dtype=np_dtype))
        inputs.append(x)
    c.async_stream_infer("generate", inputs, enable_empty_final_response=True)
    try:
        _, error = q.get(timeout=120)
    finally:
        bounded(c.stop_stream, "stop_stream")
        c.close()
    assert error is not None and "2 rows in one request" in str(error), error
    pieces, _ = request(url, PROMPTS["code"], "code", max_tokens=4)
    assert pieces
