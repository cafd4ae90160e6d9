"""`trtspec generate` and `run_generate` end to end: modes picked from the checkpoints, JSON keys,
text decoding with the checkpoint's tokenizer, eos from generation_config.json, one-line errors."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from cli_helpers import run_cli
from tiny_models import make_eagle_head, make_hf_model, save_tiny_tokenizer
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.pair import convert_pair
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.cli import app
from trtspec.errors import TrtspecError
from trtspec.runtime.generate import load_models, run_generate
from trtspec.runtime.greedy import generate_greedy
from trtspec.runtime.model import Decoder

PROMPT = [5, 17, 300, 42, 8]
NEW = 12


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen")
    make_hf_model("llama", d / "hf", num_key_value_heads=1)
    make_hf_model("llama", d / "draft_hf", seed=4, num_key_value_heads=1, num_hidden_layers=1)
    convert_hf(d / "hf", d / "bare", dtype="float32")  # no tokenizer files
    save_tiny_tokenizer(d / "hf")
    save_tiny_tokenizer(d / "draft_hf")
    convert_hf(d / "hf", d / "plain", dtype="float32")
    convert_hf(d / "draft_hf", d / "draft", dtype="float32")
    convert_pair(d / "hf", d / "draft_hf", d / "pair", dtype="float32")
    make_eagle_head(d / "hf", d / "head")
    convert_eagle(d / "hf", d / "head", d / "eagle", dtype="float32", num_eagle_layers=2, max_draft_len=8,
                  max_non_leaves=2)
    return d


@pytest.fixture(scope="module")
def greedy(d):
    target = Decoder(load_checkpoint(d / "plain"))
    return lambda prompt, n=NEW, eos=None: generate_greedy(target, [prompt], n, eos)[0].output_ids


def cli_json(*args) -> dict:
    result = CliRunner().invoke(app, ["generate", *map(str, args), "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def test_cli_json_greedy_without_tokenizer(d, greedy):
    out = cli_json("--ckpt", d / "bare", "--prompt-ids", json.dumps(PROMPT), "--max-new-tokens", NEW, "--ignore-eos")
    assert set(out) == {"output_ids", "text", "acceptance_length", "steps", "finish_reason", "timing", "sampling",
                        "accept_rule"}
    assert out["sampling"]["temperature"] == 0.0 and out["accept_rule"] is None  # greedy: no rule applies
    t = out["timing"]
    assert set(t) == {"first_token_s", "total_s", "tokens_per_s"}
    assert 0 < t["first_token_s"] <= t["total_s"] and t["tokens_per_s"] == pytest.approx(NEW / t["total_s"])
    assert out["output_ids"] == greedy(PROMPT) and len(out["output_ids"]) == NEW
    assert out["text"] is None and out["acceptance_length"] is None and out["steps"] == NEW
    assert out["finish_reason"] == "length"


def test_cli_json_text_prompt_is_tokenized_and_decoded(d, greedy):
    out = cli_json("--ckpt", d / "plain", "--prompt", "t5 t17 t300 t42 t8", "--max-new-tokens", NEW, "--ignore-eos")
    assert out["output_ids"] == greedy(PROMPT)
    assert out["text"].split() == [f"t{i}" for i in out["output_ids"] if i > 2]


def test_cli_json_eagle_and_draft_target(d, greedy):
    eagle = cli_json("--ckpt", d / "eagle", "--prompt-ids", json.dumps(PROMPT), "--max-new-tokens", NEW,
                     "--eagle-choices", "[[0], [1], [0, 0], [1, 0]]", "--ignore-eos")
    assert eagle["output_ids"] == greedy(PROMPT) and eagle["acceptance_length"] >= 1.0
    # every verify step emits accepted + 1 tokens (the last one possibly cut): AL * steps covers NEW - 1
    assert eagle["steps"] <= NEW and eagle["acceptance_length"] * (eagle["steps"] - 1) >= NEW - 1
    dt = cli_json("--ckpt", d / "plain", "--draft-ckpt", d / "draft", "--draft-len", 3,
                  "--prompt-ids", json.dumps(PROMPT), "--max-new-tokens", NEW, "--ignore-eos")
    assert dt["output_ids"] == greedy(PROMPT) and dt["acceptance_length"] >= 1.0
    assert dt["steps"] <= NEW and dt["acceptance_length"] * (dt["steps"] - 1) >= NEW - 1


def test_run_generate_eagle2(d, greedy):
    out = run_generate(d / "eagle", prompt_ids=PROMPT, max_new_tokens=NEW, eagle_dynamic_top_k=2, ignore_eos=True)
    assert out["output_ids"] == greedy(PROMPT) and out["acceptance_length"] >= 1.0


def test_pair_directory_runs_draft_target(d, greedy):
    out = run_generate(d / "pair", prompt_ids=PROMPT, max_new_tokens=NEW, draft_len=2, ignore_eos=True)
    assert out["output_ids"] == greedy(PROMPT) and out["acceptance_length"] is not None
    assert out["text"] is not None
    models = load_models(d / "pair")
    assert models.draft is not None and models.draft.spec.num_layers == 1


def test_cli_pair_directory_takes_draft_len(d, greedy, tmp_path):
    """`--ckpt PAIR --draft-len K` drafts K tokens per step (README: draft-target from a pair
    directory), not the default K whatever the flag says: the target drafting for itself accepts all K."""
    convert_pair(d / "hf", d / "hf", tmp_path / "self", dtype="float32")
    for k in (1, 3):
        out = cli_json("--ckpt", tmp_path / "self", "--draft-len", k, "--prompt-ids", json.dumps(PROMPT),
                       "--max-new-tokens", NEW, "--ignore-eos")
        assert out["output_ids"] == greedy(PROMPT)
        assert k < out["acceptance_length"] <= k + 1  # (the last step may be cut by max_new_tokens)


def test_eos_from_generation_config(d, greedy, tmp_path):
    full = greedy(PROMPT, 30)
    eos = full[5]
    ckpt = tmp_path / "ckpt"
    shutil.copytree(d / "plain", ckpt)
    (ckpt / "generation_config.json").write_text(json.dumps({"eos_token_id": [999999, eos]}))
    out = run_generate(ckpt, prompt_ids=PROMPT, max_new_tokens=30)
    assert out["output_ids"] == full[:full.index(eos) + 1]
    assert run_generate(ckpt, prompt_ids=PROMPT, max_new_tokens=30, ignore_eos=True)["output_ids"] == full
    dt = run_generate(ckpt, prompt_ids=PROMPT, max_new_tokens=30, draft_ckpt=d / "draft", draft_len=3)
    assert dt["output_ids"] == full[:full.index(eos) + 1]


@pytest.mark.parametrize("kwargs, message", [
    (dict(ckpt="plain", eagle_choices=[[0]]), "eagle_choices apply to EAGLE checkpoints only"),
    (dict(ckpt="bare", prompt="t5 t6"), "no tokenizer files"),
    (dict(ckpt="plain", draft_len=3), "draft_len: needs a draft checkpoint"),
    (dict(ckpt="eagle", eagle_choices=[[0], [0, 0], [0, 0, 0]]), "depth 3 exceeds num_eagle_layers=2"),
    (dict(ckpt="eagle"), "pass eagle_choices"),  # the 63-node default does not fit max_draft_len=8
    (dict(ckpt="plain", prompt_ids=[1, 1001]), "token id 1001"),
    (dict(ckpt="plain", eagle_dynamic_top_k=2), "EAGLE checkpoints only"),
])
def test_run_generate_errors(d, kwargs, message):
    kwargs = dict(kwargs)
    ckpt = d / kwargs.pop("ckpt")
    if "prompt" not in kwargs and "prompt_ids" not in kwargs:
        kwargs["prompt_ids"] = PROMPT
    with pytest.raises(TrtspecError, match=message):
        run_generate(ckpt, max_new_tokens=4, **kwargs)


@pytest.mark.parametrize("ckpt", ["plain", "eagle"])
def test_cli_draft_len_without_a_draft_is_refused(d, capsys, ckpt):
    """--draft-len on a checkpoint that does not draft it (plain, EAGLE-1 tree) is an error naming
    the flag, not a flag silently ignored."""
    code, out, err = run_cli(capsys, "generate", "--ckpt", d / ckpt, "--prompt-ids", json.dumps(PROMPT),
                             "--draft-len", "3", "--eagle-choices", "[[0]]")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--draft-len" in err and "needs a draft checkpoint" in err


def test_cli_error_is_one_line(d, capsys):
    code, out, err = run_cli(capsys, "generate", "--ckpt", d / "bare", "--prompt", "t5", "--json")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and "no tokenizer files" in err
