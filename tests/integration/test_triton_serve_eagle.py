"""End to end on CPU: tiny EAGLE checkpoint -> tuning.json with a tree per workload -> cpu-flavor
repository -> tritonserver -> tritonclient gRPC streaming requests to `generate`.

One server for the module, started with CpuServer (the draft-target repository and the helpers are
tests/integration/test_triton_serve.py's and tests/serve_helpers.py's). What the tests assert:
- chat and code are routed to their tree profiles (one engine per profile), each streaming exactly
  the target's greedy text with the acceptance length trtspec.runtime measures for that tree;
  speculation=false is refused (EAGLE engines always draft);
- a sampled request is answered greedily, as TensorRT-LLM's Triton backend decodes EAGLE engines,
  flagged sampling_fallback = "greedy"; a negative temperature is still an error.
"""

from __future__ import annotations

import pytest

from serve_helpers import MAX_TOKENS, PROMPTS, procs_mentioning, request, text_of, value
from triton_fixtures import TREE_A, TREE_B, cpu_repository, tiny_eagle
from trtspec.runtime.generate import load_models, stream_request
from trtspec.triton_repo.models.serving_rules import label_band
from trtspec.triton_repo.ports import server_ports
from trtspec.triton_repo.serve import CpuServer

grpcclient = pytest.importorskip("tritonclient.grpc")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def eagle(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_eagle").resolve()
    ckpt = tiny_eagle(d)
    repo, _ = cpu_repository(d, "eagle", ckpt, {"chat": TREE_A, "code": TREE_B}, bands=(1,))
    server = CpuServer(repo, *server_ports(), log_file=d / "server.log").start(240)
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
