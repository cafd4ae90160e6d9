"""N-gram repositories: the trtllm flavor (spec_decode drafting from a shipped n-gram pool to a
draft_tokens_external target engine, no draft engine), the cpu flavor, and the llmapi flavor
(NGramDecodingConfig in model.yaml); configs parsed with Triton's protobuf and validated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from triton_fixtures import DRAFT, LLAMA, build_dir, fake_ckpt, tiny_tokenizer_dir, tuning_file
from trtspec.errors import TrtspecError
from trtspec.runtime import ngram_pool
from trtspec.perf.sweep import settings_for
from trtspec.triton_repo.command import triton_command
from trtspec.triton_repo.configs import parse_file, params
from trtspec.triton_repo.models.serving_rules import ngram_size
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
    make_repository(RepoRequest(out=out, **{"tuning": w["tuning"], **kw}))
    return out


def routing_of(repo: Path) -> dict:
    return json.loads(params(parse_file(repo / "generate" / "config.pbtxt"))["routing"])


def hf_dir(path: Path) -> Path:
    """A Hugging Face model directory as the llmapi flavor reads it (its config.json)."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"}))
    return path


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
    target = hf_dir(w["root"] / "hf")
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


def test_llmapi_check_refuses_keys_the_1_2_llm_api_forbids(w):
    """TensorRT-LLM's LLM API configs forbid extra fields, so a misspelled model.yaml key (or a decoding
    type its from_dict does not map) fails the model at load on the GPU host: --check says so here."""
    repo = make(w, "llmapi_keys", flavor="llmapi", ckpt=hf_dir(w["root"] / "hf_keys"))
    assert check_repository(repo) == []  # every key trtspec writes is a 1.2 field (upstream.triton LLMAPI_*)
    k5, k3 = (repo / m / "1" / "model.yaml" for m in ("tensorrt_llm_k5_n3", "tensorrt_llm_k3_n2"))
    k5.write_text(k5.read_text().replace("is_keep_all:", "keep_all:") + "kv_cache_config:\n  free_gpu_mem_fraction: 0.4\n")
    k3.write_text(k3.read_text().replace("decoding_type: NGram", "decoding_type: Draft_Target")
                  + "max_num_tokens: 8192\n")  # any LLM() argument may be added at the top level
    probs = check_repository(repo)
    assert not any("max_num_tokens" in p for p in probs)
    assert any(f"{k5}: speculative_config.keep_all is not a TensorRT-LLM 1.2" in p for p in probs)
    assert any(f"{k5}: kv_cache_config.free_gpu_mem_fraction is not a TensorRT-LLM 1.2" in p for p in probs)
    assert any(f"{k3}: speculative_config.decoding_type 'Draft_Target' is not one of" in p for p in probs)


# ---- a draft-target tuning whose drafter choice serves n-gram drafting only ---------------------------

def ngram_only_choice(d: Path, model_served: bool = False, separate_instances: bool = False,
                      mode: str = "draft-target") -> Path:
    """A draft-target (or eagle3) tuning.json whose choice (tuning/choose.py) left the draft model out
    (the memory budget) and serves n-gram drafting to edit and code, chat off: CHOICES as choose writes
    them. model_served: the same choice with the draft model served (a control)."""
    from trtspec.tuning.schema import dump_json
    from trtspec.tuning.tuning_schema import DrafterChoice, OfferedDrafter, load_tuning

    path = tuning_file(d / "tuning.json", mode, {w: 0 for w in CHOICES})
    t = load_tuning(path)
    for w, (k, n) in CHOICES.items():
        for b in t.workloads[w].bands:
            b.draft_len, b.max_matching_ngram_size, b.speculate = k, n if k else None, k > 0
            b.drafter = "ngram" if k else None
    t.max_draft_len = max(k for k, _ in CHOICES.values())
    t.choice = DrafterChoice(drafters={
        mode: OfferedDrafter(mode=mode, profile=t.profile, memory_gib=1.5, served=model_served),
        "ngram": OfferedDrafter(mode="ngram", profile=t.profile, memory_gib=0.0, served=True)},
        memory_budget_gib=None if model_served else 1.0, separate_instances=separate_instances, memory_gib=0.0,
        score=1.0)
    path.write_text(dump_json(t))
    return path


