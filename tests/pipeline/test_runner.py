"""`trtspec run RECIPE`: recipe validation, run/skip decisions from input hashes, --force / --until /
--dry-run, failures that name the stage, and every example recipe.

The pipeline tests run real stages on tiny random models (a near-bigram 2-layer Llama target, its
first layer derived as the draft, a word-level tokenizer, a JSONL workload of "tN" prompts): derive
-> convert -> build (the fake trtllm-build on PATH, so the runner's engine path is exercised;
orchestration only) -> profile -> tune. What is asserted is what a user sees: which stages ran or
were skipped, the manifest, the outputs, and one-line errors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from cli_helpers import run_cli
from fake_trtllm_build import install_fake
from tiny_models import near_bigram_llama
from trtspec.errors import TrtspecError
from trtspec.pipeline.runner import ORDER, run_recipe
from trtspec.recipe import load_recipe, parse_recipe
from trtspec.triton_repo.ports import port_in_use

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PROMPTS = ["t5 t17 t300 t42 t9", "t9 t8 t7 t100", "t100 t200 t301", "t11 t12 t13 t14 t15"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An HF target with the tiny tokenizer and a prompt file; returns the directory."""
    d = tmp_path_factory.mktemp("recipe")
    near_bigram_llama(d / "hf")
    (d / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return d


def write_recipe(d: Path, **over) -> Path:
    """A recipe next to the tiny model, with relative paths (resolved against the recipe file)."""
    recipe = {"name": "tiny", "target": "hf", "draft": {"derive": {"layers": 1}}, "dtype": "float32",
              "build": {"gpu": "h100", "max_batch_size": 4, "max_seq_len": 128, "engines": True},
              "workloads": {"logs": "prompts.jsonl"},
              "profile": {"samples": 2, "max_new_tokens": 12, "max_k": 3},
              "tune": {"cost": "h100", "concurrency_bands": [1, 4]}}
    for k, v in over.items():
        if v is None:
            recipe.pop(k, None)
        else:
            recipe[k] = v
    path = d / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def statuses(report) -> dict[str, str]:
    return {r.stage: r.status for r in report.rows}


def one_line_error(capsys, *args) -> str:
    code, _, err = run_cli(capsys, *args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ---- validation ----------------------------------------------------------------------------------------

def test_unknown_key_is_named_with_the_allowed_keys(tmp_path, capsys):
    path = write_recipe(tmp_path, tune={"cost": "h100", "bands": [1]})
    err = one_line_error(capsys, "run", path, "--dry-run")
    assert "unknown key 'tune.bands'" in err and "concurrency_bands" in err and str(path) in err


def test_missing_target_and_bad_stage_names(tmp_path, capsys):
    err = one_line_error(capsys, "run", write_recipe(tmp_path, target=None), "--dry-run")
    assert "target: required" in err
    path = write_recipe(tmp_path)
    err = one_line_error(capsys, "run", path, "--until", "compile", "--dry-run")
    assert "--until: unknown stage 'compile'" in err and ", ".join(ORDER) in err
    assert "--force: unknown stage" in one_line_error(capsys, "run", path, "--force", "tuning")


@pytest.mark.parametrize("data, expected", [
    ({"draft": {"hf": "a", "eagle": "b"}}, "draft: give exactly one of hf, eagle, eagle3, derive"),
    ({"draft": {"eagle": "head"}, "mode": "draft-target"}, "does not match draft.eagle"),
    ({"quantization": {"format": "fp4"}}, "quantization.format"),
    ({"perf": {"concurrency": [1]}}, "perf needs a triton section"),
    ({"tune": {"cost": "h100", "concurrency_bands": [4, 4]}}, "tune.concurrency_bands: expected distinct"),
    ({"workloads": {}}, "workloads: give at least one"),
])
def test_structural_errors_name_the_field(data, expected):
    base = {"target": "t", "draft": {"hf": "d"}, "workloads": {"chat": "mt-bench"}}
    with pytest.raises(TrtspecError, match=expected) as e:
        parse_recipe({**base, **data}, "r.yaml")
    assert "\n" not in str(e.value) and str(e.value).startswith("r.yaml: ")


def test_relative_paths_resolve_against_the_recipe_file(tmp_path):
    r = load_recipe(write_recipe(tmp_path, tune={"cost": "costs/table.json"}))
    assert r.target == str(tmp_path / "hf") and r.workloads == {"logs": str(tmp_path / "prompts.jsonl")}
    assert r.tune.cost == str(tmp_path / "costs" / "table.json") and r.mode == "draft-target"


def test_missing_inputs_stop_a_real_run_before_any_stage(tmp_path, capsys):
    err = one_line_error(capsys, "run", write_recipe(tmp_path), "--out", tmp_path / "out")
    assert "input not found: target: " in err and not (tmp_path / "out" / "hf-draft").exists()


# ---- example recipes -----------------------------------------------------------------------------------

def test_cpu_demo_example_is_the_packaged_demo_recipe():
    packaged = REPO / "trtspec" / "recipes" / "cpu-demo.yaml"
    assert (EXAMPLES / "cpu-demo.yaml").read_bytes() == packaged.read_bytes()


def test_trtspec_demo_plans_the_packaged_recipe(tmp_path, capsys):
    code, out, err = run_cli(capsys, "demo", "--out", tmp_path / "demo", "--dry-run")
    assert code == 0, err
    assert "trtspec run cpu-demo.yaml" in out and "(dry run)" in out and not (tmp_path / "demo").exists()
    recipe = load_recipe(EXAMPLES / "cpu-demo.yaml")  # what the demo promises, kept true by this test
    assert recipe.uses_default_target and recipe.quantization.format == "fp8"
    assert recipe.draft.train and recipe.mode == "eagle3"  # a small EAGLE-3 head trained on first use (#17)
    assert recipe.tune.cost == "cpu" and recipe.triton.flavor == "cpu" and recipe.perf.baseline
    assert recipe.ngram and recipe.perf.blocks > 1  # two drafters offered; interleaved speedup intervals
    assert set(recipe.workloads.items()) == {("chat", "mt-bench"), ("code", "humaneval"), ("edit", "code-edit")}


@pytest.mark.parametrize("name", ["llama31-8b-eagle-fp8-h100.yaml", "qwen25-draft-target-h100.yaml", "cpu-demo.yaml",
                                  "llama31-8b-eagle3-ngram-fp8-h100.yaml"])
def test_every_example_dry_runs(name, tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", EXAMPLES / name, "--out", tmp_path / "o", "--dry-run")
    assert code == 0, err
    report = run_recipe(EXAMPLES / name, tmp_path / "o", dry_run=True)
    s = statuses(report)
    assert set(ORDER) <= set(s) and not (tmp_path / "o").exists()  # nothing written by a dry run
    recipe = load_recipe(EXAMPLES / name)
    assert s["quantize"] == "run" and s["convert"] == "n/a" and s["build"] == ("run" if recipe.build else "n/a")
    note = {r.stage: r.note for r in report.rows}
    if recipe.triton.flavor == "trtllm":  # no engines here: the H100 commands instead
        assert s["triton"] == s["serve"] == s["perf"] == "n/a"
        assert "build.sh" in note["triton"] and "trtspec serve" in note["serve"] and "trtspec perf" in note["perf"]
        assert s["inputs"] == "missing" and "/models/" in out  # placeholders the user edits
    elif recipe.triton.flavor == "llmapi":  # the repository here, serving in the TensorRT-LLM container
        assert s["triton"] == "run" and s["serve"] == s["perf"] == "n/a"
        assert "trtspec serve" in note["serve"] and "trtspec perf" in note["perf"]
        assert s["inputs"] == "missing" and "/models/" in out
    else:
        assert s["serve"] == s["perf"] == s["report"] == "run" and "inputs" not in s


# ---- the pipeline on tiny models -----------------------------------------------------------------------

@pytest.fixture
def fake_build_on_path(tmp_path, monkeypatch):
    install_fake(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")


def test_pipeline_runs_skips_reruns_downstream_and_forces(tiny, tmp_path, fake_build_on_path):
    prompts = tmp_path / "w.jsonl"  # a workload file of this test only (its content changes below)
    prompts.write_text((tiny / "prompts.jsonl").read_text())
    workloads = {"logs": str(prompts)}
    recipe, out = write_recipe(tiny, workloads=workloads), tmp_path / "out"
    first = run_recipe(recipe, out, until="tune")
    assert statuses(first) == {"derive": "ran", "convert": "ran", "quantize": "n/a", "build": "ran",
                               "profile": "ran", "tune": "ran"}
    assert (out / "build" / "engines" / "target" / "config.json").is_file()  # the runner built (fake) engines
    tuning = json.loads((out / "tuning.json").read_text())
    assert sorted(tuning["concurrency_bands"]) == [1, 4] and set(tuning["workloads"]) == {"logs"}
    manifest = json.loads((out / "run-manifest.json").read_text())
    assert manifest["stages"]["profile"]["status"] == "ran" and len(manifest["stages"]["profile"]["input_hash"]) == 64

    again = run_recipe(recipe, out, until="tune")
    assert set(statuses(again).values()) <= {"skipped", "n/a"}
    listed = [o for r in again.rows if r.output for o in r.output.split(", ")]  # what a skipped stage shows
    assert listed and all((out / o).exists() for o in listed), listed  # is there (not merely declared)
    assert json.loads((out / "run-manifest.json").read_text())["stages"]["tune"] == manifest["stages"]["tune"]

    write_recipe(tiny, workloads=workloads, tune={"cost": "h100", "concurrency_bands": [1, 2, 8]})  # tune only
    plan = statuses(run_recipe(recipe, out, until="tune", dry_run=True))
    assert plan["tune"] == "run" and plan["profile"] == plan["derive"] == "skip"
    changed = statuses(run_recipe(recipe, out, until="tune"))
    assert changed["tune"] == "ran" and {changed[s] for s in ("derive", "convert", "build", "profile")} == {"skipped"}
    assert sorted(json.loads((out / "tuning.json").read_text())["concurrency_bands"]) == [1, 2, 8]

    write_recipe(tiny, workloads=workloads, tune={"cost": "h100", "concurrency_bands": [1, 2, 8]},
                 profile={"samples": 3, "max_new_tokens": 12, "max_k": 3})  # profile and everything after it
    changed = statuses(run_recipe(recipe, out, until="tune"))
    assert changed["profile"] == changed["tune"] == "ran" and changed["convert"] == changed["build"] == "skipped"

    forced = statuses(run_recipe(recipe, out, until="tune", force="build"))
    assert forced["build"] == forced["profile"] == forced["tune"] == "ran" and forced["convert"] == "skipped"

    (out / "profile.json").unlink()  # a deleted output re-runs its stage and those after it
    assert statuses(run_recipe(recipe, out, until="tune"))["profile"] == "ran"

    prompts.write_text(prompts.read_text().replace("t100", "t101"))  # same path, new content
    changed = statuses(run_recipe(recipe, out, until="tune"))
    assert changed["profile"] == changed["tune"] == "ran" and changed["convert"] == "skipped"


def test_a_failing_stage_is_named_and_earlier_outputs_stay(tiny, tmp_path, capsys):
    (tiny / "bad-cost.json").write_text("{not json")
    recipe, out = write_recipe(tiny, build=None), tmp_path / "out"
    run_recipe(recipe, out, until="profile")
    before = (out / "profile.json").read_bytes()
    write_recipe(tiny, build=None, tune={"cost": "bad-cost.json"})
    err = one_line_error(capsys, "run", recipe, "--out", out)
    assert err.startswith("error: stage tune failed: ") and "bad-cost.json" in err
    stages = json.loads((out / "run-manifest.json").read_text())["stages"]
    assert stages["tune"]["status"] == "failed" and stages["profile"]["status"] == "ran"
    assert (out / "profile.json").read_bytes() == before and not (out / "tuning.json").exists()
    write_recipe(tiny, build=None)  # fixed: the failed stage runs, the rest is skipped
    fixed = statuses(run_recipe(recipe, out, until="tune"))
    assert fixed["tune"] == "ran" and fixed["profile"] == "skipped" and fixed["build"] == "n/a"


def test_full_recipe_serves_measures_and_reports(tiny, tmp_path, capsys, monkeypatch):
    """triton (cpu flavor) -> serve (the bundled tritonserver) -> perf with a baseline -> report.html,
    and the summary's speedup table. A perf failure still stops the server; so does success."""
    pytest.importorskip("tritonclient.grpc")
    perf = {"concurrency": [1], "requests": 2, "warmup": 0, "max_tokens": 8, "timeout_s": 60}
    recipe = write_recipe(tiny, build=None, triton={"flavor": "cpu", "start_timeout_s": 120},
                          perf={**perf, "model": "no_such_model"})
    out = tmp_path / "out"
    err = one_line_error(capsys, "run", recipe, "--out", out)
    assert err.startswith("error: stage perf failed: ") and "no_such_model" in err
    s = json.loads((out / "run-manifest.json").read_text())["stages"]
    assert s["serve"]["status"] == "ran" and s["perf"]["status"] == "failed" and (out / "triton-repo").is_dir()
    assert not port_in_use(serve_port(s))  # stopped although perf failed

    write_recipe(tiny, build=None, triton={"flavor": "cpu", "start_timeout_s": 120}, perf=perf)
    monkeypatch.delenv("COLUMNS", raising=False)
    code, stdout, err = run_cli(capsys, "run", recipe, "--out", out)
    assert code == 0, err
    s = json.loads((out / "run-manifest.json").read_text())["stages"]
    assert s["triton"]["status"] == "ran" and {n: s[n]["status"] for n in ("serve", "perf", "report")} == \
        dict.fromkeys(("serve", "perf", "report"), "ran")
    assert "triton " in stdout and "skipped" in stdout  # the repository was reused
    results = json.loads((out / "perf" / "results.json").read_text())
    assert results["completed"] and {r["speculation"] for r in results["runs"]} == {True, False}
    (cmp,) = results["comparisons"]
    assert cmp["workload"] == "logs" and cmp["predicted_speedup"] is not None
    assert (out / "report" / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert "measured (perf) vs predicted (tune)" in stdout and f"report: {out / 'report' / 'report.html'}" in stdout
    assert "tok/s spec" in stdout and "AL pred." in stdout  # a log gets LOG_WIDTH columns, not 80 (ellipses)
    assert not port_in_use(serve_port(s))  # stopped after perf
    again = statuses(run_recipe(recipe, out))
    assert again["serve"] == again["perf"] == again["report"] == "skipped"
    plan = statuses(run_recipe(recipe, out, force="perf", dry_run=True))  # perf forced: the server starts for it
    assert plan["triton"] == "skip" and plan["serve"] == plan["perf"] == plan["report"] == "run"


def serve_port(stages: dict) -> int:
    return int(stages["serve"]["note"].split("gRPC 127.0.0.1:")[1].split()[0])


def test_eagle_recipe_converts_profiles_and_tunes_a_tree(tiny, tmp_path):
    from tiny_models import make_eagle_head

    make_eagle_head(tiny / "hf", tmp_path / "head")
    recipe = write_recipe(tmp_path, target=str(tiny / "hf"), draft={"eagle": "head"}, build=None,
                          workloads={"logs": str(tiny / "prompts.jsonl")},
                          eagle={"max_draft_len": 8, "num_eagle_layers": 2, "max_non_leaves": 2},
                          profile={"samples": 2, "max_new_tokens": 8, "max_k": 2, "tree_top_k": 3})
    s = statuses(run_recipe(recipe, tmp_path / "out", until="tune"))
    assert s == {"derive": "n/a", "convert": "ran", "quantize": "n/a", "build": "n/a", "profile": "ran", "tune": "ran"}
    config = json.loads((tmp_path / "out" / "checkpoint" / "config.json").read_text())
    assert config["architecture"] == "EagleForCausalLM" and config["num_eagle_layers"] == 2
    tuning = json.loads((tmp_path / "out" / "tuning.json").read_text())
    assert tuning["mode"] == "eagle" and tuning["profiles"]


def test_quantize_stage_and_its_section(tiny, tmp_path):
    """FP8 through ModelOpt on the tiny pair; a changed quantization section re-runs quantize, not derive."""
    quant = {"format": "fp8", "calib": {"logs": "prompts.jsonl"}, "samples": 2, "seq_len": 16}
    recipe, out = write_recipe(tiny, dtype="float16", build=None, quantization=quant), tmp_path / "out"
    s = statuses(run_recipe(recipe, out, until="quantize"))
    assert s == {"derive": "ran", "convert": "n/a", "quantize": "ran"}
    for part in ("target", "draft"):
        cfg = json.loads((out / "checkpoint" / part / "config.json").read_text())
        assert cfg["quantization"]["quant_algo"] == "FP8"
    write_recipe(tiny, dtype="float16", build=None, quantization={**quant, "samples": 3})
    s = statuses(run_recipe(recipe, out, until="quantize"))
    assert s["derive"] == "skipped" and s["quantize"] == "ran"
    manifest = json.loads((out / "checkpoint" / "trtspec.json").read_text())
    assert manifest["options"]["format"] == "fp8"


def test_the_run_command_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, trtspec.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_a_sampled_workload_flows_from_the_recipe_to_perf(tiny, tmp_path, capsys):
    """`workloads: {logs: {source, temperature, top_p}}` -> the profile decodes at those settings under
    the cpu route's rule -> tuning.json records them -> perf sends them with every request (both runs)
    and compares the runs by distribution, not token equality."""
    pytest.importorskip("tritonclient.grpc")
    perf = {"concurrency": [1], "requests": 3, "warmup": 0, "max_tokens": 8, "timeout_s": 60}
    recipe = write_recipe(tiny, build=None, triton={"flavor": "cpu", "start_timeout_s": 120}, perf=perf,
                          workloads={"logs": {"source": "prompts.jsonl", "temperature": 0.7, "top_p": 0.9}})
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "run", recipe, "--out", out)
    assert code == 0, err
    profile = json.loads((out / "profile.json").read_text())
    assert profile["measurement_conditions"]["accept_rule"] == "exact_match"
    tuned = json.loads((out / "tuning.json").read_text())["workloads"]["logs"]
    assert tuned["sampling"]["temperature"] == 0.7 and tuned["sampling"]["top_p"] == 0.9
    assert tuned["accept_rule"] == "exact_match"
    results = json.loads((out / "perf" / "results.json").read_text())
    assert all(r["sampling"]["temperature"] == 0.7 and r["sampling"]["top_p"] == 0.9 for r in results["runs"])
    (cmp,) = results["comparisons"]
    assert cmp["parity"] is not None and cmp["sampling"] == "T=0.7 top_p=0.9"


def test_the_perf_command_printed_for_an_h100_flavor_carries_the_recipes_blocks(tmp_path):
    """A recipe served elsewhere gets its perf run as a command line; settings that differ from the
    CLI's defaults (here perf.blocks) must be in it, or the H100 run measures something else."""
    from rich.console import Console
    from trtspec.pipeline.stages import Ctx, Paths, perf_not_applicable

    recipe = parse_recipe({"target": "default", "draft": {"derive": {"layers": 1}}, "workloads": {"chat": "mt-bench"},
                           "triton": {"flavor": "llmapi"}, "perf": {"requests": 8, "blocks": 4}})
    why = perf_not_applicable(Ctx(recipe, tmp_path / "r.yaml", Paths(tmp_path), Console()))
    assert "--blocks 4" in why and "--baseline" in why and "--requests 8" in why


@pytest.mark.parametrize("perf,flags", [
    ({"temperature": 0.7, "top_k": 5, "top_p": 0.9}, ["--temperature 0.7", "--top-k 5", "--top-p 0.9"]),
    ({"sweep": True, "baseline": False}, ["--sweep"]),
])
def test_the_perf_command_printed_for_an_h100_flavor_carries_the_recipes_sampling_and_sweep(tmp_path, perf, flags):
    """perf.temperature / top_k / top_p / sweep change what the H100 run measures (sampled requests, the
    sweep `tune --calibrate` fits): the printed command must carry them, as it carries perf.blocks."""
    from rich.console import Console
    from trtspec.pipeline.stages import Ctx, Paths, perf_not_applicable

    recipe = parse_recipe({"target": "default", "draft": {"derive": {"layers": 1}}, "workloads": {"chat": "mt-bench"},
                           "triton": {"flavor": "llmapi"}, "perf": perf})
    why = perf_not_applicable(Ctx(recipe, tmp_path / "r.yaml", Paths(tmp_path), Console()))
    assert all(f in why for f in flags), why


def test_serve_only_settings_do_not_change_the_triton_stages_hash(tmp_path):
    """triton.drain_timeout_s / model_control / ports only start the server: editing them must not
    rebuild the repository (and so re-run perf); a repository option (max_batch_size) must."""
    from trtspec.pipeline.runner import STAGES, Runner

    def triton_hash(**triton) -> str:
        recipe = tmp_path / "r.yaml"
        recipe.write_text(yaml.safe_dump({"target": "default", "draft": {"derive": {"layers": 1}},
                                          "workloads": {"chat": "mt-bench"}, "triton": {"flavor": "cpu", **triton}}))
        return Runner(recipe, tmp_path / "out").input_hash(STAGES["triton"])

    base = triton_hash()
    for serve in ({"drain_timeout_s": 5}, {"model_control": True}, {"start_timeout_s": 9}, {"ports": {"grpc": 9001}}):
        assert triton_hash(**serve) == base, serve
    assert triton_hash(max_batch_size=2) != base


@pytest.mark.parametrize("calib", [None, {"c": "mt-bench"}])
def test_quantize_hashes_the_workloads_only_when_it_calibrates_on_them(tmp_path, calib):
    """quantization.calib names its own sources: then adding a workload or editing its prompt file
    must not re-run a minutes-long quantization (without calib it calibrates on them, and must)."""
    from trtspec.pipeline.runner import STAGES, Runner

    (tmp_path / "hf").mkdir()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    quant = {"format": "fp8", **({"calib": calib} if calib else {})}

    def quantize_hash(workloads) -> str:
        recipe = tmp_path / "r.yaml"
        recipe.write_text(yaml.safe_dump({"target": "hf", "draft": {"hf": "hf"}, "workloads": workloads,
                                          "quantization": quant}))
        return Runner(recipe, tmp_path / "out").input_hash(STAGES["quantize"])

    one, two = quantize_hash({"chat": "mt-bench"}), quantize_hash({"chat": "mt-bench", "logs": "p.jsonl"})
    prompts.write_text('{"prompt": "other"}\n')
    edited = quantize_hash({"chat": "mt-bench", "logs": "p.jsonl"})
    assert (one == two == edited) is (calib is not None) and (one != two != edited) is (calib is None)
