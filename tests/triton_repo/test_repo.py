"""Repository generation (trtllm and cpu flavors), validation, golden files and bad inputs.

The engines are the fake trtllm-build's engine directories (config.json + rank files, see
tests/fake_trtllm_build.py), so everything here runs in seconds without a GPU. Golden files:
tests/golden/triton/<case>/<model>/config.pbtxt with the temporary root replaced by @ROOT@;
regenerate with TRTSPEC_UPDATE_GOLDEN=1 after an intended change and review the diff.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from triton_fixtures import (DRAFT, EAGLE, LLAMA, TREE_A, TREE_B, build_dir, env_flag, fake_ckpt, fake_engine,
                                 tiny_tokenizer_dir, tuning_file)
from trtspec.errors import TrtspecError
from trtspec.triton_repo.command import triton_command
from trtspec.triton_repo.configs import parse_file, params
from trtspec.triton_repo.models import HELPERS
from trtspec.triton_repo.models.serving_rules import parse_braces
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.upstream.triton import TENSORRT_LLM_INPUTS, TENSORRT_LLM_OUTPUTS, TENSORRT_LLM_PARAMETERS
from trtspec.triton_repo.validate import check_repository

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "triton"
DT_CHOICES = {"chat": [3, 2], "code": [5, 4], "math": [0, 0]}
EAGLE_CHOICES = {"chat": TREE_A, "code": TREE_B, "math": TREE_A}


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton_repo").resolve()
    tok = tiny_tokenizer_dir(root / "tokenizer")
    return {"root": root, "tok": tok,
            "dt_build": build_dir(root / "build_dt", "draft-target", tok, max_draft_len=8),
            "eagle_build": build_dir(root / "build_eagle", "eagle", tok),
            "dt_tuning": tuning_file(root / "tdt" / "tuning.json", "draft-target", DT_CHOICES),
            "e3_tuning": tuning_file(root / "te3" / "tuning.json", "eagle3", DT_CHOICES),
            "eagle_tuning": tuning_file(root / "te" / "tuning.json", "eagle", EAGLE_CHOICES)}


def make(w, name, **kw) -> Path:
    out = w["root"] / name
    make_repository(RepoRequest(out=out, **kw))
    return out


def compare_golden(repo: Path, root: Path, case: str) -> None:
    got = {p.parent.name: p.read_text().replace(str(root), "@ROOT@") for p in sorted(repo.glob("*/config.pbtxt"))}
    gold = GOLDEN / case
    if env_flag("TRTSPEC_UPDATE_GOLDEN"):
        shutil.rmtree(gold, ignore_errors=True)
        for name, text in got.items():
            (gold / name).mkdir(parents=True)
            (gold / name / "config.pbtxt").write_text(text)
    want = {p.parent.name: p.read_text() for p in sorted(gold.glob("*/config.pbtxt"))}
    assert sorted(got) == sorted(want), "models differ from the golden repository"
    for name in got:
        assert got[name] == want[name], f"{case}/{name}/config.pbtxt differs from the golden file"


def test_trtllm_draft_target_repository(w):
    repo = make(w, "trt_dt", tuning=w["dt_tuning"], flavor="trtllm", engines=w["dt_build"], default_workload="chat")
    assert check_repository(repo) == []
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == [
        "generate", "postprocessing", "preprocessing", "spec_decode", "tensorrt_llm", "tensorrt_llm_draft"]
    for name, engine in (("tensorrt_llm", "target"), ("tensorrt_llm_draft", "draft")):
        cfg = parse_file(repo / name / "config.pbtxt")
        p = params(cfg)
        assert cfg.backend == "tensorrtllm" and cfg.model_transaction_policy.decoupled
        assert [t.name for t in cfg.input] == [t.name for t in TENSORRT_LLM_INPUTS]
        assert [t.name for t in cfg.output] == [t.name for t in TENSORRT_LLM_OUTPUTS]
        assert sorted(p) == sorted(TENSORRT_LLM_PARAMETERS)  # text_format writes map keys sorted
        assert p["gpt_model_path"] == str(w["dt_build"] / "engines" / engine)
        assert p["enable_kv_cache_reuse"] == "true" and p["exclude_input_in_output"] == "true"
        assert p["gpt_model_type"] == "inflight_fused_batching" and p["tokenizer_dir"] == str(w["tok"])
        assert int(p["max_tokens_in_paged_kv_cache"]) > 0 and p["gpu_device_ids"] == "0"
        assert "${" not in (repo / name / "config.pbtxt").read_text()
    assert params(parse_file(repo / "spec_decode" / "config.pbtxt"))["engine"] == "bls"
    assert params(parse_file(repo / "spec_decode" / "config.pbtxt"))["max_draft_len"] == "8"
    routing = json.loads(params(parse_file(repo / "generate" / "config.pbtxt"))["routing"])
    assert routing["workloads"]["chat"] == [{"concurrency": 1, "num_draft_tokens": 3},
                                            {"concurrency": 4, "num_draft_tokens": 2}]
    assert [b["num_draft_tokens"] for b in routing["workloads"]["math"]] == [0, 0]
    assert routing["default"]["bands"] == routing["workloads"]["chat"]
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert manifest["launch"]["orchestrator"] and manifest["launch"]["world_size"] == 1
    assert manifest["launch"]["trtllm_models"] == ["tensorrt_llm", "tensorrt_llm_draft"]
    kv = {m["model"]: m["kv_tokens"] for m in manifest["memory"]["models"]}
    assert kv["tensorrt_llm"] == kv["tensorrt_llm_draft"] > 0  # one shared pool: every request is in both
    readme = (repo / "README.md").read_text()
    assert "TRTLLM_ORCHESTRATOR=1" in readme and "MPI world size: 1 (orchestrator mode" in readme
    assert "| code | 1 | 5 |" in readme and "## GPU memory" in readme
    compare_golden(repo, w["root"], "trtllm_draft_target")


@pytest.mark.parametrize("window,served", [(4096, "4096"), (16384, ""), (None, "")])
def test_a_mistral_sliding_window_reaches_the_engines_config(w, window, served):
    """Mistral-7B-v0.1's window is a runtime setting in TensorRT-LLM (upstream.trtllm): the target's
    tensorrt_llm model attends over it; a window wider than the engine's max_seq_len (8200 here)
    is left unset, and the draft without one stays unset."""
    root = w["root"] / f"build_swa{window}"
    mistral = {**LLAMA, "architecture": "MistralForCausalLM", **({"sliding_window": window} if window else {})}
    (root / "engines").mkdir(parents=True)
    fake_engine(root / "engines" / "target", mistral, spec_mode="draft_tokens_external", max_draft_len=8)
    fake_engine(root / "engines" / "draft", DRAFT)
    (root / "engine_manifest.json").write_text(json.dumps(
        {"plan": "build_plan.json", "engines": {n: {"engine_dir": f"engines/{n}"} for n in ("target", "draft")}}))
    (root / "build_plan.json").write_text(json.dumps({"builds": [{"name": n, "checkpoint_dir": str(w["tok"])}
                                                                  for n in ("target", "draft")]}))
    result = make_repository(RepoRequest(out=w["root"] / f"trt_swa{window}", tuning=w["dt_tuning"], flavor="trtllm",
                                         engines=root))
    repo = result.path
    assert check_repository(repo) == []
    # TensorRT-LLM's converter drops the window: a Mistral engine without one is served in full, and said so
    unknown = [m for m in result.warnings if "MistralForCausalLM config without 'sliding_window'" in m]
    assert len(unknown) == (window is None)
    assert params(parse_file(repo / "tensorrt_llm" / "config.pbtxt"))["max_attention_window_size"] == served
    assert params(parse_file(repo / "tensorrt_llm_draft" / "config.pbtxt"))["max_attention_window_size"] == ""


def test_trtllm_eagle_repository(w):
    repo = make(w, "trt_eagle", tuning=w["eagle_tuning"], flavor="trtllm", engines=w["eagle_build"],
                default_workload="chat")
    assert check_repository(repo) == []
    models = sorted(p.name for p in repo.iterdir() if p.is_dir())
    assert models == ["generate", "postprocessing", "preprocessing", "tensorrt_llm_c1_p0", "tensorrt_llm_c1_p1"]
    trees = {}
    for name in ("tensorrt_llm_c1_p0", "tensorrt_llm_c1_p1"):
        p = params(parse_file(repo / name / "config.pbtxt"))
        assert p["decoding_mode"] == "eagle" and p["eagle_choices"].startswith("{0}, ")
        trees[name] = parse_braces(p["eagle_choices"])
        assert p["gpu_device_ids"] == "0"  # two TensorRT-LLM models: orchestrator mode names the GPU
    assert trees == {"tensorrt_llm_c1_p0": TREE_A, "tensorrt_llm_c1_p1": TREE_B}
    routing = json.loads(params(parse_file(repo / "generate" / "config.pbtxt"))["routing"])
    assert {k: v["model"] for k, v in routing["workloads"].items()} == {
        "chat": "tensorrt_llm_c1_p0", "code": "tensorrt_llm_c1_p1", "math": "tensorrt_llm_c1_p0"}
    readme = (repo / "README.md").read_text()
    assert "Each extra EAGLE profile is a whole engine instance: it costs" in readme
    assert "| chat | `tensorrt_llm_c1_p0` | 8 |" in readme
    compare_golden(repo, w["root"], "trtllm_eagle")
    # band 4: the same trees, other model names
    repo4 = make(w, "trt_eagle4", tuning=w["eagle_tuning"], flavor="trtllm", engines=w["eagle_build"], eagle_band=4)
    assert (repo4 / "tensorrt_llm_c4_p1").is_dir() and check_repository(repo4) == []


def test_single_eagle_profile_runs_in_leader_mode(w):
    tuning = tuning_file(w["root"] / "t1" / "tuning.json", "eagle", {"chat": TREE_A, "code": TREE_A})
    repo = make(w, "trt_eagle_one", tuning=tuning, flavor="trtllm", engines=w["eagle_build"])
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert not manifest["launch"]["orchestrator"] and manifest["launch"]["world_size"] == 1
    assert params(parse_file(repo / "tensorrt_llm_c1_p0" / "config.pbtxt"))["gpu_device_ids"] == ""
    assert "leader mode" in (repo / "README.md").read_text()


def test_a_tuning_priced_for_another_kind_of_server_is_warned_about(w):
    """tuning_file tunes as for TensorRT-LLM (bands as batched forwards); the cpu flavor steps each
    request alone, so its repository says to tune again, unless the tuning says it priced batch 1."""
    pair = w["root"] / "ckpt_pair_b"
    fake_ckpt(pair / "target", LLAMA)
    fake_ckpt(pair / "draft", DRAFT)
    warned = lambda repo: [x for x in json.loads((repo / "trtspec-repo.json").read_text())["warnings"]  # noqa: E731
                           if "in_flight_batching" in x]
    repo = make(w, "cpu_b", tuning=w["dt_tuning"], flavor="cpu", ckpt=pair, tokenizer=w["tok"])
    assert warned(repo) == ["tuning.json priced its concurrency bands as one batched forward (tune.in_flight_batching "
                            "true), but the cpu flavor steps each request alone: tune again with in_flight_batching "
                            "false"]
    data = json.loads(w["dt_tuning"].read_text())
    data["cost"]["in_flight_batching"] = False
    alone = w["root"] / "t_alone" / "tuning.json"
    alone.parent.mkdir()
    alone.write_text(json.dumps(data))
    assert warned(make(w, "cpu_a", tuning=alone, flavor="cpu", ckpt=pair, tokenizer=w["tok"])) == []


def test_bands_above_the_repositorys_concurrency_are_warned_about(w):
    """generate runs at most max_batch_size requests at once (the rest queue in Triton), so it never
    sees the load that would pick a larger band."""
    pair = w["root"] / "ckpt_pair_c"
    fake_ckpt(pair / "target", LLAMA)
    fake_ckpt(pair / "draft", DRAFT)
    capped = lambda repo: [x for x in json.loads((repo / "trtspec-repo.json").read_text())["warnings"]  # noqa: E731
                           if "never served" in x]
    assert capped(make(w, "cpu_c4", tuning=w["dt_tuning"], flavor="cpu", ckpt=pair, tokenizer=w["tok"],
                       max_batch_size=4)) == []  # bands (1, 4)
    assert capped(make(w, "cpu_c2", tuning=w["dt_tuning"], flavor="cpu", ckpt=pair, tokenizer=w["tok"],
                       max_batch_size=2)) == [
        "tuned concurrency bands [4] exceed the repository's max_batch_size 2: generate runs at most 2 requests "
        "at once, so they are never served (triton.max_batch_size)"]


def test_cpu_flavor_configs(w):
    pair = w["root"] / "ckpt_pair"
    fake_ckpt(pair / "target", LLAMA)
    fake_ckpt(pair / "draft", DRAFT)
    repo = make(w, "cpu_dt", tuning=w["dt_tuning"], flavor="cpu", ckpt=pair, tokenizer=w["tok"])
    assert check_repository(repo) == []
    cfg = parse_file(repo / "tensorrt_llm" / "config.pbtxt")
    upstream = {t.name: t for t in TENSORRT_LLM_INPUTS}
    assert cfg.backend == "python" and {t.name for t in cfg.input} <= set(upstream)
    assert params(cfg)["checkpoint_dir"] == str(pair / "target")
    p = params(parse_file(repo / "spec_decode" / "config.pbtxt"))
    assert p["engine"] == "trtspec.runtime" and p["draft_checkpoint"] == str(pair / "draft")
    assert (repo / "spec_decode" / "1" / "model.py").is_file()
    assert all((repo / "spec_decode" / "1" / f).is_file() for f in HELPERS)
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert manifest["flavor"] == "cpu" and manifest["memory"] is None
    assert "trtspec serve" in (repo / "README.md").read_text()


# ---- validation catches what it should ------------------------------------------------------------

def _copy(w, src: str, name: str) -> Path:
    dst = w["root"] / name
    shutil.copytree(w["root"] / src, dst)
    return dst


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, count))


@pytest.fixture(scope="module")
def trt_dt(w):
    return make(w, "trt_dt_base", tuning=w["dt_tuning"], flavor="trtllm", engines=w["dt_build"])


def test_validation_finds_template_drift(w, trt_dt):
    repo = _copy(w, "trt_dt_base", "bad_template")
    cfg = repo / "tensorrt_llm" / "config.pbtxt"
    _edit(cfg, 'name: "min_tokens"', 'name: "min_length"')
    _edit(cfg, 'key: "eagle_choices"\n  value {\n    string_value: ""', 'key: "eagle_choices"\n  value {\n'
          '    string_value: "[[0], [0, 0]]"')
    _edit(cfg, 'string_value: "inflight_fused_batching"', 'string_value: "${batching_strategy}"')
    probs = "\n".join(check_repository(repo))
    assert "unfilled placeholder ${batching_strategy}" in probs
    assert "input 'min_tokens' of the pinned tensorrt_llm template is missing" in probs
    assert "input 'min_length' is not in the pinned tensorrt_llm template" in probs
    assert "parameter eagle_choices = '[[0], [0, 0]]': expected the brace form" in probs
    assert "parameter gpt_model_type" in probs


def test_validation_finds_wiring_decoupling_and_name_problems(w, trt_dt):
    repo = _copy(w, "trt_dt_base", "bad_wiring")
    spec = repo / "spec_decode" / "config.pbtxt"
    _edit(spec, 'name: "num_draft_tokens"\n  data_type: TYPE_INT32', 'name: "num_draft_tokens"\n  data_type: TYPE_INT64')
    _edit(spec, "decoupled: true", "decoupled: false")
    _edit(repo / "postprocessing" / "config.pbtxt", 'name: "postprocessing"', 'name: "detokenizer"')
    probs = "\n".join(check_repository(repo))
    assert ("call generate -> spec_decode: input 'num_draft_tokens' is TYPE_INT64 [1] but receives "
            "const:TYPE_INT32:1 (TYPE_INT32 [1])") in probs
    assert "call generate -> spec_decode: called with decoupled=True but spec_decode has decoupled: false" in probs
    assert "spec_decode/config.pbtxt: model_transaction_policy.decoupled must be true" in probs
    assert "name 'detokenizer' differs from its directory 'postprocessing'" in probs


def test_validation_finds_limits_and_paths(w, trt_dt):
    repo = _copy(w, "trt_dt_base", "bad_limits")
    gen = repo / "generate" / "config.pbtxt"
    _edit(gen, '\\"concurrency\\":1,\\"num_draft_tokens\\":5', '\\"concurrency\\":1,\\"num_draft_tokens\\":9')
    shutil.rmtree(w["root"] / "tokenizer_copy", ignore_errors=True)
    _edit(repo / "preprocessing" / "config.pbtxt", str(w["tok"]), str(w["root"] / "tokenizer_gone"))
    _edit(repo / "tensorrt_llm_draft" / "config.pbtxt", 'key: "enable_kv_cache_reuse"\n  value {\n    string_value: '
          '"true"', 'key: "enable_kv_cache_reuse"\n  value {\n    string_value: "false"')
    probs = "\n".join(check_repository(repo))
    assert "tensorrt_llm_draft/config.pbtxt: enable_kv_cache_reuse must be true for draft-target" in probs
    assert "routing: workload 'code' num_draft_tokens 9 > spec_decode max_draft_len 8" in probs
    assert "routing: workload 'code' num_draft_tokens 9 > the target engine's max_draft_len 8" in probs
    assert "parameter tokenizer_dir = " in probs and "tokenizer_gone': directory not found" in probs


def test_validation_of_eagle_trees(w):
    repo = make(w, "eagle_base", tuning=w["eagle_tuning"], flavor="trtllm", engines=w["eagle_build"])
    bad = _copy(w, "eagle_base", "bad_tree")
    _edit(bad / "tensorrt_llm_c1_p1" / "config.pbtxt", '"{0}, {0, 0}, {0, 0, 0}, {0, 0, 0, 0}"', '"{0}, {0, 0}"')
    probs = "\n".join(check_repository(bad))
    assert "tensorrt_llm_c1_p1/config.pbtxt: eagle_choices: depth 2 differs from num_eagle_layers 4" in probs
    assert check_repository(repo) == []


# ---- bad inputs -----------------------------------------------------------------------------------

def test_missing_engine_directory(w):
    with pytest.raises(TrtspecError, match=r"^engines: .*/nowhere: directory not found"):
        make(w, "x1", tuning=w["dt_tuning"], flavor="trtllm", engines=w["root"] / "nowhere")
    with pytest.raises(TrtspecError, match=r"^draft_engines: .*/gone: directory not found"):
        make(w, "x1", tuning=w["dt_tuning"], flavor="trtllm", engines=w["dt_build"] / "engines" / "target",
             draft_engines=w["root"] / "gone")
    empty = w["root"] / "empty_engine"
    empty.mkdir()
    with pytest.raises(TrtspecError, match="has no config.json .expected a TensorRT-LLM engine directory"):
        make(w, "x1", tuning=w["dt_tuning"], flavor="trtllm", engines=empty)
    assert not (w["root"] / "x1").exists()


def test_tuning_naming_an_unknown_workload(w):
    with pytest.raises(TrtspecError, match=r"^triton\.default_workload: 'poetry' is not a workload of the tuning "
                                           r"\(chat, code, math\)"):
        make(w, "x2", tuning=w["dt_tuning"], flavor="trtllm", engines=w["dt_build"], default_workload="poetry")
    data = json.loads(w["eagle_tuning"].read_text())
    data["profiles"][0]["workloads"].append("poetry")
    bad = w["root"] / "bad_tuning.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(TrtspecError, match="profile 'c1-p0' names workload 'poetry', which is not one of the tuned "
                                           "workloads"):
        make(w, "x2", tuning=bad, flavor="trtllm", engines=w["eagle_build"])
    data = json.loads(w["dt_tuning"].read_text())
    data["workloads"]["bad name!"] = data["workloads"]["chat"]
    bad.write_text(json.dumps(data))
    with pytest.raises(TrtspecError, match="workload name 'bad name!' is not a plain name"):
        make(w, "x2", tuning=bad, flavor="trtllm", engines=w["dt_build"])


def test_draft_length_above_the_engine_maximum(w):
    small = build_dir(w["root"] / "build_small", "draft-target", w["tok"], max_draft_len=4)
    with pytest.raises(TrtspecError, match=r"workload 'code' at concurrency 1 is tuned to num_draft_tokens 5, above "
                                           r"the target engine's max_draft_len 4 .*rebuild the pair with "
                                           r"build.max_draft_len 5 or re-tune"):
        make(w, "x3", tuning=w["dt_tuning"], flavor="trtllm", engines=small)
    eagle = w["root"] / "eagle_small"
    fake_engine(eagle, {**EAGLE, "max_draft_len": 6}, spec_mode="eagle", max_draft_len=6)
    with pytest.raises(TrtspecError, match="profile 'c1-p0' tree does not fit .*8 nodes exceed the engine's "
                                           "max_draft_len 6"):
        make(w, "x3", tuning=w["eagle_tuning"], flavor="trtllm", engines=eagle, tokenizer=w["tok"])


def test_other_bad_inputs(w):
    with pytest.raises(TrtspecError, match="the tuning is for EAGLE"):
        make(w, "x4", tuning=w["eagle_tuning"], flavor="trtllm", engines=w["dt_build"])
    with pytest.raises(TrtspecError, match="draft_tokens_external"):
        make(w, "x4", tuning=w["dt_tuning"], flavor="trtllm", engines=w["eagle_build"] / "engines" / "eagle",
             draft_engines=w["dt_build"] / "engines" / "draft")
    with pytest.raises(TrtspecError, match="^engines: needed for the trtllm flavor"):
        make(w, "x4", tuning=w["dt_tuning"], flavor="trtllm")
    with pytest.raises(TrtspecError, match=r"^engines: the cpu flavor serves checkpoints; give `ckpt` \(and `draft_ckpt`\)"):
        make(w, "x4", tuning=w["dt_tuning"], flavor="cpu", engines=w["dt_build"])
    with pytest.raises(TrtspecError, match=r"^triton.flavor: llmapi's PyTorch backend drafts EAGLE-3 chains, draft "
                                           r"models and n-grams, not eagle \(EAGLE-1 trees\)"):  # the PyTorch backend's "Eagle" is EAGLE-3
        make(w, "x4", tuning=w["eagle_tuning"], flavor="llmapi", ckpt=w["root"], draft_ckpt=w["root"])
    with pytest.raises(TrtspecError, match="^triton.flavor: an eagle3 tuning is served by the llmapi or cpu flavor"):
        make(w, "x4", tuning=w["e3_tuning"], flavor="trtllm", engines=w["eagle_build"])
    with pytest.raises(TrtspecError, match="^triton.flavor: 'tensorrt' is not one of trtllm, llmapi, cpu"):
        make(w, "x4", tuning=w["dt_tuning"], flavor="tensorrt", engines=w["dt_build"])
    with pytest.raises(TrtspecError, match=r"^triton\.eagle_band: 2 is not a tuned concurrency band \(1, 4\)$"):
        make(w, "x4", tuning=w["eagle_tuning"], flavor="trtllm", engines=w["eagle_build"], eagle_band=2)
    with pytest.raises(TrtspecError, match="tuning.*not found"):
        make(w, "x4", tuning=w["root"] / "none.json", flavor="trtllm", engines=w["dt_build"])
    busy = w["root"] / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(TrtspecError, match="output directory is not empty"):
        make(w, "busy", tuning=w["dt_tuning"], flavor="trtllm", engines=w["dt_build"])
    assert (busy / "keep.txt").read_text() == "mine"
    assert not (w["root"] / "x4").exists()


# ---- the command ----------------------------------------------------------------------------------

def test_command(w):
    app = typer.Typer()
    app.command()(triton_command)
    out = w["root"] / "cli_repo"
    res = CliRunner().invoke(app, ["--tuning", str(w["dt_tuning"]), "--engines", str(w["dt_build"]),
                                   "--flavor", "trtllm", "--out", str(out), "--max-batch-size", "16",
                                   "--instances", "2"])
    assert res.exit_code == 0, res.output
    assert "validated" in res.output and check_repository(out) == []
    assert parse_file(out / "preprocessing" / "config.pbtxt").instance_group[0].count == 2
    assert parse_file(out / "tensorrt_llm" / "config.pbtxt").max_batch_size == 16
    res = CliRunner().invoke(app, ["--check", str(out)])
    assert res.exit_code == 0 and "valid" in res.output
    res = CliRunner().invoke(app, ["--tuning", str(w["dt_tuning"]), "--out", str(w["root"] / "cli2")])
    assert isinstance(res.exception, TrtspecError) and "--flavor: needed" in str(res.exception)
    _edit(out / "generate" / "config.pbtxt", "decoupled: true", "decoupled: false")
    res = CliRunner().invoke(app, ["--check", str(out)])
    assert isinstance(res.exception, TrtspecError) and "problem(s)" in str(res.exception)


def test_command_says_the_flag_of_a_routing_error(w):
    """routing names triton.default_workload / triton.eagle_band; the command shows the flag the user typed."""
    app = typer.Typer()
    app.command()(triton_command)
    for args, want in (
            (["--tuning", w["dt_tuning"], "--engines", w["dt_build"], "--default-workload", "poetry"],
             "--default-workload: 'poetry' is not a workload of the tuning (chat, code, math)"),
            (["--tuning", w["eagle_tuning"], "--engines", w["eagle_build"], "--eagle-band", "2"],
             "--eagle-band: 2 is not a tuned concurrency band (1, 4)")):
        res = CliRunner().invoke(app, [*map(str, args), "--flavor", "trtllm", "--out", str(w["root"] / "cli3")])
        assert isinstance(res.exception, TrtspecError) and str(res.exception) == want, res.output
    assert not (w["root"] / "cli3").exists()


# ---- serve for the GPU flavors: the container command ---------------------------------------------

def test_serve_prints_the_container_command(w, trt_dt):
    from trtspec.triton_repo.command import serve_command

    app = typer.Typer()
    app.command()(serve_command)
    res = CliRunner().invoke(app, [str(trt_dt), "--grpc-port", "9001"])
    assert res.exit_code == 0, res.output
    cmd = res.output.strip()
    assert cmd.startswith("""docker run --rm --gpus '"device=0"'""") and "-e TRTLLM_ORCHESTRATOR=1" in cmd
    assert f"-v {trt_dt}:{trt_dt}" in cmd and f"-v {w['dt_build'] / 'engines' / 'target'}:" in cmd
    assert "mpirun --allow-run-as-root -n 1 /opt/tritonserver/bin/tritonserver" in cmd and " : " not in cmd
    assert f"--model-repository={trt_dt}" in cmd and "--grpc-address=127.0.0.1 --grpc-port=9001" in cmd
    # orchestrator mode as launch_triton_server.py --multi-model starts it: spawned workers, no server pools
    assert "-e TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=1" in cmd
    assert ("--pinned-memory-pool-byte-size=0 --enable-peer-access=false --cuda-memory-pool-byte-size=0:0"
            in cmd)
    res = CliRunner().invoke(app, [str(trt_dt), "--exec"], env={"PATH": "/nonexistent"})
    assert isinstance(res.exception, TrtspecError) and "'docker' is not on PATH" in str(res.exception)


def test_tensor_parallel_engine_runs_one_server_per_rank(w):
    from trtspec.triton_repo.container import container_command

    tp2 = {**EAGLE, "mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1}}
    engine = fake_engine(w["root"] / "eagle_tp2", tp2, spec_mode="eagle", max_draft_len=63)
    tuning = tuning_file(w["root"] / "t_tp2" / "tuning.json", "eagle", {"chat": TREE_A, "code": TREE_A})
    repo = make(w, "trt_tp2", tuning=tuning, flavor="trtllm", engines=engine, tokenizer=w["tok"])
    assert check_repository(repo) == []
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert manifest["launch"]["world_size"] == 2 and not manifest["launch"]["orchestrator"]
    cmd = " ".join(container_command(repo, manifest, {}))
    rank0, rank1 = cmd.split("mpirun --allow-run-as-root ", 1)[1].split(" : ")
    assert "shm-region-prefix-name=prefix0_" in rank0 and "--load-model" not in rank0
    assert rank1.endswith("shm-region-prefix-name=prefix1_ --model-control-mode=explicit "
                          "--load-model=tensorrt_llm_c1_p0")
    assert "MPI world size: 2 (leader mode)" in (repo / "README.md").read_text()


# ---- llmapi flavor ---------------------------------------------------------------------------------

def _hf(path: Path, config: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_llmapi_repository(w):
    import yaml

    from trtspec.triton_repo.command import serve_command

    target = _hf(w["root"] / "hf_target", {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"})
    head = _hf(w["root"] / "hf_eagle3", {"architectures": ["LlamaForCausalLMEagle3"], "torch_dtype": "bfloat16",
                                         "eagle_config": {"use_aux_hidden_state": True}})
    repo = make(w, "llmapi", tuning=w["e3_tuning"], flavor="llmapi", ckpt=target, draft_ckpt=head,
                default_workload="code")
    assert check_repository(repo) == []
    models = sorted(p.name for p in repo.iterdir() if p.is_dir())
    assert models == ["generate", "tensorrt_llm_k0", "tensorrt_llm_k3", "tensorrt_llm_k5"]  # chat 3, code 5, math 0
    y = yaml.safe_load((repo / "tensorrt_llm_k3" / "1" / "model.yaml").read_text())
    assert y["model"] == str(target) and y["backend"] == "pytorch"
    assert y["speculative_config"] == {"decoding_type": "Eagle", "max_draft_len": 3,
                                       "speculative_model_dir": str(head)}
    assert y["triton_config"] == {"max_batch_size": 0, "decoupled": True}
    assert "speculative_config" not in yaml.safe_load((repo / "tensorrt_llm_k0" / "1" / "model.yaml").read_text())
    routing = json.loads(params(parse_file(repo / "generate" / "config.pbtxt"))["routing"])
    assert routing["workloads"]["chat"]["model"] == "tensorrt_llm_k3" and routing["default"]["model"] == \
        "tensorrt_llm_k5"
    readme = (repo / "README.md").read_text()
    assert "model.py" in readme and "acceptance_length` is 0" in readme
    # consistency: a model.yaml edited to another draft length is caught
    text = (repo / "tensorrt_llm_k3" / "1" / "model.yaml").read_text()
    bad = _copy(w, "llmapi", "llmapi_bad")
    (bad / "tensorrt_llm_k3" / "1" / "model.yaml").write_text(text.replace("max_draft_len: 3", "max_draft_len: 4"))
    assert any("speculative_config.max_draft_len 4 but the routing sends num_draft_tokens 3" in p
               for p in check_repository(bad))
    # serve: one tritonserver under mpirun -n 1 (test_container.py); --exec wants TensorRT-LLM's model.py first
    app = typer.Typer()
    app.command()(serve_command)
    res = CliRunner().invoke(app, [str(repo)])
    assert res.exit_code == 0 and "mpirun --allow-run-as-root -n 1 " in res.output and "--model-repository=" in res.output
    res = CliRunner().invoke(app, [str(repo), "--exec"])
    assert isinstance(res.exception, TrtspecError) and "tensorrt_llm_k0/1/model.py: missing" in str(res.exception)
    converted = fake_ckpt(w["root"] / "converted", LLAMA)  # a trtspec checkpoint names its HF source
    (converted / "trtspec.json").write_text(json.dumps({"sources": [{"role": "hf", "path": str(target)}]}))
    repo2 = make(w, "llmapi_from_ckpt", tuning=w["e3_tuning"], flavor="llmapi", ckpt=converted, draft_ckpt=head)
    assert yaml.safe_load((repo2 / "tensorrt_llm_k3" / "1" / "model.yaml").read_text())["model"] == str(target)
    pair = w["root"] / "converted_pair"  # a trtspec pair directory names both HF sources
    pair.mkdir()
    (pair / "trtspec.json").write_text(json.dumps({"sources": [{"role": "target", "path": str(target)},
                                                               {"role": "draft", "path": str(head)}]}))
    repo3 = make(w, "llmapi_from_pair", tuning=w["e3_tuning"], flavor="llmapi", ckpt=pair)
    spec = yaml.safe_load((repo3 / "tensorrt_llm_k5" / "1" / "model.yaml").read_text())["speculative_config"]
    assert spec["speculative_model_dir"] == str(head) and spec["max_draft_len"] == 5
    with pytest.raises(TrtspecError, match="not a Hugging Face model directory"):
        make(w, "llmapi2", tuning=w["dt_tuning"], flavor="llmapi", ckpt=w["dt_build"] / "engines" / "target",
             draft_ckpt=head)


def test_eagle_band_picks_the_llmapi_band_and_is_refused_where_every_band_is_served(w):
    """The llmapi flavor serves one band (an LLM instance per setting): triton.eagle_band picks it,
    as for EAGLE engines. Draft-target on trtllm routes every band by load, so the option would be
    ignored there: refused by field."""
    target = _hf(w["root"] / "hf_band_t", {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"})
    head = _hf(w["root"] / "hf_band_h", {"architectures": ["LlamaForCausalLMEagle3"], "torch_dtype": "bfloat16",
                                         "eagle_config": {"use_aux_hidden_state": True}})
    tuning = tuning_file(w["root"] / "tband" / "tuning.json", "eagle3", {"chat": [2, 6], "code": [5, 0]})
    for band, expected in ((None, {"chat": 2, "code": 5}), (4, {"chat": 6, "code": 0})):
        repo = make(w, f"llmapi_band{band}", tuning=tuning, flavor="llmapi", ckpt=target, draft_ckpt=head,
                    eagle_band=band)
        routing = json.loads(params(parse_file(repo / "generate" / "config.pbtxt"))["routing"])
        assert routing["band"] == (band or 1)
        assert {n: e["num_draft_tokens"] for n, e in routing["workloads"].items()} == expected
    with pytest.raises(TrtspecError, match=r"^triton\.eagle_band: 2 is not a tuned concurrency band \(1, 4\)$"):
        make(w, "llmapi_band2", tuning=tuning, flavor="llmapi", ckpt=target, draft_ckpt=head, eagle_band=2)
    with pytest.raises(TrtspecError, match=r"^triton\.eagle_band: a draft-target repository on the trtllm flavor "
                                           "serves every tuned band"):
        make(w, "trt_dt_band", tuning=w["dt_tuning"], flavor="trtllm", engines=w["dt_build"], eagle_band=4)


def test_llmapi_mistral_attends_over_its_sliding_window(w):
    """KvCacheConfig's default window is the whole max_seq_len (upstream.trtllm): a Mistral target
    with a window gets it in every model.yaml, beside the KV share of several instances."""
    import yaml

    from tiny_models import hf_config

    target = w["root"] / "hf_mistral"
    target.mkdir()
    hf_config("mistral", sliding_window=64, torch_dtype="bfloat16").to_json_file(target / "config.json")
    repo = make(w, "llmapi_swa", tuning=w["dt_tuning"], flavor="llmapi", ckpt=target,
                draft_ckpt=_hf(w["root"] / "hf_mistral_draft", {"architectures": ["LlamaForCausalLM"],
                                                               "torch_dtype": "bfloat16"}))
    assert check_repository(repo) == []
    for model in ("tensorrt_llm_k0", "tensorrt_llm_k3", "tensorrt_llm_k5"):
        kv = yaml.safe_load((repo / model / "1" / "model.yaml").read_text())["kv_cache_config"]
        assert kv["max_attention_window"] == [64] and 0 < kv["free_gpu_memory_fraction"] <= 0.3


def test_llmapi_needs_model_py_and_the_helpers_it_imports(w):
    """TensorRT-LLM's llmapi model.py imports helpers.py from its own directory: the README names
    both files, and --exec refuses a model directory holding model.py alone (it would fail to load
    in the container with "No module named 'helpers'")."""
    from trtspec.triton_repo.command import serve_command

    target = _hf(w["root"] / "hf_target_files", {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"})
    repo = make(w, "llmapi_files", tuning=w["dt_tuning"], flavor="llmapi", ckpt=target, draft_ckpt=target)
    assert "`model.py` and `helpers.py`" in (repo / "README.md").read_text()
    for m in json.loads((repo / "trtspec-repo.json").read_text())["launch"]["trtllm_models"]:
        (repo / m / "1" / "model.py").write_text("from helpers import get_streaming_from_request\n")
    app = typer.Typer()
    app.command()(serve_command)
    res = CliRunner().invoke(app, [str(repo), "--exec"])
    assert isinstance(res.exception, TrtspecError) and "1/helpers.py: missing" in str(res.exception)


def test_rendering_round_trips():
    """What we write parses back to exactly the message we built (the explicit "" / 0 values we add
    for readability are the protobuf defaults)."""
    from trtspec.triton_repo import render as r
    from trtspec.triton_repo.configs import parse_text, render

    params_ = r.tensorrtllm_parameters(engine_dir="/e", tokenizer_dir="/t", kv_tokens=None, kv_reuse=True,
                                       decoding_mode="", eagle_choices=None, gpu_device_ids="")
    for m in (r.tensorrtllm_model("tensorrt_llm", 8, "bfloat16", params_, "c"),
              r.spec_decode_model(8, 8, 4, "bls"), r.preprocessing_model(8, "/t", 2)):
        text = render(m.config, m.comment)
        assert parse_text(text, "x") == m.config
        assert 'string_value: ""' in text or m.kind != "tensorrtllm"


def test_command_module_imports_stay_light():
    import subprocess
    import sys

    code = ("import sys, trtspec.triton_repo.command; "
            "print(sorted(m for m in ('torch', 'transformers', 'grpc', 'google.protobuf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
