"""The gRPC side of `trtspec perf`: checking the server, building requests, timing one streamed request.

Why the stream is driven at the protobuf level: tritonclient.grpc.aio's `stream_infer` builds a new
request message from `InferInput` objects on every send and cannot ask for Triton's empty final
response (`triton_enable_empty_final_response` is a reserved parameter there). A decoupled model
such as `generate` closes its stream with a final flag that carries no outputs, so without that
response the client cannot tell when a streamed request ended. We therefore use tritonclient's own
protobuf messages and gRPC service stub (`tritonclient.grpc.service_pb2[_grpc]`, the same ones the
clients use) on a grpc.aio channel: each prompt's request message is built once and re-sent as it
is, and each worker keeps one bidirectional stream open across its requests (one request in flight
per stream, so every response on it belongs to the current request). The aio client
(`tritonclient.grpc.aio.InferenceServerClient`) does the health, metadata and config checks.

Per response only the few bytes that matter are decoded (Triton's raw little-endian tensor contents):
whether it carries tokens, and from the last one with outputs the repository's statistics.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
import time
from dataclasses import dataclass, field

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.grpc.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException

from ..errors import TrtspecError

# What the load generator reads from a response, when the model has it (see contracts.GENERATE_OUTPUTS).
WANTED_OUTPUTS = ("text_output", "num_output_tokens", "acceptance_length", "num_draft_tokens", "route",
                  "sampling_fallback", "total_draft_tokens")
MAX_MESSAGE = 2**31 - 1
_F32 = struct.Struct("<f")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")


class ServerGone(TrtspecError):
    """The connection to the server failed mid-run (the server died or went away). `result` is the
    request that found out (status error), so that the partial run still records it."""
    result: "Result | None" = None


@dataclass
class ModelInfo:
    """What `check_server` learned about the model: the inputs it takes and the outputs we read."""
    name: str
    inputs: set[str]
    outputs: list[str]
    decoupled: bool


@dataclass(slots=True)
class Result:
    """One request as measured (plain slots: built at up to thousands per second)."""
    prompt_id: str
    start: float  # perf_counter at send
    status: str = "ok"
    error: str | None = None
    ttft: float | None = None
    e2e: float | None = None
    token_times: list[float] = field(default_factory=list)  # perf_counter of each token-carrying response
    output_tokens: int = 0
    acceptance_length: float | None = None
    num_draft_tokens: int | None = None
    draft_tokens: int | None = None  # total_draft_tokens: the draft tokens the request's steps verified
    route: str | None = None
    output_sha256: str | None = None  # of the streamed text, whole (set when the final response arrives)
    output_text: str | None = None  # the streamed text, whole (for the sampled-output distribution checks)
    sampling_fallback: str | None = None  # the repository's sampling_fallback output ("greedy": decoded greedily)


def _cancelling() -> bool:
    """Is the current task being cancelled (Python >= 3.11 can tell; 3.10 assumes not)?"""
    task = asyncio.current_task()
    fn = getattr(task, "cancelling", None)
    return bool(fn()) if fn is not None else False


def _bytes_tensor(value: bytes) -> bytes:
    return struct.pack("<I", len(value)) + value


def sampling_inputs(info: ModelInfo, sampling, seed: int) -> list[tuple[str, str, bytes]]:
    """(name, datatype, raw) of a sampled request's temperature / top_k / top_p / seed, the
    repository front model's inputs (contracts.GENERATE_INPUTS); none for greedy settings. An input
    the model does not declare is an error: the run would silently measure something else."""
    if sampling is None or sampling.greedy:
        return []
    wanted = [("temperature", "FP32", _F32.pack(sampling.temperature)), ("seed", "UINT64", _U64.pack(seed))]
    if sampling.top_k:
        wanted.append(("top_k", "INT32", _I32.pack(sampling.top_k)))
    if sampling.top_p < 1.0:
        wanted.append(("top_p", "FP32", _F32.pack(sampling.top_p)))
    missing = [name for name, _, _ in wanted if name not in info.inputs]
    if missing:
        raise TrtspecError(f"perf.temperature: model {info.name!r} has no {missing[0]!r} input, so it cannot be sent "
                           f"{sampling.label()}; drive a trtspec repository's 'generate' or measure greedily")
    return wanted


def build_request(model: str, info: ModelInfo, text: str, max_tokens: int, workload: str | None,
                  speculation: bool | None, extra: list[tuple[str, str, bytes]] = ()) -> service_pb2.ModelInferRequest:
    """The request message for one prompt (built once, sent many times). Inputs the model does not
    declare (workload, speculation on a foreign model) are left out; stream is always true.
    extra: further (name, datatype, raw) inputs (sampling_inputs)."""
    req = service_pb2.ModelInferRequest(model_name=model)
    req.parameters["triton_enable_empty_final_response"].bool_param = True

    def add(name: str, datatype: str, raw: bytes) -> None:
        req.inputs.add(name=name, datatype=datatype, shape=[1, 1])
        req.raw_input_contents.append(raw)

    add("text_input", "BYTES", _bytes_tensor(text.encode("utf-8")))
    add("max_tokens", "INT32", _I32.pack(int(max_tokens)))
    if "stream" in info.inputs:
        add("stream", "BOOL", b"\x01")
    if workload is not None and "workload" in info.inputs:
        add("workload", "BYTES", _bytes_tensor(workload.encode("utf-8")))
    if speculation is not None and "speculation" in info.inputs:
        add("speculation", "BOOL", b"\x01" if speculation else b"\x00")
    for name, datatype, raw in extra:
        add(name, datatype, raw)
    for name in info.outputs:
        req.outputs.add(name=name)
    return req


def _first_bytes(raw: bytes) -> str:
    n = _I32.unpack_from(raw)[0] if len(raw) >= 4 else 0
    return raw[4:4 + n].decode("utf-8", errors="replace")


def _read_stats(resp, result: Result, counted: bool) -> None:
    """Statistics of the last response that carried outputs (running totals in the repository)."""
    raws = resp.raw_output_contents
    for i, o in enumerate(resp.outputs):
        if i >= len(raws):
            break
        raw = raws[i]
        if o.name == "num_output_tokens" and len(raw) >= 4:
            result.output_tokens = _I32.unpack_from(raw)[0]
        elif o.name == "acceptance_length" and len(raw) >= 4:
            al = _F32.unpack_from(raw)[0]
            result.acceptance_length = float(al) if al > 0 else None  # llmapi reports 0 = unknown
        elif o.name == "num_draft_tokens" and len(raw) >= 4:
            result.num_draft_tokens = _I32.unpack_from(raw)[0]
        elif o.name == "total_draft_tokens" and len(raw) >= 4:
            result.draft_tokens = _I32.unpack_from(raw)[0]
        elif o.name == "route":
            result.route = _first_bytes(raw)
        elif o.name == "sampling_fallback":
            result.sampling_fallback = _first_bytes(raw) or None
    if not counted:  # a model without num_output_tokens: one token per token-carrying response
        result.output_tokens = len(result.token_times)


def _token_progress(resp, seen: int) -> tuple[bool, int]:
    """(does this response carry new tokens, the running token count). With num_output_tokens the
    server's count decides (tokens that decode to no text yet: an arrival; the final counters of a
    round that brought only the end id, which no model returns: none; llmapi's restated, lower
    count: none); otherwise a non-empty text_output does.
    How each definition compares with genai-perf's: perf.metrics."""
    raws = resp.raw_output_contents
    text_nonempty = False
    for i, o in enumerate(resp.outputs):
        if i >= len(raws):
            break
        if o.name == "num_output_tokens":
            raw = raws[i]
            n = _I32.unpack_from(raw)[0] if len(raw) >= 4 else seen
            return n > seen, n
        if o.name == "text_output":
            raw = raws[i]
            text_nonempty = len(raw) > 4 and _I32.unpack_from(raw)[0] > 0
    return text_nonempty, seen + (1 if text_nonempty else 0)


