"""Repository generation for each flavor (trtllm, cpu, llmapi): models, configs, manifest, README
and golden files; and the rendering of a config.

The engines are the fake trtllm-build's engine directories (config.json + rank files, see
tests/fake_trtllm_build.py), so everything here runs in seconds without a GPU. Golden files:
tests/golden/triton/<case>/<model>/config.pbtxt with the temporary root replaced by @ROOT@;
regenerate with TRTSPEC_UPDATE_GOLDEN=1 after an intended change and review the diff.

The workspace fixture `w` and the `make` / `_copy` helpers are shared with test_repo_validate.py
(validation, bad inputs and the commands).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from triton_fixtures import (DRAFT, LLAMA, TREE_A, TREE_B, build_dir, env_flag, fake_ckpt, fake_engine,
                             tiny_tokenizer_dir, tuning_file)
from trtspec.errors import TrtspecError
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


def _copy(w, src: str, name: str) -> Path:
    dst = w["root"] / name
    shutil.copytree(w["root"] / src, dst)
    return dst


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
