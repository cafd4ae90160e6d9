"""pipeline/inputs.py: which external inputs (files outside OUT) each stage's input hash covers."""

from __future__ import annotations

from pathlib import Path

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
