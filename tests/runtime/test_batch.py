"""A prompt + its new tokens must fit the model's positions (max_position_embeddings): one rule
(runtime/batch.over_positions); `generate` refuses with one line naming the prompt and the
positions, `profile` skips the samples that do not fit with a warning naming them."""

from __future__ import annotations

import json

import pytest

from cli_helpers import run_cli
from triton_fixtures import tiny_pair
from trtspec.errors import TrtspecError
from trtspec.runtime.batch import check_positions, over_positions
from trtspec.runtime.generate import load_models, run_generate

POSITIONS = 256  # tiny_models' max_position_embeddings


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    """A tiny draft-target pair (target/ + draft/, tokenizer included), 256 positions."""
    return tiny_pair(tmp_path_factory.mktemp("positions"))


def test_the_rule():
    prompts = [[1] * 250, [1] * 251, [1] * 256, [1] * 10]
    assert over_positions(prompts, 6, POSITIONS) == [1, 2]
    assert over_positions(prompts, 6, 0) == []  # no known bound
    check_positions([[1] * 250], 6, POSITIONS)  # exactly full: fits
    with pytest.raises(TrtspecError) as e:
        check_positions(prompts, 6, POSITIONS)
    assert str(e.value) == ("prompt 1: 251 tokens + max_new_tokens 6 exceed the model's max_position_embeddings=256 "
                            "(at most 5 new tokens fit after it)")


def test_generate_refuses_before_decoding(d):
    models = load_models(d / "target", d / "draft")
    assert models.max_positions == POSITIONS
    with pytest.raises(TrtspecError, match="^prompt: 402 tokens \\+ max_new_tokens 8 exceed the model's "
                                           "max_position_embeddings=256$"):
        run_generate(d / "target", prompt_ids=[5] * 402, max_new_tokens=8)
    assert len(run_generate(d / "target", prompt_ids=[5] * 248, max_new_tokens=8, ignore_eos=True)["output_ids"]) == 8


def test_generate_command_refuses_a_prompt_beyond_the_positions(d, capsys):
    ids = json.dumps([5] * 402)
    code, out, err = run_cli(capsys, "generate", "--ckpt", d / "target", "--prompt-ids", ids, "--max-new-tokens", "8")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["error: prompt: 402 tokens + max_new_tokens 8 exceed the model's "
                                        "max_position_embeddings=256"], err


def test_profile_skips_the_samples_that_do_not_fit_and_names_them(d, tmp_path, capsys):
    rows = [{"id": "short-1", "prompt": "t1 t2 t3"}, {"id": "long-402", "prompt": " ".join(["t7"] * 402)},
            {"id": "short-2", "prompt": "t4 t5"}]
    (tmp_path / "log.jsonl").write_text("\n".join(map(json.dumps, rows)))
    code, out, err = run_cli(capsys, "profile", "--ckpt", d / "target", "--draft-ckpt", d / "draft",
                             "--workloads", f"log={tmp_path / 'log.jsonl'}", "--max-k", "3", "--max-new-tokens", "8",
                             "--out", tmp_path / "profile.json")
    assert code == 0, err
    assert ("warning: workload log: skipping 1 of 3 samples whose prompt + 12 decoded tokens exceed the model's "
            "max_position_embeddings=256: long-402") in out
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert [s["id"] for s in profile["workloads"]["log"]["samples"]] == ["short-1", "short-2"]

    (tmp_path / "all_long.jsonl").write_text(json.dumps(rows[1]))
    code, out, err = run_cli(capsys, "profile", "--ckpt", d / "target", "--draft-ckpt", d / "draft",
                             "--workloads", f"log={tmp_path / 'all_long.jsonl'}", "--max-k", "3",
                             "--max-new-tokens", "8", "--out", tmp_path / "p2.json")
    assert code == 2 and not (tmp_path / "p2.json").exists()
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: workload log: every prompt + 12 decoded "
                                                                 "tokens exceeds the model's max_position_embeddings=256")
