"""EAGLE-1 head + base -> EagleForCausalLM checkpoint (trtllm.md §4.2-4.3)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from cli_helpers import run_cli
from tiny_models import make_eagle_head, make_hf_model
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("base")
    make_hf_model("llama", d)
    return d


@pytest.mark.parametrize("tp", [1, 2])
def test_head_is_cloned_per_eagle_layer(tmp_path, base, tp):
    head = make_eagle_head(base, tmp_path / "head", num_layers=2)
    convert_eagle(base, tmp_path / "head", tmp_path / "out", dtype="float32", tp=tp, num_eagle_layers=3)
    ckpt = load_checkpoint(tmp_path / "out")
    hf = load_file(base / "model.safetensors")
    for i in range(3):
        p = f"eagle_nets.{i}."
        assert torch.equal(ckpt.tensor(p + "drafter.fc.weight"), head["fc.weight"])
        assert torch.equal(ckpt.tensor(p + "drafter.fc.bias"), head["fc.bias"])
        assert torch.equal(ckpt.tensor(p + "drafter.vocab_embedding.weight"), head["embed_tokens.weight"])
        assert torch.equal(ckpt.tensor(p + "lm_head.weight"), hf["lm_head.weight"])
        qkv = torch.cat([head[f"layers.1.self_attn.{x}_proj.weight"] for x in "qkv"])
        assert torch.equal(ckpt.tensor(p + "drafter.layers.1.attention.qkv.weight"), qkv)
        assert torch.equal(ckpt.tensor(p + "drafter.layers.0.mlp.fc.weight"), head["layers.0.mlp.gate_proj.weight"])
        assert torch.equal(ckpt.tensor(p + "drafter.layers.0.mlp.gate.weight"), head["layers.0.mlp.up_proj.weight"])
        assert p + "drafter.layers.0.input_layernorm.weight" not in ckpt  # layer 0 has no input norm
        assert p + "drafter.layers.1.input_layernorm.weight" in ckpt
    assert "eagle_nets.3.drafter.fc.weight" not in ckpt
    # the base is a plain Llama checkpoint, embedding replicated as the official EAGLE converter does
    assert torch.equal(ckpt.tensor("transformer.vocab_embedding.weight"), hf["model.embed_tokens.weight"])


def test_config_keys(tmp_path, base):
    make_eagle_head(base, tmp_path / "head")
    convert_eagle(base, tmp_path / "head", tmp_path / "out", dtype="bfloat16", max_draft_len=31,
                  num_eagle_layers=2, max_non_leaves=5)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architecture"] == "EagleForCausalLM"
    assert (cfg["max_draft_len"], cfg["num_eagle_layers"], cfg["max_non_leaves_per_layer"]) == (31, 2, 5)
    net = cfg["eagle_net_config"]
    assert net["architecture"] == "LlamaForCausalLM" and net["num_hidden_layers"] == 1
    assert net["dtype"] == cfg["dtype"] == "bfloat16"
    assert net["vocab_size"] == cfg["vocab_size"]
    assert net["quantization"] == cfg["quantization"]
    assert net["head_dim"] == net["head_size"] == cfg["head_size"]
    # the full llama3 rope dict (the official converter drops the factors; we do not)
    assert cfg["rotary_scaling"]["factor"] == 8.0 and net["rotary_scaling"] == cfg["rotary_scaling"]
    assert net["mapping"] == cfg["mapping"] == {"world_size": 1, "tp_size": 1, "pp_size": 1}
    assert "speculative_decoding_draft_tokens_external" not in cfg
    manifest = json.loads((tmp_path / "out" / "trtspec.json").read_text())
    assert manifest["kind"] == "eagle" and len(manifest["sources"]) == 2


def test_missing_bias_and_embedding_are_filled(tmp_path, base):
    make_eagle_head(base, tmp_path / "head", with_fc_bias=False, with_embed=False)
    convert_eagle(base, tmp_path / "head", tmp_path / "out", dtype="float32", num_eagle_layers=1)
    ckpt = load_checkpoint(tmp_path / "out")
    assert torch.count_nonzero(ckpt.tensor("eagle_nets.0.drafter.fc.bias")) == 0
    hf = load_file(base / "model.safetensors")
    assert torch.equal(ckpt.tensor("eagle_nets.0.drafter.vocab_embedding.weight"), hf["model.embed_tokens.weight"])


def test_pickle_head_needs_allow_pickle(tmp_path, base, capsys):
    head = make_eagle_head(base, tmp_path / "head", fmt="bin")
    code, _, err = run_cli(capsys, "convert", "--hf", base, "--eagle", tmp_path / "head", "--out", tmp_path / "a")
    assert code == 2 and "pytorch_model.bin" in err and "--allow-pickle" in err
    assert not (tmp_path / "a").exists()
    code, _, err = run_cli(capsys, "convert", "--hf", base, "--eagle", tmp_path / "head", "--out", tmp_path / "b",
                           "--allow-pickle", "--num-eagle-layers", "2", "--dtype", "float32")
    assert code == 0, err
    assert torch.equal(load_checkpoint(tmp_path / "b").tensor("eagle_nets.1.drafter.fc.weight"), head["fc.weight"])


@pytest.mark.parametrize("extra, needle", [
    ({"d2t": torch.zeros(8, dtype=torch.int64)}, "EAGLE-3"),
    ({"lm_head.weight": torch.zeros(1001, 64)}, "own 'lm_head.weight'"),
])
def test_unrepresentable_heads_are_refused(tmp_path, base, capsys, extra, needle):
    make_eagle_head(base, tmp_path / "head", extra=extra)
    code, _, err = run_cli(capsys, "convert", "--hf", base, "--eagle", tmp_path / "head", "--out", tmp_path / "o")
    assert code == 2 and needle in err and "LLM-API (PyTorch backend)" in err
    assert not (tmp_path / "o").exists()


def test_eagle3_fc_width_is_refused(tmp_path, base, capsys):
    make_eagle_head(base, tmp_path / "head", extra={"fc.weight": torch.zeros(64, 192)})
    code, _, err = run_cli(capsys, "convert", "--hf", base, "--eagle", tmp_path / "head", "--out", tmp_path / "o")
    assert code == 2 and "3*hidden is EAGLE-3" in err


def test_non_llama_base_is_refused(tmp_path, capsys):
    make_hf_model("qwen2", tmp_path / "qwen")
    make_eagle_head(tmp_path / "qwen", tmp_path / "head")
    code, _, err = run_cli(capsys, "convert", "--hf", tmp_path / "qwen", "--eagle", tmp_path / "head",
                           "--out", tmp_path / "o")
    assert code == 2 and "Llama-family base" in err and "Qwen2ForCausalLM" in err


def test_head_base_hidden_size_mismatch(tmp_path, base, capsys):
    small = tmp_path / "small"
    make_hf_model("llama", small, hidden_size=32, intermediate_size=48)
    make_eagle_head(small, tmp_path / "head")
    code, _, err = run_cli(capsys, "convert", "--hf", base, "--eagle", tmp_path / "head", "--out", tmp_path / "o")
    assert code == 2 and "hidden-size mismatch" in err and "[32, 64]" in err


def test_layer0_input_norm_is_dropped_with_a_warning(tmp_path, base, capsys):
    make_eagle_head(base, tmp_path / "head", extra={"layers.0.input_layernorm.weight": torch.ones(64)})
    code, _, err = run_cli(capsys, "convert", "--hf", base, "--eagle", tmp_path / "head", "--out", tmp_path / "o")
    assert code == 0 and "dropping 'layers.0.input_layernorm.weight'" in err
    manifest = json.loads((tmp_path / "o" / "trtspec.json").read_text())
    assert manifest["options"]["dropped_tensors"] == ["layers.0.input_layernorm.weight"]


def test_max_draft_len_limit(tmp_path, base, capsys):
    make_eagle_head(base, tmp_path / "head")
    code, _, err = run_cli(capsys, "convert", "--hf", base, "--eagle", tmp_path / "head", "--out", tmp_path / "o",
                           "--max-draft-len", "300")
    assert code == 2 and "--max-draft-len" in err and "256" in err
