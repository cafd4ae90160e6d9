"""Draft-target pairs: target/ and draft/ checkpoints, and the shared-tokenizer check."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from cli_helpers import run_cli
from tiny_models import make_hf_model, save_tiny_tokenizer
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint


def make_pair(tmp_path, draft_vocab=1001, rename=None):
    make_hf_model("llama", tmp_path / "target")
    make_hf_model("llama", tmp_path / "draft", seed=3, num_hidden_layers=1, vocab_size=draft_vocab)
    save_tiny_tokenizer(tmp_path / "target", 1001)
    save_tiny_tokenizer(tmp_path / "draft", 1001, rename=rename)


def test_pair_writes_target_and_draft(tmp_path, capsys):
    make_pair(tmp_path, draft_vocab=1024)  # a draft whose embedding is padded further is fine
    code, _, err = run_cli(capsys, "convert", "--hf", tmp_path / "target", "--draft", tmp_path / "draft",
                           "--out", tmp_path / "pair", "--dtype", "float32", "--tp", "2")
    assert code == 0, err
    for role, layers in (("target", 2), ("draft", 1)):
        ckpt = load_checkpoint(tmp_path / "pair" / role)
        assert ckpt.tp == 2 and ckpt.spec.num_layers == layers
        hf = load_file(tmp_path / role / "model.safetensors")
        assert torch.equal(ckpt.tensor("transformer.layers.0.mlp.proj.weight"), hf["model.layers.0.mlp.down_proj.weight"])
        assert (tmp_path / "pair" / role / "tokenizer.json").is_file()
    manifest = json.loads((tmp_path / "pair" / "trtspec.json").read_text())
    assert manifest["kind"] == "draft-target-pair" and manifest["options"]["tokenizer_size"] == 1001
    assert [s["role"] for s in manifest["sources"]] == ["target", "draft"]


def test_tokenizer_mismatch_names_first_difference(tmp_path, capsys):
    make_pair(tmp_path, rename={517: "other"})
    code, _, err = run_cli(capsys, "convert", "--hf", tmp_path / "target", "--draft", tmp_path / "draft",
                           "--out", tmp_path / "pair")
    assert code == 2
    assert "token id 517" in err and "'t517'" in err and "'other'" in err
    assert not (tmp_path / "pair").exists()


def test_draft_vocab_smaller_than_tokenizer(tmp_path, capsys):
    make_pair(tmp_path, draft_vocab=900)
    code, _, err = run_cli(capsys, "convert", "--hf", tmp_path / "target", "--draft", tmp_path / "draft",
                           "--out", tmp_path / "pair")
    assert code == 2 and "draft vocab_size=900" in err and "1001" in err


def test_pair_without_tokenizer_is_refused(tmp_path, capsys):
    make_hf_model("llama", tmp_path / "target")
    make_hf_model("llama", tmp_path / "draft", seed=3)
    code, _, err = run_cli(capsys, "convert", "--hf", tmp_path / "target", "--draft", tmp_path / "draft",
                           "--out", tmp_path / "pair")
    assert code == 2 and "no tokenizer files" in err


def test_tokenizer_ids_beyond_vocab_are_refused_despite_holes(tmp_path, capsys):
    """A tokenizer whose ids have holes (here 0..1000 and 1500) emits ids up to its highest one,
    not up to its token count: vocab_size 1001 leaves id 1500 without an embedding row."""
    make_hf_model("llama", tmp_path / "target")
    make_hf_model("llama", tmp_path / "draft", seed=3, num_hidden_layers=1)
    for role in ("target", "draft"):
        save_tiny_tokenizer(tmp_path / role, 1001, rename={1500: "late"})
    code, _, err = run_cli(capsys, "convert", "--hf", tmp_path / "target", "--draft", tmp_path / "draft",
                           "--out", tmp_path / "pair")
    assert code == 2 and "target vocab_size=1001" in err and "highest id is 1500" in err
    assert not (tmp_path / "pair").exists()


def test_non_integer_vocab_size_is_named(tmp_path, capsys):
    make_pair(tmp_path)
    cfg = json.loads((tmp_path / "draft" / "config.json").read_text())
    (tmp_path / "draft" / "config.json").write_text(json.dumps({**cfg, "vocab_size": "1001"}))
    code, _, err = run_cli(capsys, "convert", "--hf", tmp_path / "target", "--draft", tmp_path / "draft",
                           "--out", tmp_path / "pair")
    assert code == 2 and "vocab_size: expected" in err and "'1001'" in err
