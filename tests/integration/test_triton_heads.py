"""Two EAGLE-3 heads served by one cpu-flavor repository through a live tritonserver: the recipe's
per-workload heads (tests/pipeline/test_workload_heads.py: a two-cycle target, a head per cycle),
routed by the tuner, drafted by one spec_decode on one target. Each workload's stream is the
target's greedy text, its route names its head, and its acceptance length is the one the runtime
measures with that head."""

from __future__ import annotations

import pytest
import yaml

from pipeline.test_workload_heads import A, B, fake_cached_head, setup  # noqa: F401 (setup: the fixture)
from serve_helpers import procs_mentioning, request, text_of, value
from trtspec.pipeline.runner import run_recipe
from trtspec.runtime.generate import load_models, stream_request
from trtspec.triton_repo.ports import server_ports
from trtspec.triton_repo.serve import CpuServer

grpcclient = pytest.importorskip("tritonclient.grpc")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def served(setup, tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_heads").resolve()
    recipe = {"target": str(setup / "hf"), "dtype": "float32", "draft": {"train": {"per_workload": True}},
              "workloads": {"chat": str(setup / "chat.jsonl"), "edit": str(setup / "edit.jsonl")},
              "profile": {"samples": 4, "max_new_tokens": 16, "max_k": 3},
              "tune": {"cost": "h100", "concurrency_bands": [1]}, "triton": {"flavor": "cpu"}}
    (d / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("trtspec.drafts.cache.cached_head", fake_cached_head(setup))
        run_recipe(d / "recipe.yaml", d / "out", until="triton")
    repo = d / "out" / "triton-repo"
    server = CpuServer(repo, *server_ports(), log_file=d / "server.log").start(240)
    yield {"url": server.grpc_url, "out": d / "out", "tok": __import__("transformers").AutoTokenizer
           .from_pretrained(str(setup / "hf"))}
    assert server.stop() == 0
    assert procs_mentioning(str(repo)) == []


def test_each_workload_streams_the_greedy_text_drafted_by_its_own_head(served):
    out, tok = served["out"], served["tok"]
    for workload, cycle in (("chat", A), ("edit", B)):
        text = " ".join(f"t{i}" for i in (cycle[0], cycle[5], cycle[2]))
        ids = tok.encode(text)
        m = load_models(out / "checkpoint", tokenizer=False, eagle3_head=out / "draft-heads" / workload)
        eos = (tok.eos_token_id,)
        greedy = [t for p in stream_request(m, ids, MAX_TOKENS, "greedy", eos_ids=eos) for t in p.tokens]
        pieces, last = request(served["url"], text, workload, max_tokens=MAX_TOKENS)
        k = value(last, "num_draft_tokens")
        ref = list(stream_request(m, ids, MAX_TOKENS, "eagle3", draft_len=k, eos_ids=eos))
        assert text_of(pieces) == tok.decode(greedy, skip_special_tokens=True)
        assert f"head=eagle3-{workload}" in value(last, "route")
        assert value(last, "acceptance_length") == pytest.approx(ref[-1].stats.acceptance_length, rel=1e-6)
        assert value(last, "acceptance_length") > 1.5  # its own head drafts this workload's cycle
