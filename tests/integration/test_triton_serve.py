"""End to end on CPU: tiny target + draft -> tuning.json -> cpu-flavor repository -> `trtspec serve`
-> tritonclient gRPC streaming requests to `generate`.

One server per module (start-up is ~15 s): it is started through the `serve` command in a
subprocess, exactly as a user runs it, and stopped with SIGTERM at the end, which must exit 0 and
leave no process behind. What the tests assert:
- chat and code requests stream pieces that concatenate to exactly the target's greedy text, with
  the workload's tuned K and the acceptance length trtspec.runtime measures for that K;
- speculation=false (perf --baseline) gives the same greedy text with K=0 and AL 1.0; EAGLE refuses it;
- an unknown or missing workload gets the default route; 10 concurrent streaming requests all
  complete with the right text; stream=false returns one response;
- bad requests get an error response (max_tokens 0, a negative temperature);
- sampling (temperature 0.8, seed): the streamed text is the target's plain sampled text for that
  seed (exact_match with keyed draws), not the greedy text, with the per-request acceptance length
  trtspec.runtime measures; same seed, same text; another seed, another text; speculation off
  samples the same text; an EAGLE route answers a sampled request greedily, flagged
  sampling_fallback = "greedy";
- genai-perf's tensorrtllm payload (exclude_input_in_output=true) is accepted, false is refused;
- the cpu `tensorrt_llm` answers tensorrt_llm's own request tensors (draft_input_ids verification);
- spec_decode's BLS engine (the trtllm flavor's orchestration code, reloaded with engine=bls over
  the model-control API) calling the cpu `tensorrt_llm_draft` / `tensorrt_llm` gives the same text;
- a port in use and a model that fails to load are reported clearly (the latter with the log tail);
- EAGLE: a second repository routes chat and code to their tree profiles, exact text again.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from triton_fixtures import TREE_A, TREE_B, cpu_repository, tiny_eagle, tiny_pair
from trtspec.errors import TrtspecError
from trtspec.options import Sampling
from trtspec.runtime.generate import load_models, stream_request
from trtspec.triton_repo.models.serving_rules import label_band
from trtspec.triton_repo.ports import free_port
from trtspec.triton_repo.serve import CpuServer, ServerStartError

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

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


@pytest.fixture(scope="module")
def dt(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_dt").resolve()
    pair = tiny_pair(d)
    repo, _ = cpu_repository(d, "draft-target", pair, DT)
    models = load_models(pair / "target", pair / "draft", tokenizer=False)
    tok = __import__("transformers").AutoTokenizer.from_pretrained(str(pair / "target"))
    routing = json.loads((repo / "trtspec-repo.json").read_text())["routing"]
    t0 = time.monotonic()
    proc, ports = start_cli(repo, d / "server.log", "--model-control")  # test_spec_decode_bls reloads spec_decode
    info = {"repo": repo, "url": f"127.0.0.1:{ports['grpc']}", "ports": ports, "models": models, "tok": tok,
            "routing": routing, "start_s": time.monotonic() - t0, "log": d / "server.log"}
    yield info
    stop_cli(proc, repo)


def expected(info, text: str, k: int, max_tokens: int = MAX_TOKENS):
    """The target's greedy text, the acceptance length trtspec.runtime gets with K, the token count."""
    cache = info.setdefault("expected", {})
    if (text, k, max_tokens) not in cache:
        cache[(text, k, max_tokens)] = _expected(info, text, k, max_tokens)
    return cache[(text, k, max_tokens)]


def _expected(info, text: str, k: int, max_tokens: int):
    m, tok = info["models"], info["tok"]
    ids = tok.encode(text)
    eos = (tok.eos_token_id,)
    mode = "draft-target" if k else "greedy"  # K = 0: spec_decode decodes with the target alone
    pieces = list(stream_request(m, ids, max_tokens, mode, draft_len=k or None, eos_ids=eos))
    greedy = [t for p in stream_request(m, ids, max_tokens, "greedy", eos_ids=eos) for t in p.tokens]
    assert [t for p in pieces for t in p.tokens] == greedy
    return tok.decode(greedy, skip_special_tokens=True), pieces[-1].stats.acceptance_length or 1.0, len(greedy)


