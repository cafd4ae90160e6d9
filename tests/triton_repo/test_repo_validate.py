"""Repository validation (what check_repository catches), inputs refused before anything is written,
the `triton` command (--check included) and `serve`'s container command for the GPU flavors.

Runs on the fake trtllm-build's engine directories, in seconds without a GPU; the workspace `w`
and the `make` / `_copy` helpers are test_repo_make.py's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from triton_fixtures import EAGLE, TREE_A, build_dir, fake_engine, tuning_file
from triton_repo.test_repo_make import _copy, make, w  # noqa: F401  (w: the module's workspace fixture)
from trtspec.errors import TrtspecError
from trtspec.triton_repo.command import triton_command
from trtspec.triton_repo.configs import parse_file
from trtspec.triton_repo.validate import check_repository


# ---- validation catches what it should ------------------------------------------------------------

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


def test_command_module_imports_stay_light():
    import subprocess
    import sys

    code = ("import sys, trtspec.triton_repo.command; "
            "print(sorted(m for m in ('torch', 'transformers', 'grpc', 'google.protobuf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