def _hash_text(resp, digest, parts: list) -> None:
    """Feed the response's text_output bytes (one BYTES element: 4-byte length, then the text) to the
    digest, so two requests can be compared for identical output, and keep them in `parts`."""
    raws = resp.raw_output_contents
    for i, o in enumerate(resp.outputs):
        if o.name == "text_output" and i < len(raws):
            digest.update(raws[i][4:])
            parts.append(raws[i][4:])
            return


class Stream:
    """One bidirectional ModelStreamInfer call, reused for consecutive requests of one worker.
    A timed-out request cancels the call (its responses would otherwise arrive on the next
    request's turn); the next request opens a fresh one. So does an error response without the
    final flag: a decoupled model may send its final flag after it, alone (tritonserver 2.51 forwards
    both, the error marked triton_final_response false), and the next request would read that flag
    as its own end."""

    def __init__(self, stub: service_pb2_grpc.GRPCInferenceServiceStub, url: str):
        self.stub, self.url, self.call, self.expired = stub, url, None, None

    def close(self) -> None:
        if self.call is not None:
            self.call.cancel()
            self.call = None

    def _expire(self, call) -> None:
        """The request's timer fired: cancel its call (the pending read then fails) and say why."""
        self.expired = call
        call.cancel()

    def _timed_out(self, result: Result, timeout_s: float) -> Result:
        self.close()
        result.status, result.error, result.e2e = "timeout", f"no final response within {timeout_s:g} s", None
        return result

    async def send(self, request, prompt_id: str, timeout_s: float, counted: bool) -> Result:
        """Send one request and time its responses until the final one; never raises for a request
        error or a timeout (they are the result's status), raises ServerGone when the connection fails.
        The timeout is a plain loop timer that cancels the gRPC call (cheaper per request than an
        asyncio.timeout scope, which matters at thousands of requests per second)."""
        call = self.call
        if call is None:
            call = self.call = self.stub.ModelStreamInfer()
        result = Result(prompt_id, time.perf_counter())
        timer = asyncio.get_running_loop().call_later(timeout_s, self._expire, call)
        try:
            last = await self._exchange(call, request, result)
        except asyncio.CancelledError:
            if self.expired is call and not _cancelling():
                return self._timed_out(result, timeout_s)
            self.close()  # the run is being stopped: this call is mid-request, drop it
            raise
        except ServerGone as e:
            if self.expired is call:
                return self._timed_out(result, timeout_s)
            result.status, result.error, e.result = "error", str(e), result
            raise
        except grpc.aio.AioRpcError as e:
            if self.expired is call:
                return self._timed_out(result, timeout_s)
            self.close()
            result.status, result.error = "error", f"{e.code().name}: {e.details()}"
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN):
                gone = ServerGone(f"lost the connection to the server at {self.url} "
                                  f"({e.code().name}: {e.details() or 'no details'})")
                result.error, gone.result = str(gone), result
                raise gone from None
            return result
        finally:
            timer.cancel()
        if self.expired is call:  # the timer ran in the loop turn that brought the final response:
            if result.status == "ok":  # past its timeout all the same, and the call is cancelled
                return self._timed_out(result, timeout_s)
            self.close()
        if result.status == "ok":
            times = result.token_times
            if times:
                result.ttft = times[0] - result.start
            if last is not None:
                _read_stats(last, result, counted)
        return result

    async def _exchange(self, call, request, result: Result):
        """Write the request, read until its final response; returns the last response with outputs."""
        perf = time.perf_counter
        times = result.token_times
        seen, last = 0, None
        text, parts = hashlib.sha256(), []
        await call.write(request)
        while True:
            msg = await call.read()
            now = perf()
            if msg is grpc.aio.EOF:
                self.close()
                raise ServerGone(f"the server at {self.url} closed the stream mid-request")
            if msg.error_message:
                result.status, result.error, result.e2e = "error", msg.error_message, now - result.start
                if not _final(msg.infer_response):
                    self.close()
                return None
            resp = msg.infer_response
            if resp.outputs:
                new, seen = _token_progress(resp, seen)
                if new:
                    times.append(now)
                    _hash_text(resp, text, parts)
                last = resp
            if _final(resp):
                result.e2e, result.output_sha256 = now - result.start, text.hexdigest()
                result.output_text = b"".join(parts).decode("utf-8", errors="replace")
                return last