def test_chat_and_code_get_the_target_greedy_text_with_their_tuned_k(dt):
    for workload, text in (("chat", PROMPTS["chat"]), ("code", PROMPTS["code"])):
        k = DT[workload][0]
        pieces, last = request(dt["url"], text, workload)
        want, al, n = expected(dt, text, k)
        assert text_of(pieces) == want and len(pieces) > 2  # streamed in pieces
        assert value(last, "num_draft_tokens") == k
        assert value(last, "route") == f"{workload}@1:K={k}"
        assert label_band(value(last, "route")) == (workload, 1, k)  # what perf reads the served band from
        assert value(last, "acceptance_length") == pytest.approx(al, rel=1e-6)
        assert 1.0 < al <= k + 1
        assert value(last, "total_accepted_draft_tokens") > 0
        assert value(last, "num_output_tokens") == n


def test_unknown_and_missing_workload_use_the_default_route(dt):
    k = dt["routing"]["default"]["bands"][0]["num_draft_tokens"]
    for workload in ("poetry", None):
        pieces, last = request(dt["url"], PROMPTS["other"], workload)
        assert text_of(pieces) == expected(dt, PROMPTS["other"], k)[0]
        assert value(last, "route") == f"default@1:K={k}" and value(last, "num_draft_tokens") == k


def test_ten_concurrent_streaming_requests(dt):
    jobs = [(w, PROMPTS[w if w in PROMPTS else "other"]) for w in ("chat", "code", "other", None, "chat", "code",
                                                                   "code", "chat", "other", "chat")]
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(jobs)) as ex:
        results = list(ex.map(lambda j: request(dt["url"], j[1], j[0]), jobs))
    elapsed = time.monotonic() - t0
    for (w, text), (pieces, last) in zip(jobs, results):
        k = DT[w][0] if w in DT else dt["routing"]["default"]["bands"][0]["num_draft_tokens"]
        assert text_of(pieces) == expected(dt, text, k)[0]
        assert value(last, "num_draft_tokens") == k
    assert elapsed < 120


def test_speculation_off_gives_the_target_greedy_text_with_k_0(dt):
    """`speculation=false` (trtspec perf --baseline): the plain target through the same repository."""
    for workload in ("code", None):
        pieces, last = request(dt["url"], PROMPTS["code"], workload, extra={"speculation": (False, "BOOL")})
        want, _, n = expected(dt, PROMPTS["code"], 4)
        assert text_of(pieces) == want and len(pieces) > 2
        assert value(last, "num_draft_tokens") == 0 and value(last, "acceptance_length") == 1.0
        assert value(last, "total_draft_tokens") == 0 and value(last, "num_output_tokens") == n
        assert value(last, "route") == f"{workload or 'default'}:speculation-off:K=0"
    _, last = request(dt["url"], PROMPTS["code"], "code", extra={"speculation": (True, "BOOL")})
    assert value(last, "num_draft_tokens") == 4


def test_non_streaming_returns_one_response(dt):
    pieces, last = request(dt["url"], PROMPTS["code"], "code", stream=False)
    assert len(pieces) == 1 and value(last, "text_output") == expected(dt, PROMPTS["code"], 4)[0]


def test_bad_requests_get_error_responses(dt):
    with pytest.raises(Exception, match="max_tokens: expected >= 1, got 0"):
        request(dt["url"], PROMPTS["chat"], "chat", max_tokens=0)
    with pytest.raises(Exception, match=r"temperature: Input should be greater than or equal to 0 \(got -0.5\)"):
        request(dt["url"], PROMPTS["chat"], "chat", extra={"temperature": (-0.5, "FP32")})
    with pytest.raises(Exception, match=r"runtime_top_p \(top_p\): Input should be less than or equal to 1"):
        request(dt["url"], PROMPTS["chat"], "chat", extra={"temperature": (0.7, "FP32"), "top_p": (1.5, "FP32")})
    pieces, _ = request(dt["url"], PROMPTS["chat"], "chat", max_tokens=3)  # the server still serves
    assert text_of(pieces)


def sampled(info, text: str, k: int, sampling: Sampling):
    """trtspec.runtime's plain sampled text for this seed, and its draft-target run's acceptance length
    (exact_match: the same tokens, whatever K)."""
    m, tok = info["models"], info["tok"]
    ids, eos = tok.encode(text), (tok.eos_token_id,)
    plain = [t for p in stream_request(m, ids, MAX_TOKENS, "greedy", eos_ids=eos, sampling=sampling) for t in p.tokens]
    spec = list(stream_request(m, ids, MAX_TOKENS, "draft-target", draft_len=k, eos_ids=eos, sampling=sampling,
                               accept="exact_match"))
    assert [t for p in spec for t in p.tokens] == plain
    return tok.decode(plain, skip_special_tokens=True), spec[-1].stats.acceptance_length