def test_trtllm_flavor_loads_no_draft_engine_the_choice_does_not_serve(w):
    """The budget left the draft model out: no route drafts with it, so the repository neither loads
    its engine (no tensorrt_llm_draft, no BLS call to it, no memory or mount for it) nor lets
    spec_decode draft with a model; the n-gram routes are served as an n-gram repository's.
    The control with the draft model served keeps it."""
    build = w["build"]
    tuning = ngram_only_choice(w["root"] / "only_ngram")
    repo = make(w, "trt_only_ngram", flavor="trtllm", engines=build, tuning=tuning, default_workload="edit")
    assert check_repository(repo) == []
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == [
        "generate", "postprocessing", "preprocessing", "spec_decode", "tensorrt_llm"]
    spec = parse_file(repo / "spec_decode" / "config.pbtxt")
    p = params(spec)
    assert (p["engine"], p["drafter"], p["draft_model"], p["max_draft_len"]) == ("bls", "ngram", "", "8")
    assert "max_matching_ngram_size" in [t.name for t in spec.input]
    routing = routing_of(repo)
    assert routing["mode"] == "draft-target" and routing["drafter"] == "ngram"
    for workload in ("chat", "unknown"):  # routed off: a sweep drafts n-grams, which spec_decode takes
        swept = [s for s in settings_for(routing, workload, 8) if s.num_draft_tokens]
        assert swept and all(s.drafter == "ngram" and s.max_matching_ngram_size in (2, 3) for s in swept)
        assert all(ngram_size(s.max_matching_ngram_size, {"ngram"}, s.num_draft_tokens) for s in swept)
    assert routing["workloads"]["edit"] == [{"concurrency": c, "num_draft_tokens": 5, "max_matching_ngram_size": 3}
                                            for c in (1, 4)]
    assert all(b["num_draft_tokens"] == 0 or "max_matching_ngram_size" in b  # nothing left for a model
               for bands in [*routing["workloads"].values(), routing["default"]["bands"]] for b in bands)
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert [(c["caller"], c["callee"]) for c in manifest["calls"]] == [
        ("generate", "preprocessing"), ("generate", "spec_decode"), ("spec_decode", "tensorrt_llm"),
        ("generate", "postprocessing")]
    assert manifest["launch"]["trtllm_models"] == ["tensorrt_llm"] and not manifest["launch"]["orchestrator"]
    assert [m["model"] for m in manifest["memory"]["models"]] == ["tensorrt_llm"]
    assert [a["role"] for a in manifest["artifacts"]] == ["target"]
    assert not any("draft" in m for m in manifest["launch"]["mounts"])
    assert "tensorrt_llm_draft" not in (repo / "README.md").read_text()
    cfg = repo / "generate" / "config.pbtxt"  # a route left to the model it no longer has: refused
    cfg.write_text(cfg.read_text().replace('\\"max_matching_ngram_size\\":3,', "", 1))
    assert any("routing: workload '(default)' drafts K=5 with a draft model at concurrency 1, but spec_decode has "
               "none (drafter 'ngram')" in p for p in check_repository(repo)), check_repository(repo)

    served = make(w, "trt_both", flavor="trtllm", engines=build, tuning=ngram_only_choice(
        w["root"] / "both", model_served=True), default_workload="edit")
    assert (served / "tensorrt_llm_draft" / "config.pbtxt").is_file()
    assert params(parse_file(served / "spec_decode" / "config.pbtxt"))["drafter"] == "model,ngram"


def test_cpu_flavor_loads_no_draft_checkpoint_the_choice_does_not_serve(w):
    """The cpu flavor alike: no tensorrt_llm_draft model and spec_decode loads the target alone."""
    pair = w["root"] / "pair"
    fake_ckpt(pair / "target", LLAMA)
    fake_ckpt(pair / "draft", DRAFT)
    tuning = ngram_only_choice(w["root"] / "only_ngram_cpu")
    repo = make(w, "cpu_only_ngram", flavor="cpu", ckpt=pair, tuning=tuning, tokenizer=w["tok"])
    assert check_repository(repo) == []
    assert sorted(x.name for x in repo.iterdir() if x.is_dir()) == [
        "generate", "postprocessing", "preprocessing", "spec_decode", "tensorrt_llm"]
    p = params(parse_file(repo / "spec_decode" / "config.pbtxt"))
    assert (p["engine"], p["drafter"], p["target_checkpoint"], p["draft_checkpoint"]) == (
        "trtspec.runtime", "ngram", str(pair / "target"), "")
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert "tensorrt_llm_draft" not in {c["callee"] for c in manifest["calls"]}
    assert [a["role"] for a in manifest["artifacts"]] == ["target"]


def test_llmapi_flavor_says_when_the_choice_counted_shared_instances(w):
    """The llmapi flavor serves the smallest band, one model per setting: a choice made for shared
    instances (every band, one target) reported served drafters and memory for another repository,
    which the build says; a choice made with separate instances is this flavor's and passes quietly."""
    from trtspec.triton_repo.repo import RepoRequest, make_repository

    target, draft = hf_dir(w["root"] / "hf_choice"), hf_dir(w["root"] / "hf_choice_draft")  # (draft: never loaded)
    warned = {}
    for separate in (False, True):
        tuning = ngram_only_choice(w["root"] / f"llmapi_choice_{separate}", separate_instances=separate)
        res = make_repository(RepoRequest(out=w["root"] / f"llmapi_choice_{separate}_repo", tuning=tuning,
                                          flavor="llmapi", ckpt=target, draft_ckpt=draft))
        assert check_repository(res.path) == []
        served = json.loads((res.path / "trtspec-repo.json").read_text())
        assert str(draft) not in served["launch"]["mounts"] and "tensorrt_llm_k5_n3" in served["models"]
        warned[separate] = [x for x in res.warnings if "separate_instances" in x]
    assert len(warned[False]) == 1 and "tune again with separate_instances true" in warned[False][0]
    assert warned[True] == []