def _final(resp) -> bool:
    """Is this a request's last response? (a model without the flag answers once)"""
    final = resp.parameters.get("triton_final_response")
    return final is None or final.bool_param


def open_channel(url: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(url, options=[("grpc.max_send_message_length", MAX_MESSAGE),
                                                   ("grpc.max_receive_message_length", MAX_MESSAGE)])


async def check_server(url: str, model: str, timeout_s: float) -> ModelInfo:
    """Is a Triton server up at `url` and is `model` ready? One clear TrtspecError otherwise, within
    `timeout_s` (a server still starting gets until then)."""
    client = InferenceServerClient(url)
    deadline = time.monotonic() + timeout_s
    try:
        last = "no answer"
        while True:
            left = deadline - time.monotonic()
            try:
                if await client.is_server_live(client_timeout=max(0.2, min(2.0, left))):
                    break
            except InferenceServerException as e:
                last = (e.message() or str(e)).splitlines()[0][:200]
            if time.monotonic() >= deadline:
                raise TrtspecError(f"no Triton server answers at {url} (gRPC) after {timeout_s:g} s ({last}); "
                                   "start one with `trtspec serve REPO --grpc-port PORT` and point perf.url at "
                                   "127.0.0.1:PORT")
            await asyncio.sleep(0.2)
        try:
            ready = await client.is_model_ready(model, client_timeout=timeout_s)
        except InferenceServerException:
            ready = False
        if not ready:
            try:
                index = await client.get_model_repository_index(as_json=True, client_timeout=timeout_s)
                names = sorted(m.get("name", "?") + ("" if m.get("state") == "READY" else f" ({m.get('state', '?')})")
                               for m in index.get("models", []))
            except InferenceServerException:
                names = []
            raise TrtspecError(f"model {model!r} is not ready on the server at {url} "
                               f"(models: {', '.join(names) or 'none'}); check perf.model and the server log")
        meta = await client.get_model_metadata(model, as_json=True, client_timeout=timeout_s)
        cfg = (await client.get_model_config(model, as_json=True, client_timeout=timeout_s))["config"]
    finally:
        await client.close()
    inputs = {i["name"] for i in meta.get("inputs", [])}
    missing = [n for n in ("text_input", "max_tokens") if n not in inputs]
    if missing:
        raise TrtspecError(f"model {model!r} at {url} has no input {missing[0]!r} (inputs: {', '.join(sorted(inputs))}); "
                           "trtspec perf drives text_input/max_tokens models such as a trtspec repository's 'generate'")
    outputs = [o["name"] for o in meta.get("outputs", []) if o["name"] in WANTED_OUTPUTS]
    decoupled = bool((cfg.get("model_transaction_policy") or {}).get("decoupled"))
    return ModelInfo(model, inputs, outputs, decoupled)


async def model_parameters(url: str, model: str, timeout_s: float) -> dict[str, str]:
    """A model's config parameters as {name: string value}; {} when the server has no such model."""
    client = InferenceServerClient(url)
    try:
        cfg = (await client.get_model_config(model, as_json=True, client_timeout=timeout_s))["config"]
    except InferenceServerException:
        return {}
    finally:
        await client.close()
    return {k: (v or {}).get("string_value", "") for k, v in (cfg.get("parameters") or {}).items()}


async def tokenizer_dir(url: str, timeout_s: float) -> str | None:
    """The tokenizer the repository's `preprocessing` model loads (servers bind 127.0.0.1, so the
    client runs on the same host and can read it), or None without such a model."""
    return (await model_parameters(url, "preprocessing", timeout_s)).get("tokenizer_dir") or None