def sampling_inputs(temperature, seed, top_p=None):
    extra = {"temperature": (temperature, "FP32"), "seed": (seed, "UINT64")}
    return extra | ({"top_p": (top_p, "FP32")} if top_p is not None else {})


def test_sampled_requests_return_the_targets_sampled_text_with_acceptance_length(dt):
    k = DT["chat"][0]
    greedy = expected(dt, PROMPTS["chat"], k)[0]
    texts = {}
    for seed in (7, 8):
        want, al = sampled(dt, PROMPTS["chat"], k, Sampling(temperature=0.8, seed=seed))
        pieces, last = request(dt["url"], PROMPTS["chat"], "chat", extra=sampling_inputs(0.8, seed))
        texts[seed] = text_of(pieces)
        assert texts[seed] == want != greedy
        assert value(last, "acceptance_length") == pytest.approx(al, rel=1e-6) and al >= 1.0
        assert value(last, "total_draft_tokens") > 0 and value(last, "sampling_fallback") == ""
    assert texts[7] != texts[8]
    # the tiny random pair rarely agrees at T = 0.8; at T = 0.3 this seed accepts draft tokens
    want, al = sampled(dt, PROMPTS["chat"], k, Sampling(temperature=0.3, seed=7))
    pieces, last = request(dt["url"], PROMPTS["chat"], "chat", extra=sampling_inputs(0.3, 7))
    assert text_of(pieces) == want and value(last, "total_accepted_draft_tokens") > 0
    assert value(last, "acceptance_length") == pytest.approx(al, rel=1e-6) and al > 1.0
    again, _ = request(dt["url"], PROMPTS["chat"], "chat", extra=sampling_inputs(0.8, 7))
    assert text_of(again) == texts[7]  # same seed, same output
    base, last = request(dt["url"], PROMPTS["chat"], "chat",
                         extra={**sampling_inputs(0.8, 7), "speculation": (False, "BOOL")})
    assert text_of(base) == texts[7] and value(last, "num_draft_tokens") == 0  # the baseline samples the same
    want, _ = sampled(dt, PROMPTS["code"], DT["code"][0], Sampling(temperature=0.8, top_p=0.9, seed=3))
    pieces, _ = request(dt["url"], PROMPTS["code"], "code", extra=sampling_inputs(0.8, 3, 0.9))
    assert text_of(pieces) == want


def test_genai_perf_tensorrtllm_payload_is_accepted(dt):
    """genai-perf's tensorrtllm payload always adds exclude_input_in_output=true (perf_analyzer refuses
    an input the model does not declare); false would ask for the prompt echoed, which generate never does."""
    pieces, last = request(dt["url"], PROMPTS["code"], "code", extra={"exclude_input_in_output": (True, "BOOL")})
    assert text_of(pieces) == expected(dt, PROMPTS["code"], 4)[0]
    with pytest.raises(Exception, match="exclude_input_in_output: only true is supported"):
        request(dt["url"], PROMPTS["code"], "code", extra={"exclude_input_in_output": (False, "BOOL")})


def test_a_cancelled_stream_frees_the_server(dt):
    c = grpcclient.InferenceServerClient(dt["url"])
    q: queue.Queue = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[PROMPTS["code"].encode()]], dtype=object))
    n = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
    n.set_data_from_numpy(np.array([[200]], np.int32))
    s = grpcclient.InferInput("stream", [1, 1], "BOOL")
    s.set_data_from_numpy(np.array([[True]]))
    c.async_stream_infer("generate", [text, n, s])
    result, error = q.get(timeout=60)
    assert error is None and value(result, "text_output")
    bounded(lambda: c.stop_stream(cancel_requests=True), "stop_stream")
    c.close()
    pieces, _ = request(dt["url"], PROMPTS["chat"], "chat")  # served as usual; shutdown is checked at teardown
    assert text_of(pieces) == expected(dt, PROMPTS["chat"], 2)[0]


