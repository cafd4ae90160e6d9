"""End to end on CPU: tiny target + draft -> tuning.json -> cpu-flavor repository -> `trtspec serve`
-> tritonclient gRPC streaming requests to `generate`.

One server per module (start-up is ~15 s): it is started through the `serve` command in a
subprocess, exactly as a user runs it, and stopped with SIGTERM at the end, which must exit 0 and
leave no process behind. What the tests assert:
- chat and code requests stream pieces that concatenate to exactly the target's greedy text, with
  the workload's tuned K and the acceptance length trtspec.runtime measures for that K;
- speculation=false (perf --baseline) gives the same greedy text with K=0 and AL 1.0;
- an unknown or missing workload gets the default route; 10 concurrent streaming requests all
  complete with the right text; stream=false returns one response;
- bad requests get an error response (max_tokens 0, a negative temperature);
- sampling (temperature 0.8, seed): the streamed text is the target's plain sampled text for that
  seed (exact_match with keyed draws), not the greedy text, with the per-request acceptance length
  trtspec.runtime measures; same seed, same text; another seed, another text; speculation off
  samples the same text;
- genai-perf's tensorrtllm payload (exclude_input_in_output=true) is accepted, false is refused;
- the cpu `tensorrt_llm` answers tensorrt_llm's own request tensors (draft_input_ids verification);
- spec_decode's BLS engine (the trtllm flavor's orchestration code, reloaded with engine=bls over
  the model-control API) calling the cpu `tensorrt_llm_draft` / `tensorrt_llm` gives the same text;
- a port in use and a model that fails to load are reported clearly (the latter with the log tail).
The EAGLE repository (tree profiles per workload, greedy answers to sampled requests) is served in
test_triton_serve_eagle.py; the server and client helpers are tests/serve_helpers.py.
"""

from __future__ import annotations

import json
import queue
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from serve_helpers import (DT, MAX_TOKENS, PROMPTS, bls_engine, bounded, procs_mentioning, request, start_cli,
                           stop_cli, text_of, value)
from triton_fixtures import cpu_repository, tiny_pair
from trtspec.errors import TrtspecError
from trtspec.options import Sampling
from trtspec.runtime.generate import load_models, stream_request
from trtspec.triton_repo.models.serving_rules import label_band
from trtspec.triton_repo.ports import free_port
from trtspec.triton_repo.serve import CpuServer, ServerStartError

grpcclient = pytest.importorskip("tritonclient.grpc")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
