"""Bad input gets one clear line naming the file/tensor/field, exit status 2, and no output."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from cli_helpers import run_cli
from tiny_models import make_hf_model


@pytest.fixture
def hf(tmp_path):
    make_hf_model("llama", tmp_path / "hf")
    return tmp_path / "hf"


def edit_weights(hf, fn):
    tensors = load_file(hf / "model.safetensors")
    fn(tensors)
    save_file(tensors, str(hf / "model.safetensors"))


def convert_fails(capsys, hf, out, *extra):
    code, out_text, err = run_cli(capsys, "convert", "--hf", hf, "--out", out, *extra)
    assert code == 2, (out_text, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line, no traceback
    if not (out.exists() and any(out.iterdir())):  # (a pre-existing non-empty dir is left untouched)
        assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}.tmp-*")), "temporary directory left behind"
    return err


def test_missing_tensor(tmp_path, hf, capsys):
    edit_weights(hf, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    err = convert_fails(capsys, hf, tmp_path / "out")
    assert "missing tensor 'model.layers.1.mlp.up_proj.weight'" in err


def test_extra_tensor(tmp_path, hf, capsys):
    edit_weights(hf, lambda t: t.update({"model.layers.2.mlp.up_proj.weight": torch.zeros(96, 64)}))
    err = convert_fails(capsys, hf, tmp_path / "out")
    assert "unexpected tensor 'model.layers.2.mlp.up_proj.weight'" in err


def test_wrong_shape(tmp_path, hf, capsys):
    edit_weights(hf, lambda t: t.update({"model.layers.0.self_attn.k_proj.weight": torch.zeros(16, 64)}))
    err = convert_fails(capsys, hf, tmp_path / "out")
    assert "'model.layers.0.self_attn.k_proj.weight' has shape [16, 64], expected [32, 64]" in err


def test_unsupported_architecture(tmp_path, hf, capsys):
    cfg = json.loads((hf / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (hf / "config.json").write_text(json.dumps(cfg))
    err = convert_fails(capsys, hf, tmp_path / "out")
    assert "unsupported architecture 'GPT2LMHeadModel'" in err and "config.json" in err


def test_missing_config_field(tmp_path, hf, capsys):
    cfg = json.loads((hf / "config.json").read_text())
    del cfg["hidden_size"]
    (hf / "config.json").write_text(json.dumps(cfg))
    err = convert_fails(capsys, hf, tmp_path / "out")
    assert "missing field 'hidden_size'" in err


@pytest.mark.parametrize("damage", ["truncate", "garbage_header"])
def test_corrupt_safetensors(tmp_path, hf, capsys, damage):
    path = hf / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:8] + b"{not json" + data[17:])
    err = convert_fails(capsys, hf, tmp_path / "out")
    assert "model.safetensors: corrupt safetensors file" in err


def test_non_empty_output_dir(tmp_path, hf, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    err = convert_fails(capsys, hf, out)
    assert "output directory is not empty" in err
    assert (out / "keep.txt").read_text() == "mine"


def test_unwritable_output_location(tmp_path, hf, capsys):
    (tmp_path / "afile").write_text("x")  # a file where a directory is needed
    err = convert_fails(capsys, hf, tmp_path / "afile" / "out")
    assert "cannot write here" in err


def test_tp_must_divide_heads(tmp_path, hf, capsys):
    err = convert_fails(capsys, hf, tmp_path / "out", "--tp", "3")
    assert "num_attention_heads=4 is not divisible by tp=3" in err


def test_failure_while_writing_leaves_nothing(tmp_path, hf, monkeypatch):
    from trtspec.checkpoints import writer
    from trtspec.checkpoints.convert import convert_hf

    calls = {"n": 0}
    real = writer.materialize

    def failing(plan, sources, dtype):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError("disk full")
        return real(plan, sources, dtype)

    monkeypatch.setattr(writer, "materialize", failing)
    with pytest.raises(OSError):
        convert_hf(hf, tmp_path / "out")
    assert calls["n"] == 5
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.tmp-*"))


def test_sharded_index_is_read(tmp_path, hf):
    """A sharded checkpoint (index + several files) converts to the same tensors."""
    from trtspec.checkpoints.convert import convert_hf

    tensors = load_file(hf / "model.safetensors")
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text((hf / "config.json").read_text())
    for fname, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(sharded / fname))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: f for f, ks in shards.items() for k in ks}}))
    convert_hf(hf, tmp_path / "a", dtype="float32")
    convert_hf(sharded, tmp_path / "b", dtype="float32")
    a, b = load_file(tmp_path / "a" / "rank0.safetensors"), load_file(tmp_path / "b" / "rank0.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_index_pointing_to_missing_shard(tmp_path, hf, capsys):
    (hf / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.norm.weight": "model-00009.safetensors"}}))
    err = convert_fails(capsys, hf, tmp_path / "out")
    assert "model-00009.safetensors" in err and "does not exist" in err


@pytest.mark.parametrize("index", [[], {"weight_map": ["model.norm.weight"]}, {"weight_map": {"model.norm.weight": 3}},
                                   "{not json"])
def test_a_malformed_index_is_one_line_naming_it(tmp_path, hf, capsys, index):
    path = hf / "model.safetensors.index.json"
    path.write_text(index if isinstance(index, str) else json.dumps(index))
    err = convert_fails(capsys, hf, tmp_path / "out")
    assert f"{path}: expected a JSON object whose 'weight_map' maps tensor names to shard files" in err
