"""N-gram repositories: the trtllm flavor (spec_decode drafting from a shipped n-gram pool to a
draft_tokens_external target engine, no draft engine), the cpu flavor, and the llmapi flavor
(NGramDecodingConfig in model.yaml); configs parsed with Triton's protobuf and validated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from triton_fixtures import LLAMA, build_dir, fake_ckpt, tiny_tokenizer_dir, tuning_file
from trtspec.errors import TrtspecError
from trtspec.runtime import ngram_pool
from trtspec.triton_repo.configs import parse_file, params
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.validate import check_repository

CHOICES = {"chat": (0, None), "edit": (5, 3), "code": (3, 2)}


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    root = tmp_path_factory.mktemp("ngram_repo").resolve()
    tok = tiny_tokenizer_dir(root / "tokenizer")
    return {"root": root, "tok": tok, "build": build_dir(root / "build", "draft-target", tok, max_draft_len=8),
            "tuning": tuning_file(root / "t" / "tuning.json", "ngram", CHOICES)}


def make(w, name, **kw) -> Path:
    out = w["root"] / name
    make_repository(RepoRequest(out=out, tuning=w["tuning"], **kw))
    return out


def routing_of(repo: Path) -> dict:
    return json.loads(params(parse_file(repo / "generate" / "config.pbtxt"))["routing"])


def test_trtllm_flavor_drafts_in_spec_decode_for_the_target_engine_alone(w):
    repo = make(w, "trt", flavor="trtllm", engines=w["build"], default_workload="edit")
    assert check_repository(repo) == []
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == [
        "generate", "postprocessing", "preprocessing", "spec_decode", "tensorrt_llm"]
    spec = parse_file(repo / "spec_decode" / "config.pbtxt")
    p = params(spec)
    assert (p["engine"], p["drafter"], p["max_draft_len"]) == ("bls", "ngram", "8")
    assert "max_matching_ngram_size" in [t.name for t in spec.input]
    assert (repo / "spec_decode" / "1" / "ngram_pool.py").read_text() == Path(ngram_pool.__file__).read_text()
    routing = routing_of(repo)
    assert routing["mode"] == "ngram"
    assert routing["workloads"]["edit"] == [{"concurrency": c, "num_draft_tokens": 5, "max_matching_ngram_size": 3}
                                            for c in (1, 4)]
    assert routing["workloads"]["chat"] == [{"concurrency": c, "num_draft_tokens": 0} for c in (1, 4)]
    assert routing["default"]["bands"] == routing["workloads"]["edit"]
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert manifest["launch"]["trtllm_models"] == ["tensorrt_llm"] and not manifest["launch"]["orchestrator"]
    assert [(c["caller"], c["callee"]) for c in manifest["calls"]] == [
        ("generate", "preprocessing"), ("generate", "spec_decode"), ("spec_decode", "tensorrt_llm"),
        ("generate", "postprocessing")]
    assert manifest["sampling"]["path"] == "engine-draft-target"


def test_cpu_flavor_serves_the_checkpoint_with_an_ngram_spec_decode(w):
    ckpt = fake_ckpt(w["root"] / "ck", LLAMA)
    repo = make(w, "cpu", flavor="cpu", ckpt=ckpt, tokenizer=w["tok"])
    assert check_repository(repo) == []
    p = params(parse_file(repo / "spec_decode" / "config.pbtxt"))
    assert (p["engine"], p["drafter"], p["target_checkpoint"], p["draft_checkpoint"]) == (
        "trtspec.runtime", "ngram", str(ckpt), "")
    assert sorted(x.name for x in repo.iterdir() if x.is_dir()) == [
        "generate", "postprocessing", "preprocessing", "spec_decode", "tensorrt_llm"]
    with pytest.raises(TrtspecError, match="^draft_ckpt: n-gram drafting has no draft model"):
        make(w, "cpu2", flavor="cpu", ckpt=ckpt, draft_ckpt=ckpt, tokenizer=w["tok"])


def test_llmapi_flavor_writes_one_ngram_model_per_tuned_setting(w):
    target = w["root"] / "hf"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"}))
    repo = make(w, "llmapi", flavor="llmapi", ckpt=target)
    assert check_repository(repo) == []
    routing = routing_of(repo)
    default = routing["default"]  # computed: the (K, n) best over the tuned sweeps, its own model
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == sorted(
        {"generate", "tensorrt_llm_k0", "tensorrt_llm_k3_n2", "tensorrt_llm_k5_n3", default["model"]})
    assert default["model"] == f"tensorrt_llm_k{default['num_draft_tokens']}_n{default['max_matching_ngram_size']}"
    y = yaml.safe_load((repo / "tensorrt_llm_k5_n3" / "1" / "model.yaml").read_text())
    assert y["model"] == str(target) and y["backend"] == "pytorch"
    assert y["speculative_config"] == {"decoding_type": "NGram", "max_draft_len": 5, "max_matching_ngram_size": 3,
                                       "is_keep_all": True, "is_use_oldest": True, "is_public_pool": False}
    assert "speculative_config" not in yaml.safe_load((repo / "tensorrt_llm_k0" / "1" / "model.yaml").read_text())
    assert routing["workloads"]["code"] == {"model": "tensorrt_llm_k3_n2", "num_draft_tokens": 3,
                                            "max_matching_ngram_size": 2}
    assert routing["workloads"]["chat"] == {"model": "tensorrt_llm_k0", "num_draft_tokens": 0}
    y_path = repo / "tensorrt_llm_k3_n2" / "1" / "model.yaml"
    y_path.write_text(y_path.read_text().replace("max_matching_ngram_size: 2", "max_matching_ngram_size: 4"))
    assert any("speculative_config.max_matching_ngram_size 4 but the routing serves max_matching_ngram_size 2" in p
               for p in check_repository(repo))
