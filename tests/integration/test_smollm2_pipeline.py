"""Speculative decoding on the real SmolLM2-135M-Instruct, through the converters and the CLI:
draft-target with a draft derived from it (and with itself as the draft: every draft accepted), and an
EAGLE-1 head merged into an EagleForCausalLM checkpoint with its tied embeddings. Slow."""

from __future__ import annotations

import json

import pytest

from cli_helpers import run_cli
from runtime.test_batch_invariant import all_accepted
from tiny_models import make_eagle_head
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.pair import convert_pair
from trtspec.runtime.generate import generate_batch, load_models

pytestmark = pytest.mark.slow
NEW = 24
PROMPTS = ["Write a Python function that reverses a string.", "What is the capital of France?"]


@pytest.fixture(scope="module")
def pair(smollm2_hf, smollm2_draft_hf, tmp_path_factory):
    out = tmp_path_factory.mktemp("smol_pair") / "pair"
    return convert_pair(smollm2_hf, smollm2_draft_hf, out, dtype="float32")


@pytest.fixture(scope="module")
def prompts(pair):
    tok = load_models(pair / "target").tokenizer
    return [list(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True))
            for p in PROMPTS]


@pytest.fixture(scope="module")
def greedy(pair, prompts):
    models = load_models(pair / "target")
    return [r.output_ids for r in generate_batch(models, prompts, NEW, mode="greedy", ignore_eos=True)]


def test_pair_draft_target_is_lossless(pair, prompts, greedy):
    models = load_models(pair)  # the pair directory: target/ + draft/
    for k in (2, 5):
        results = generate_batch(models, prompts, NEW, mode="draft-target", draft_len=k, ignore_eos=True)
        assert [r.output_ids for r in results] == greedy
        assert all(1.0 <= r.stats.acceptance_length <= k + 1 for r in results)


@pytest.mark.parametrize("k", [1, 4])
def test_target_as_its_own_draft_accepts_everything(pair, prompts, greedy, k):
    models = load_models(pair / "target", draft_ckpt=pair / "target")
    results = generate_batch(models, prompts, NEW, mode="draft-target", draft_len=k, ignore_eos=True)
    assert [r.output_ids for r in results] == greedy
    assert [r.stats.acceptance_length for r in results] == [pytest.approx(all_accepted(NEW, k))] * 2


def test_eagle_head_on_smollm2_is_lossless_via_cli(smollm2_hf, pair, prompts, greedy, tmp_path, capsys):
    make_eagle_head(smollm2_hf, tmp_path / "head", with_embed=False)  # embedding comes from the base
    convert_eagle(smollm2_hf, tmp_path / "head", tmp_path / "eagle", dtype="float32", num_eagle_layers=3,
                  max_draft_len=15)
    choices = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1]]
    code, out, err = run_cli(capsys, "generate", "--ckpt", tmp_path / "eagle", "--prompt-ids", json.dumps(prompts[0]),
                             "--max-new-tokens", NEW, "--ignore-eos", "--eagle-choices", json.dumps(choices), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["output_ids"] == greedy[0]
    assert result["acceptance_length"] >= 1.0 and result["steps"] >= 1 + NEW / (3 + 1)
    assert isinstance(result["text"], str) and result["text"]
