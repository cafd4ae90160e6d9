"""End to end on CPU: an n-gram tuning -> cpu-flavor repository (the target checkpoint alone) ->
`trtspec serve` -> tritonclient gRPC streaming requests to `generate`.

Each workload is served its tuned K and max_matching_ngram_size by spec_decode drafting from a
per-request n-gram pool: the streamed text is exactly the target's greedy text, and the response
reports the per-request acceptance length trtspec.runtime measures for that (K, n), the route and
the drafter's settings. Slow: a tritonserver start (~15 s) on tiny models.
"""

from __future__ import annotations

import json

import pytest

from serve_helpers import bls_engine, request, start_cli, stop_cli, text_of, value
from triton_fixtures import cpu_repository, tiny_pair
from trtspec.runtime.generate import load_models, stream_request

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
CHOICES = {"chat": (3, 2), "code": (4, 1), "off": (0, None)}  # bands 1 and 16: few requests -> band 1
PROMPTS = {"chat": "t5 t17 t300 t42 t9 t5 t17 t300", "code": "t9 t8 t7 t100 t9 t8 t7", "off": "t100 t200 t301"}
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_ngram").resolve()
    target = tiny_pair(d) / "target"
    repo, _ = cpu_repository(d, "ngram", target, CHOICES)
    proc, ports = start_cli(repo, d / "server.log", "--model-control")  # the bls test reloads spec_decode
    tok = __import__("transformers").AutoTokenizer.from_pretrained(str(target))
    yield {"url": f"127.0.0.1:{ports['grpc']}", "models": load_models(target, None, tokenizer=False), "tok": tok,
           "routing": json.loads((repo / "trtspec-repo.json").read_text())["routing"]}
    stop_cli(proc, repo)


def runtime(served, text: str, k: int, n: int | None):
    """The target's greedy text, trtspec.runtime's n-gram AL for (K, n), and the token count the
    server reports: the greedy tokens without an end id that ends them (the executor returns none)."""
    m, tok = served["models"], served["tok"]
    ids, eos = tok.encode(text), (tok.eos_token_id,)
    greedy = [t for p in stream_request(m, ids, MAX_TOKENS, "greedy", eos_ids=eos) for t in p.tokens]
    count = len(greedy) - (greedy[-1:] == list(eos))
    if not k:
        return tok.decode(greedy, skip_special_tokens=True), 1.0, count
    pieces = list(stream_request(m, ids, MAX_TOKENS, "ngram", draft_len=k, ngram_size=n, eos_ids=eos))
    assert [t for p in pieces for t in p.tokens] == greedy
    return tok.decode(greedy, skip_special_tokens=True), pieces[-1].stats.acceptance_length, count


def test_each_workload_streams_the_greedy_text_with_its_ngram_setting_and_acceptance(served):
    accepted = 0
    for workload, (k, n) in CHOICES.items():
        pieces, last = request(served["url"], PROMPTS[workload], workload, max_tokens=MAX_TOKENS)
        want, al, count = runtime(served, PROMPTS[workload], k, n)
        assert text_of(pieces) == want and len(pieces) > 2
        assert value(last, "num_draft_tokens") == k
        assert value(last, "num_output_tokens") == count  # a final end id is not returned
        assert value(last, "route") == f"{workload}@1:K={k}" + (f":ngram:n={n}" if k else "")
        assert value(last, "acceptance_length") == pytest.approx(al, rel=1e-6)
        accepted += value(last, "total_accepted_draft_tokens")
    assert accepted > 0  # the drafts were accepted: the comparison of acceptance lengths means something


def test_speculation_off_gives_the_same_text(served):
    pieces, last = request(served["url"], PROMPTS["chat"], "chat", max_tokens=MAX_TOKENS,
                           extra={"speculation": (False, "BOOL")})
    assert text_of(pieces) == runtime(served, PROMPTS["chat"], 0, None)[0]
    assert value(last, "num_draft_tokens") == 0 and value(last, "acceptance_length") == 1.0


def test_the_trtllm_flavor_orchestration_drafts_ngrams_for_the_cpu_target(served):
    """spec_decode's BLS engine (the trtllm flavor's code: n-gram drafts from the shipped pool sent as
    draft_input_ids to tensorrt_llm) against the cpu stand-in of the target engine: the same text.
    Its acceptance is per BLS round (test_triton_serve.py's
    test_spec_decode_bls_engine_against_the_cpu_tensorrt_llm_models), not the runtime's."""
    with bls_engine(served["url"]):
        for workload in ("chat", "code"):
            k, n = CHOICES[workload]
            pieces, last = request(served["url"], PROMPTS[workload], workload, max_tokens=MAX_TOKENS)
            assert text_of(pieces) == runtime(served, PROMPTS[workload], k, n)[0]
            assert value(last, "num_draft_tokens") == k and 1.0 <= value(last, "acceptance_length") <= k + 1
            assert value(last, "total_draft_tokens") > 0