def test_cpu_tensorrt_llm_answers_tensorrt_llm_requests(dt):
    m, tok = dt["models"], dt["tok"]
    ids = tok.encode(PROMPTS["chat"])
    greedy = [t for p in stream_request(m, ids, 6, "greedy", eos_ids=()) for t in p.tokens]
    draft = greedy[:2] + [greedy[2] + 1]
    base = {"input_ids": (ids, "INT32"), "input_lengths": (len(ids), "INT32"), "request_output_len": (4, "INT32"),
            "exclude_input_in_output": (True, "BOOL"), "return_perf_metrics": (True, "BOOL")}
    pieces, last = request(dt["url"], "", model="tensorrt_llm", extra={**base, "draft_input_ids": (draft, "INT32")})
    assert last.as_numpy("output_ids").reshape(-1).tolist() == greedy[:4]  # 2 accepted + bonus + 1 decoded
    assert value(last, "total_accepted_draft_tokens") == 2 and value(last, "total_draft_tokens") == 3
    pieces, _ = request(dt["url"], "", model="tensorrt_llm", extra={**base, "streaming": (True, "BOOL")})
    assert [t for p in pieces for t in p.as_numpy("output_ids").reshape(-1).tolist()] == greedy[:4]


def test_cpu_tensorrt_llm_samples_draft_input_ids_like_the_engine(dt):
    """At T > 0 a draft_input_ids request is checked by exact_match_resample (the engine flow without
    draft logits), then decoded on with the next seed: the runtime's numbers, reproducible by seed."""
    from trtspec.runtime.accept import Key, accept_rule
    from trtspec.runtime.decode import verify_external

    m, tok = dt["models"], dt["tok"]
    ids = tok.encode(PROMPTS["chat"])
    s = Sampling(temperature=0.8, seed=11)
    draft = [t for p in stream_request(m, ids, 3, "greedy", eos_ids=()) for t in p.tokens]
    first = verify_external(m.target, ids, draft, 6, (), accept=accept_rule("exact_match_resample", s),
                            key=Key(11, 0))
    rest = [t for p in stream_request(m, ids + first.tokens, 6 - len(first.tokens), "greedy", eos_ids=(),
                                      sampling=s.model_copy(update={"seed": 12})) for t in p.tokens]
    base = {"input_ids": (ids, "INT32"), "input_lengths": (len(ids), "INT32"), "request_output_len": (6, "INT32"),
            "exclude_input_in_output": (True, "BOOL"), "return_perf_metrics": (True, "BOOL"),
            "draft_input_ids": (draft, "INT32"), "temperature": (0.8, "FP32"), "seed": (11, "UINT64")}
    _, last = request(dt["url"], "", model="tensorrt_llm", extra=base)
    assert last.as_numpy("output_ids").reshape(-1).tolist() == first.tokens + rest
    assert value(last, "total_accepted_draft_tokens") == first.step.accepted and value(last, "total_draft_tokens") == 3


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


def test_spec_decode_bls_engine_against_the_cpu_tensorrt_llm_models(dt):
    """The trtllm flavor's orchestration (BLS rounds: draft K tokens, target verifies them) runs here
    against the python stand-ins: same text. Its acceptance length is per BLS round, and a round
    emits K + 1 target tokens (after a rejection the executor decodes on to request_output_len,
    as TRT-LLM's does), so it is not the runtime's number."""
    with bls_engine(dt["url"]):
        for workload in ("chat", "code"):
            k = DT[workload][0]
            pieces, last = request(dt["url"], PROMPTS[workload], workload)
            assert text_of(pieces) == expected(dt, PROMPTS[workload], k)[0]
            assert value(last, "num_draft_tokens") == k and 1.0 <= value(last, "acceptance_length") <= k + 1
            assert value(last, "total_draft_tokens") > 0
    pieces, _ = request(dt["url"], PROMPTS["chat"], "chat")
    assert text_of(pieces) == expected(dt, PROMPTS["chat"], 2)[0]


def test_port_in_use_is_refused(dt):
    with pytest.raises(TrtspecError, match=rf"^triton.ports.grpc: 127.0.0.1:{dt['ports']['grpc']} is already in use"):
        CpuServer(dt["repo"], free_port(), dt["ports"]["grpc"], free_port()).start(30)


