"""A recipe offering an EAGLE-3 head and n-gram drafting, through the pipeline to an llmapi
repository: each drafter profiled and tuned alone, the choice per workload, and one LLM-API model
per chosen (drafter, K) whose speculative_config is that drafter's (Eagle3 with the head, NGram
with its matching size), validated like every repository."""

from __future__ import annotations

import json

import pytest
import yaml

from tiny_models import eagle3_dirs, save_tiny_tokenizer
from trtspec.pipeline.runner import run_recipe
from trtspec.triton_repo.validate import check_repository
from trtspec.tuning.report import setting_text
from trtspec.tuning.tuning_schema import load_tuning

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_an_eagle3_and_ngram_recipe_writes_one_llmapi_model_per_chosen_drafter_setting(tmp_path):
    eagle3_dirs(tmp_path)
    save_tiny_tokenizer(tmp_path / "hf", vocab_size=48)
    text = lambda ids: " ".join(f"t{i}" for i in ids)
    chat = [text([5 + i, 9 + i, 17 + i]) for i in range(4)]
    edit = [text([5 + i, 9 + i, 17 + i, 30, 31, 32, 33, 34, 35, 36, 5 + i, 9 + i]) for i in range(4)]
    for name, prompts in (("chat", chat), ("edit", edit)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    recipe = {"target": "hf", "draft": {"eagle3": "bigram_head"}, "ngram": True, "dtype": "float32",
              "workloads": {"chat": "chat.jsonl", "edit": "edit.jsonl"},
              "profile": {"samples": 4, "max_new_tokens": 12, "max_k": 3, "ngram_sizes": [2]},
              "tune": {"cost": "h100", "concurrency_bands": [1]}, "triton": {"flavor": "llmapi"}}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    out = tmp_path / "out"
    rows = {r.stage: r for r in run_recipe(tmp_path / "recipe.yaml", out, until="triton").rows}

    t = load_tuning(out / "tuning.json")
    assert t.mode == "eagle3" and set(t.choice.drafters) == {"eagle3", "ngram"} and t.choice.separate_instances
    repo = out / "triton-repo"
    assert check_repository(repo) == []
    routing = json.loads((repo / "trtspec-repo.json").read_text())["routing"]
    for workload, w in t.workloads.items():
        band = w.bands[0]
        assert f"{workload}@1: {setting_text(band)} x{band.speedup:.2f}" in rows["tune"].note  # as the summary says it
        entry = routing["workloads"][workload]
        assert entry["num_draft_tokens"] == band.draft_len
        cfg = yaml.safe_load((repo / entry["model"] / "1" / "model.yaml").read_text())
        spec = cfg.get("speculative_config")
        if not band.speculate:
            assert spec is None
        elif band.drafter == "ngram":
            assert (spec["decoding_type"], spec["max_draft_len"], spec["max_matching_ngram_size"]) == (
                "NGram", band.draft_len, band.max_matching_ngram_size)
        else:
            assert (spec["decoding_type"], spec["max_draft_len"]) == ("Eagle", band.draft_len)
            assert spec["speculative_model_dir"] == str((tmp_path / "bigram_head").resolve())
