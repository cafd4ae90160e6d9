"""EAGLE-3 served by the cpu flavor through a live tritonserver: a tiny target + an EAGLE-3 head
(ModelOpt-built, see tests/tiny_models.py), an eagle3 tuning with a different K per workload, the
repository's spec_decode running trtspec.runtime's EAGLE-3 proposer; gRPC streaming requests get
the target's greedy text, the workload's K and the acceptance length the runtime measures."""

from __future__ import annotations

import json

import pytest

from serve_helpers import procs_mentioning, request, text_of, value
from tiny_models import eagle3_dirs, save_tiny_tokenizer
from triton_fixtures import tuning_file
from trtspec.runtime.generate import load_models, stream_request
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.ports import server_ports
from trtspec.triton_repo.serve import CpuServer
from trtspec.triton_repo.validate import check_repository

grpcclient = pytest.importorskip("tritonclient.grpc")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
V, MAX_TOKENS = 48, 20
PROMPTS = {"chat": "t5 t17 t30 t42 t9", "code": "t9 t8 t7 t40"}
KS = {"chat": 2, "code": 4}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_eagle3").resolve()
    eagle3_dirs(d, V)
    save_tiny_tokenizer(d / "ckpt", vocab_size=V)
    tuning = tuning_file(d / "t" / "tuning.json", "draft-target", {w: [k] for w, k in KS.items()}, bands=(1,))
    t = json.loads(tuning.read_text())
    t["mode"] = "eagle3"  # the chain choices, tuned for the head
    tuning.write_text(json.dumps(t))
    repo = d / "repo"
    make_repository(RepoRequest(tuning=tuning, flavor="cpu", out=repo, ckpt=d / "ckpt", draft_ckpt=d / "bigram_head",
                                default_workload="chat"))
    assert check_repository(repo) == []
    server = CpuServer(repo, *server_ports(), log_file=d / "server.log").start(240)
    yield {"repo": repo, "url": server.grpc_url,
           "models": load_models(d / "ckpt", tokenizer=False, eagle3_head=d / "bigram_head"),
           "tok": __import__("transformers").AutoTokenizer.from_pretrained(str(d / "ckpt"))}
    assert server.stop() == 0
    assert procs_mentioning(str(repo)) == []


def test_each_workload_gets_the_targets_greedy_text_with_its_tuned_k(served):
    m, tok = served["models"], served["tok"]
    als = set()
    for workload, k in KS.items():
        ids = tok.encode(PROMPTS[workload])
        eos = (tok.eos_token_id,)
        ref = list(stream_request(m, ids, MAX_TOKENS, "eagle3", draft_len=k, eos_ids=eos))
        greedy = [t for p in stream_request(m, ids, MAX_TOKENS, "greedy", eos_ids=eos) for t in p.tokens]
        assert [t for p in ref for t in p.tokens] == greedy
        pieces, last = request(served["url"], PROMPTS[workload], workload, max_tokens=MAX_TOKENS)
        assert len(pieces) > 1  # streamed
        assert text_of(pieces) == tok.decode(greedy, skip_special_tokens=True)
        assert value(last, "num_draft_tokens") == k
        assert value(last, "acceptance_length") == pytest.approx(ref[-1].stats.acceptance_length, rel=1e-6)
        als.add(round(value(last, "acceptance_length"), 4))
    assert max(als) > 1.0  # the head's drafts are accepted: the check is not vacuous