def test_a_model_that_fails_to_load_is_reported_with_the_log_tail(dt, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "trtspec-repo.json").write_text((dt["repo"] / "trtspec-repo.json").read_text())
    import shutil

    shutil.copytree(dt["repo"] / "preprocessing", broken / "preprocessing")
    cfg = broken / "preprocessing" / "config.pbtxt"
    empty = tmp_path / "no_tokenizer"
    empty.mkdir()
    text = cfg.read_text()
    start = text.index('key: "tokenizer_dir"')
    old = text[start:].split("string_value: ", 1)[1].split("\n", 1)[0]
    cfg.write_text(text.replace(old, json.dumps(str(empty))))
    import typer
    from typer.testing import CliRunner

    from trtspec.triton_repo.command import serve_command

    app = typer.Typer()
    app.command()(serve_command)
    res = CliRunner().invoke(app, [str(broken), "--http-port", str(free_port()), "--grpc-port", str(free_port()),
                                   "--metrics-port", str(free_port()), "--log-file", str(tmp_path / "broken.log")])
    assert isinstance(res.exception, ServerStartError)
    assert "tritonserver exited with status" in str(res.exception) and "broken.log" in str(res.exception)
    assert "--- tritonserver log (last lines) ---" in res.output and "preprocessing" in res.exception.log_tail
    assert procs_mentioning(str(broken)) == []


@pytest.fixture(scope="module")
def eagle(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_eagle").resolve()
    ckpt = tiny_eagle(d)
    repo, _ = cpu_repository(d, "eagle", ckpt, {"chat": TREE_A, "code": TREE_B}, bands=(1,))
    server = CpuServer(repo, free_port(), free_port(), free_port(), log_file=d / "server.log").start(240)
    yield {"repo": repo, "url": server.grpc_url, "models": load_models(ckpt, tokenizer=False),
           "tok": __import__("transformers").AutoTokenizer.from_pretrained(str(ckpt))}
    assert server.stop() == 0
    assert procs_mentioning(str(repo)) == []


def test_eagle_profiles_route_by_workload(eagle):
    m, tok = eagle["models"], eagle["tok"]
    for workload, tree, model in (("chat", TREE_A, "tensorrt_llm_c1_p0"), ("code", TREE_B, "tensorrt_llm_c1_p1")):
        ids = tok.encode(PROMPTS[workload])
        eos = (tok.eos_token_id,)
        ref = list(stream_request(m, ids, MAX_TOKENS, "eagle", eagle_choices=tree, eos_ids=eos))
        greedy = [t for p in stream_request(m, ids, MAX_TOKENS, "greedy", eos_ids=eos) for t in p.tokens]
        assert [t for p in ref for t in p.tokens] == greedy
        pieces, last = request(eagle["url"], PROMPTS[workload], workload)
        assert text_of(pieces) == tok.decode(greedy, skip_special_tokens=True)
        assert value(last, "route") == f"{workload}@1:{model}" and value(last, "num_draft_tokens") == len(tree)
        assert label_band(value(last, "route")) == (workload, 1, None)  # the one band this repository serves
        assert value(last, "acceptance_length") == pytest.approx(ref[-1].stats.acceptance_length, rel=1e-6)
    with pytest.raises(Exception, match="engines always draft; measure the baseline against a target-only"):
        request(eagle["url"], PROMPTS["chat"], "chat", extra={"speculation": (False, "BOOL")})


def test_eagle_answers_sampled_requests_greedily_and_says_so(eagle):
    """TensorRT-LLM's Triton backend decodes EAGLE engines greedily whatever the temperature; the
    repository does the same and flags it (serving_rules: sampling_fallback)."""
    m, tok = eagle["models"], eagle["tok"]
    ids, eos = tok.encode(PROMPTS["chat"]), (tok.eos_token_id,)
    greedy = tok.decode([t for p in stream_request(m, ids, MAX_TOKENS, "greedy", eos_ids=eos) for t in p.tokens],
                        skip_special_tokens=True)
    pieces, last = request(eagle["url"], PROMPTS["chat"], "chat",
                           extra={"temperature": (0.8, "FP32"), "seed": (5, "UINT64")})
    assert text_of(pieces) == greedy and value(last, "sampling_fallback") == "greedy"
    assert value(last, "acceptance_length") > 1.0
    _, last = request(eagle["url"], PROMPTS["chat"], "chat")
    assert value(last, "sampling_fallback") == ""
    with pytest.raises(Exception, match=r"temperature: Input should be greater than or equal to 0"):
        request(eagle["url"], PROMPTS["chat"], "chat", extra={"temperature": (-1.0, "FP32")})