# ---- ... and so needs no draft given; one the choice serves is still needed --------------------------

def no_draft_model(repo: Path) -> None:
    """The repository validates and drafts n-grams only (what perf --sweep sends it too): no draft
    model, no draft artifact."""
    assert check_repository(repo) == []
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == [
        "generate", "postprocessing", "preprocessing", "spec_decode", "tensorrt_llm"]
    assert params(parse_file(repo / "spec_decode" / "config.pbtxt"))["drafter"] == "ngram"
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert [a["role"] for a in manifest["artifacts"]] == ["target"]
    assert manifest["routing"]["drafter"] == "ngram"
    swept = [s for s in settings_for(manifest["routing"], "chat", 8) if s.num_draft_tokens]
    assert swept and all(s.drafter == "ngram" for s in swept)


def test_trtllm_flavor_needs_no_draft_engine_the_choice_does_not_serve(w):
    """The target engine alone (its own directory, no build directory naming a draft) is enough, and
    the repository is the one a given draft engine makes; a choice serving the draft still needs it."""
    target = w["build"] / "engines" / "target"
    tuning = ngram_only_choice(w["root"] / "no_draft_trt")
    repo = make(w, "trt_no_draft", flavor="trtllm", engines=target, tuning=tuning)
    no_draft_model(repo)
    given = make(w, "trt_draft_given", flavor="trtllm", engines=w["build"], tuning=tuning)
    manifest, with_draft = (json.loads((r / "trtspec-repo.json").read_text()) for r in (repo, given))
    assert manifest == with_draft
    served = ngram_only_choice(w["root"] / "draft_served_trt", model_served=True)
    with pytest.raises(TrtspecError, match="^draft_engines: needed"):
        make(w, "trt_draft_served", flavor="trtllm", engines=target, tuning=served)


def test_cpu_flavor_needs_no_draft_checkpoint_the_choice_does_not_serve(w):
    """A plain target checkpoint (no pair, no draft_ckpt) is enough, for an eagle3 tuning (no head)
    alike, from the library and from `trtspec triton`; a choice serving the draft still needs it."""
    target = fake_ckpt(w["root"] / "no_draft_target", LLAMA)
    tunings = {}
    for mode in ("draft-target", "eagle3"):
        tuning = tunings[mode] = ngram_only_choice(w["root"] / f"no_draft_cpu_{mode}", mode=mode)
        repo = make(w, f"cpu_no_draft_{mode}", flavor="cpu", ckpt=target, tuning=tuning, tokenizer=w["tok"])
        no_draft_model(repo)
        p = params(parse_file(repo / "spec_decode" / "config.pbtxt"))
        assert (p["target_checkpoint"], p["draft_checkpoint"]) == (str(target), "")
        served = tunings[f"{mode} served"] = ngram_only_choice(w["root"] / f"draft_served_cpu_{mode}",
                                                               model_served=True, mode=mode)
        with pytest.raises(TrtspecError, match="^draft_ckpt: needed"):
            make(w, f"cpu_draft_served_{mode}", flavor="cpu", ckpt=target, tuning=served, tokenizer=w["tok"])

    app = typer.Typer()
    app.command()(triton_command)
    args = ["--flavor", "cpu", "--ckpt", str(target), "--tokenizer", str(w["tok"])]
    res = CliRunner().invoke(app, [*args, "--tuning", str(tunings["draft-target"]),
                                   "--out", str(w["root"] / "cli_no_draft")])
    assert res.exit_code == 0, res.output
    no_draft_model(w["root"] / "cli_no_draft")
    res = CliRunner().invoke(app, [*args, "--tuning", str(tunings["draft-target served"]),
                                   "--out", str(w["root"] / "cli_draft_served")])
    assert isinstance(res.exception, TrtspecError) and str(res.exception).startswith("--draft-ckpt: needed")


def test_llmapi_flavor_needs_no_draft_the_choice_does_not_serve(w):
    target = hf_dir(w["root"] / "hf_no_draft")
    tuning = ngram_only_choice(w["root"] / "no_draft_llmapi", separate_instances=True)
    repo = make(w, "llmapi_no_draft", flavor="llmapi", ckpt=target, tuning=tuning)
    assert check_repository(repo) == []
    assert [a["role"] for a in json.loads((repo / "trtspec-repo.json").read_text())["artifacts"]] == ["target"]
    served = ngram_only_choice(w["root"] / "draft_served_llmapi", model_served=True)
    with pytest.raises(TrtspecError, match="^draft_ckpt: needed"):
        make(w, "llmapi_draft_served", flavor="llmapi", ckpt=target, tuning=served)
