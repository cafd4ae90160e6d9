"""The cpu-flavor repository on the real default model (slow): SmolLM2-135M-Instruct as the target
and its 6-layer truncation as the draft -> a draft-target pair -> tuning.json (chat K=3, code K=2)
-> cpu repository -> bundled tritonserver -> gRPC streaming requests. Chat (rendered with the chat
template) and code prompts, 2 of each concurrently, must return exactly the target's greedy text
(byte-level BPE: multi-byte characters and spaces are where streaming detokenization goes wrong),
with their tuned K and the acceptance length trtspec.runtime measures."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from serve_helpers import procs_mentioning, request, text_of, value
from triton_fixtures import tuning_file
from trtspec.runtime.generate import load_models, stream_request
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.ports import server_ports
from trtspec.triton_repo.serve import CpuServer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
MAX_TOKENS = 24
K = {"chat": 3, "code": 2}


@pytest.fixture(scope="module")
def smol(smollm2_hf, smollm2_draft_hf, tmp_path_factory):
    from transformers import AutoTokenizer

    from trtspec.checkpoints.pair import convert_pair

    d = tmp_path_factory.mktemp("smol_triton").resolve()
    convert_pair(smollm2_hf, smollm2_draft_hf, d / "pair", dtype="float32")
    tuning = tuning_file(d / "t" / "tuning.json", "draft-target", K, bands=(1,))
    repo = d / "repo"
    make_repository(RepoRequest(tuning=tuning, flavor="cpu", out=repo, ckpt=d / "pair"))
    tok = AutoTokenizer.from_pretrained(str(d / "pair" / "target"))
    prompts = {"chat": tok.apply_chat_template([{"role": "user", "content": "Write a haiku about café crème."}],
                                               add_generation_prompt=True, tokenize=False),
               "code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"}
    server = CpuServer(repo, *server_ports(), log_file=d / "server.log").start(400)
    yield {"url": server.grpc_url, "tok": tok, "prompts": prompts, "repo": repo,
           "models": load_models(d / "pair" / "target", d / "pair" / "draft", tokenizer=False)}
    assert server.stop() == 0
    assert procs_mentioning(str(repo)) == []


def test_smollm2_chat_and_code_served_exactly(smol):
    m, tok = smol["models"], smol["tok"]
    eos = (tok.eos_token_id,)
    want = {}
    for w, text in smol["prompts"].items():
        ids = tok.encode(text)
        greedy = [t for p in stream_request(m, ids, MAX_TOKENS, "greedy", eos_ids=eos) for t in p.tokens]
        spec = list(stream_request(m, ids, MAX_TOKENS, "draft-target", draft_len=K[w], eos_ids=eos))
        assert [t for p in spec for t in p.tokens] == greedy
        want[w] = (tok.decode(greedy, skip_special_tokens=True), spec[-1].stats.acceptance_length)
    jobs = ["chat", "code"] * 2
    with ThreadPoolExecutor(len(jobs)) as ex:
        results = list(ex.map(lambda w: request(smol["url"], smol["prompts"][w], w, max_tokens=MAX_TOKENS), jobs))
    for w, (pieces, last) in zip(jobs, results):
        assert text_of(pieces) == want[w][0]
        assert value(last, "num_draft_tokens") == K[w]
        assert value(last, "acceptance_length") == pytest.approx(want[w][1], rel=1e-6)
    assert want["chat"][0].strip() and want["code"][0].strip()


def test_smollm2_sampled_requests(smol):
    """T = 0.7, top_p 0.9: the served text is trtspec.runtime's plain sampled text for the seed (exact
    match with keyed draws), not the greedy one, with the runtime's acceptance counters; same seed,
    same text."""
    from trtspec.options import Sampling

    m, tok = smol["models"], smol["tok"]
    eos = (tok.eos_token_id,)
    text = smol["prompts"]["code"]
    ids = tok.encode(text)
    s = Sampling(temperature=0.7, top_p=0.9, seed=21)
    plain = [t for p in stream_request(m, ids, MAX_TOKENS, "greedy", eos_ids=eos, sampling=s) for t in p.tokens]
    greedy = [t for p in stream_request(m, ids, MAX_TOKENS, "greedy", eos_ids=eos) for t in p.tokens]
    spec = list(stream_request(m, ids, MAX_TOKENS, "draft-target", draft_len=K["code"], eos_ids=eos, sampling=s))
    assert [t for p in spec for t in p.tokens] == plain != greedy
    extra = {"temperature": (0.7, "FP32"), "top_p": (0.9, "FP32"), "seed": (21, "UINT64")}
    for _ in range(2):
        pieces, last = request(smol["url"], text, "code", max_tokens=MAX_TOKENS, extra=extra)
        assert text_of(pieces) == tok.decode(plain, skip_special_tokens=True)
        assert value(last, "acceptance_length") == pytest.approx(spec[-1].stats.acceptance_length, rel=1e-6)
        assert value(last, "total_accepted_draft_tokens") == spec[-1].stats.accepted_draft_tokens
