"""pipeline/inputs.py: which external inputs (files outside OUT) each stage's input hash covers."""

from __future__ import annotations

from pathlib import Path

import yaml

from trtspec.pipeline.inputs import EXTERNALS, default_target_dir, reads, stage_inputs
from trtspec.recipe import parse_recipe


def test_stage_externals_match_keys_exactly_or_under_a_dotted_prefix():
    """A changed EAGLE-3 head (draft.eagle3) re-runs what reads it (profile, triton), not convert or
    quantize, whose draft.eagle pattern names the EAGLE-1 checkpoint only."""
    readers = sorted(n for n, patterns in EXTERNALS.items() if reads("draft.eagle3", patterns))
    assert readers == ["profile", "triton"]
    assert sorted(n for n, p in EXTERNALS.items() if reads("draft.eagle", p)) == ["convert", "quantize"]
    assert reads("draft.train.workloads.chat", EXTERNALS["derive"])
    assert reads("workloads.code", EXTERNALS["perf"]) and not reads("workloads", EXTERNALS["perf"])


def test_stage_inputs_count_the_embedded_default_target_where_the_target_is_read(tmp_path):
    """The default target has no recipe path; its cached conversion stands in as `target` for the
    stages that read the target (derive, convert, quantize) and for no other."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    recipe = parse_recipe({"target": "default", "draft": {"derive": {"layers": 1}},
                           "workloads": {"chat": "mt-bench", "mine": str(prompts)}}, "r.yaml")
    readers = sorted(n for n in EXTERNALS if "target" in stage_inputs(recipe, n))
    assert readers == ["convert", "derive", "quantize"]
    assert stage_inputs(recipe, "convert")["target"] == default_target_dir()
    assert stage_inputs(recipe, "perf") == {"workloads.mine": Path(str(prompts))}
    assert stage_inputs(recipe, "report") == {}


def test_the_quality_reports_prompt_files_are_inputs_of_quantize(tmp_path):
    """quantization.report.workloads is read by the quantize stage (its quality report): an edited
    prompt file must re-run it, and a missing one is named before any stage runs."""
    from trtspec.pipeline.inputs import missing_inputs
    from trtspec.recipe import load_recipe

    (tmp_path / "rep.jsonl").write_text('{"prompt": "hi"}\n')
    report = {"workloads": {"mine": "rep.jsonl", "gone": "gone.jsonl", "chat": "mt-bench"}}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"target": "default", "draft": {"derive": {"layers": 1}},
                                                     "workloads": {"chat": "mt-bench"},
                                                     "quantization": {"format": "fp8", "report": report}}))
    recipe = load_recipe(tmp_path / "r.yaml")
    found = stage_inputs(recipe, "quantize")
    assert found["quantization.report.workloads.mine"] == tmp_path / "rep.jsonl"
    assert "quantization.report.workloads.chat" not in found  # packaged: no file
    assert sorted(n for n in EXTERNALS if "quantization.report.workloads.mine" in stage_inputs(recipe, n)) == \
        ["quantize"]
    assert missing_inputs(recipe) == [f"quantization.report.workloads.gone: {tmp_path / 'gone.jsonl'}"]


def _runner(tmp_path, **over):
    from trtspec.pipeline.runner import Runner

    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"target": "default", "workloads": {"chat": "mt-bench"},
                                                     **over}))
    return Runner(tmp_path / "r.yaml", tmp_path / "out")


def test_an_eagle3_heads_path_is_hashed_only_by_the_stages_that_read_it(tmp_path):
    """convert and quantize never read draft.eagle3: moving the head must not re-run them; profile must."""
    from trtspec.pipeline.runner import STAGES

    for name in ("h1", "h2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")

    def hashes(head: str) -> list[str]:
        over = {"draft": {"eagle3": head}}
        quant = {**over, "quantization": {"format": "fp8"}}
        return [_runner(tmp_path, **over).input_hash(STAGES["convert"]),
                _runner(tmp_path, **quant).input_hash(STAGES["quantize"]),
                _runner(tmp_path, **over).input_hash(STAGES["profile"])]

    one, two = hashes("h1"), hashes("h2")
    assert one[:2] == two[:2] and one[2] != two[2]


def test_engines_served_without_a_build_section_are_named_and_hashed(tmp_path):
    """Engines under OUT/build without a build section (built by hand on the H100 host, or left by
    an earlier run) are served: rebuilt ones must re-run triton, and the stage names what it served."""
    from trtspec.pipeline.runner import STAGES

    runner = _runner(tmp_path, draft={"derive": {"layers": 1}}, triton={"flavor": "trtllm"})
    manifest = tmp_path / "out" / "build" / "engine_manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"built": 1}')
    assert STAGES["triton"].applies(runner.ctx) is None
    before = runner.input_hash(STAGES["triton"])
    manifest.write_text('{"built": 2}')
    assert runner.input_hash(STAGES["triton"]) != before
    from trtspec.pipeline.triton_stage import engines_note

    note = engines_note(runner.ctx)
    assert str(manifest.parent) in note and "no build section" in note


def test_a_new_release_re_runs_the_stages(tmp_path):
    """A stage's output depends on the code that made it as well as on its inputs: another trtspec or
    ModelOpt (its calibration), transformers or torch version changes every stage's input hash."""
    import modelopt
    import transformers

    from trtspec.pipeline.runner import STAGES

    over = {"draft": {"derive": {"layers": 1}}, "quantization": {"format": "fp8"}}
    runner = _runner(tmp_path, **over)
    assert runner.code["nvidia-modelopt"] == modelopt.__version__ and runner.code["transformers"] == transformers.__version__
    assert runner.code["torch"].split("+")[0] == torch_version() and runner.code["trtspec"]
    before = runner.input_hash(STAGES["quantize"])
    assert _runner(tmp_path, **over).input_hash(STAGES["quantize"]) == before
    runner.code = {**runner.code, "nvidia-modelopt": "0.0.1"}
    assert runner.input_hash(STAGES["quantize"]) != before


def torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]
