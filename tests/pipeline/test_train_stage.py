"""The recipe stage `draft: {train: ...}`: an EAGLE-3 head trained on the target's answers to the
recipe's workloads (the derive stage), cached by its inputs, read by the later stages as a given
`draft: {eagle3: DIR}` head is; re-run only when what it depends on changes."""

from __future__ import annotations

import json
import random

import pytest
import yaml

from cli_helpers import run_cli
from tiny_models import make_hf_model, save_tiny_tokenizer, scale_layer_outputs
from trtspec.pipeline.runner import run_recipe
from trtspec.tuning.tuning_schema import load_tuning

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TRAIN = {"heldout": 2, "max_new_tokens": 8, "epochs": 1, "batch_size": 4, "eval_every": 50, "lr": 3e-3,
         "draft_vocab_size": 64, "device": "cpu", "eval_k": [1, 2]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A near-bigram tiny Llama, its tokenizer and two prompt files (8 prompts each)."""
    d = tmp_path_factory.mktemp("train_stage")
    model = make_hf_model("llama", d / "hf")
    scale_layer_outputs(model, 0.3).save_pretrained(d / "hf")
    save_tiny_tokenizer(d / "hf")
    r = random.Random(0)
    for name, lo in (("chat", 3), ("code", 500)):
        (d / f"{name}.jsonl").write_text("".join(
            json.dumps({"prompt": " ".join(f"t{r.randrange(lo, lo + 400)}" for _ in range(5))}) + "\n"
            for _ in range(8)))
    return d


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTSPEC_CACHE", str(tmp_path / "cache"))


def write_recipe(d, path, train=None, **over):
    recipe = {"target": str(d / "hf"), "draft": {"train": {**TRAIN, **(train or {})}}, "dtype": "float32",
              "workloads": {"chat": str(d / "chat.jsonl")},
              "profile": {"samples": 2, "max_new_tokens": 8, "max_k": 2},
              "tune": {"cost": "h100", "concurrency_bands": [1]}, **over}
    path.write_text(yaml.safe_dump(recipe))
    return path


def statuses(report) -> dict[str, str]:
    return {r.stage: r.status for r in report.rows}


def test_a_trained_head_is_made_once_skipped_when_unchanged_and_retrained_when_an_option_changes(tiny, tmp_path):
    recipe, out = write_recipe(tiny, tmp_path / "recipe.yaml"), tmp_path / "out"
    first = run_recipe(recipe, out, until="tune")
    s = statuses(first)
    assert s["derive"] == "ran" and s["profile"] == "ran" and s["tune"] == "ran"
    assert "eagle3 trained" in first.rows[0].note
    head = out / "draft-head"
    assert (head / "config.json").is_file() and (head / "training.json").is_file()
    profile = json.loads((out / "profile.json").read_text())
    assert profile["mode"] == "eagle3"
    assert profile["measurement_conditions"]["eagle3_head"] == str(head.resolve())  # read as draft.eagle3 would be
    assert load_tuning(out / "tuning.json").mode == "eagle3"
    trained = json.loads((head / "training.json").read_text())
    assert trained["train_prompts"] == 6 and trained["options"]["workloads"] == f"chat={tiny / 'chat.jsonl'}"

    again = statuses(run_recipe(recipe, out, until="tune"))
    assert set(again.values()) <= {"skipped", "n/a"}

    other_out = run_recipe(recipe, tmp_path / "out2", until="derive")  # another OUT: the cache, no training
    assert "eagle3 from the cache" in other_out.rows[0].note

    write_recipe(tiny, recipe, train={"lr": 1e-2})
    changed = run_recipe(recipe, out, until="tune")
    s = statuses(changed)
    assert s["derive"] == s["profile"] == s["tune"] == "ran" and s["convert"] == "skipped"
    assert "eagle3 trained" in changed.rows[0].note
    assert json.loads((head / "training.json").read_text())["options"]["lr"] == 1e-2

    (tiny / "chat2.jsonl").write_text((tiny / "chat.jsonl").read_text() + json.dumps({"prompt": "t5 t6"}) + "\n")
    write_recipe(tiny, recipe, train={"lr": 1e-2}, workloads={"chat": str(tiny / "chat2.jsonl")})
    assert statuses(run_recipe(recipe, out, until="derive", dry_run=True))["derive"] == "run"  # new prompts


def test_a_bad_train_section_is_one_line_naming_the_field(tiny, tmp_path, capsys):
    recipe = write_recipe(tiny, tmp_path / "recipe.yaml", train={"epochs": 0})
    code, _, err = run_cli(capsys, "run", recipe, "--out", tmp_path / "o", "--dry-run")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "draft.train.epochs" in lines[0], err
    write_recipe(tiny, recipe, train={"per_workloads": True})
    code, _, err = run_cli(capsys, "run", recipe, "--out", tmp_path / "o", "--dry-run")
    assert code == 2 and "unknown key 'draft.train.per_workloads'" in err and "per_workload" in err
    write_recipe(tiny, recipe, train={"num_layers": 2})  # would train, then fail at profile
    code, _, err = run_cli(capsys, "run", recipe, "--out", tmp_path / "o", "--dry-run")
    assert code == 2 and "draft.train.num_layers" in err and "one-layer EAGLE-3 heads only" in err, err


def test_another_eval_k_reruns_the_derive_stage_and_a_checkpoint_interval_does_not(tiny, tmp_path):
    """The head's training.json reports held-out AL(K) at eval_k: a changed K must not keep (or take
    from the cache) a head that reports the old K."""
    recipe, out = write_recipe(tiny, tmp_path / "recipe.yaml"), tmp_path / "out"
    run_recipe(recipe, out, until="derive")
    write_recipe(tiny, recipe, train={"checkpoint_every": 7})
    assert statuses(run_recipe(recipe, out, until="derive", dry_run=True))["derive"] == "skip"
    write_recipe(tiny, recipe, train={"eval_k": [1, 3]})
    assert statuses(run_recipe(recipe, out, until="derive", dry_run=True))["derive"] == "run"
    assert "AL(3)" in run_recipe(recipe, out, until="derive").rows[0].note
    history = json.loads((out / "draft-head" / "training.json").read_text())["history"]
    assert set(history[-1]["al"]) == {"1", "3"}
