"""Live-server helpers shared by the Triton integration tests (no tests here): `trtspec serve` started
in a subprocess exactly as a user runs it and stopped with SIGTERM (`start_cli`, `stop_cli`, which
checks that no process outlives the server), tritonclient gRPC streaming requests to `generate` or
an engine model (`request`, `value`, `text_of`), client calls bounded in time (`bounded`),
spec_decode reloaded as the trtllm flavor's BLS orchestration (`bls_engine`), and the prompts and
tuned draft lengths of the draft-target repository tests/integration/test_triton_serve.py serves
(`PROMPTS`, `DT`).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from trtspec.triton_repo.ports import free_port

grpcclient = pytest.importorskip("tritonclient.grpc")

SERVE_SCRIPT = """
import sys, typer
from trtspec.errors import TrtspecError
from trtspec.triton_repo.command import serve_command
app = typer.Typer(add_completion=False)
app.command()(serve_command)
try:
    sys.exit(app(standalone_mode=False) or 0)  # standalone_mode=False returns serve's exit status
except TrtspecError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
"""
PROMPTS = {"chat": "t5 t17 t300 t42 t9", "code": "t9 t8 t7 t100", "other": "t100 t200 t301"}
MAX_TOKENS = 24
DT = {"chat": [2, 1], "code": [4, 3]}  # bands 1 and 16: fewer than 16 requests in flight -> band 1


def procs_mentioning(text: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def start_cli(repo: Path, log: Path, *flags: str):
    ports = {k: free_port() for k in ("http", "grpc", "metrics")}
    proc = subprocess.Popen([sys.executable, "-c", SERVE_SCRIPT, str(repo), "--grpc-port", str(ports["grpc"]),
                             "--http-port", str(ports["http"]), "--metrics-port", str(ports["metrics"]),
                             "--log-file", str(log), "--timeout", "240", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.monotonic() + 260
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("ready:"):
            proc.output = lines  # what serve prints, kept as the pipe is drained
            threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
            return proc, ports
    proc.kill()
    raise AssertionError("serve did not become ready:\n" + "".join(lines) + "\n" + log.read_text()[-3000:])


def stop_cli(proc, repo: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    deadline = time.monotonic() + 10
    while procs_mentioning(str(repo)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert procs_mentioning(str(repo)) == [], "processes outlived the server"


WAIT_S = 120  # the longest any one blocking call of these tests may take: a hang fails, it does not sit


def bounded(fn, what: str, timeout: float = WAIT_S):
    """fn() in a helper thread, failing after `timeout` s: for client calls that take no timeout of
    their own (stop_stream joins the stream's thread, which waits for the server to close it)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError(f"{what} did not return within {timeout} s")
    if "error" in out:
        raise out["error"]
    return out.get("value")


def request(url: str, text: str, workload: str | None = None, stream: bool = True, max_tokens: int = MAX_TOKENS,
            model: str = "generate", extra: dict | None = None, arrays: dict | None = None):
    """One streaming call; returns (pieces, last response as {output: array}) or raises the error.
    extra: {name: (scalar or list, Triton dtype)}; arrays: {name: int32 array}, batch dimension first."""
    c = grpcclient.InferenceServerClient(url)
    q: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))

    def inp(name, value, dtype):
        x = grpcclient.InferInput(name, [1, 1] if np.ndim(value) == 0 else [1, len(value)], dtype)
        arr = np.array([value] if np.ndim(value) else [[value]],
                       dtype={"BYTES": object, "INT32": np.int32, "BOOL": bool, "FP32": np.float32,
                              "UINT64": np.uint64}[dtype])
        if dtype == "BYTES":  # one string, or a list of them (stop_words, bad_words)
            arr = np.array([[v.encode() for v in value] if isinstance(value, list) else [value.encode()]], dtype=object)
        x.set_data_from_numpy(arr)
        return x

    if model == "generate":
        inputs = [inp("text_input", text, "BYTES"), inp("max_tokens", max_tokens, "INT32"),
                  inp("stream", stream, "BOOL")]
        if workload is not None:
            inputs.append(inp("workload", workload, "BYTES"))
    else:
        inputs = []
    for name, (value, dtype) in (extra or {}).items():
        inputs.append(inp(name, value, dtype))
    for name, arr in (arrays or {}).items():
        inputs.append(grpcclient.InferInput(name, list(arr.shape), "INT32"))
        inputs[-1].set_data_from_numpy(arr.astype(np.int32))
    c.async_stream_infer(model, inputs, enable_empty_final_response=True)
    pieces, last = [], None
    try:
        while True:
            result, error = q.get(timeout=WAIT_S)
            if error is not None:
                raise error
            if result.get_response().parameters["triton_final_response"].bool_param and not \
                    result.get_response().outputs:
                break
            pieces.append(result)
            last = result
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        bounded(c.stop_stream, "stop_stream")
        c.close()
    return pieces, last


def value(result, name):
    v = result.as_numpy(name).reshape(-1)[0]
    return v.decode() if isinstance(v, bytes) else v.item()


def text_of(pieces) -> str:
    return "".join(value(p, "text_output") for p in pieces)


@contextlib.contextmanager
def bls_engine(url: str):
    """spec_decode reloaded as the trtllm flavor's BLS orchestration (engine "bls", the python
    stand-ins as its engines) for the block, then restored as it was."""
    c = grpcclient.InferenceServerClient(url)
    cfg = c.get_model_config("spec_decode", as_json=True, client_timeout=WAIT_S)["config"]
    original = json.dumps(cfg)
    cfg["parameters"]["engine"]["string_value"] = "bls"
    try:
        c.load_model("spec_decode", config=json.dumps(cfg), client_timeout=WAIT_S)
        yield
    finally:
        c.load_model("spec_decode", config=original, client_timeout=WAIT_S)
        c.close()
