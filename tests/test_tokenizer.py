"""A trtspec checkpoint's tokenizer loads without transformers' false Mistral-regex warning."""

from __future__ import annotations

import json

import pytest

from tiny_models import make_hf_model, save_tiny_tokenizer
from trtspec.checkpoints.convert import convert_hf
from trtspec.tokenizer import load_tokenizer, mistral_regex_flag

WARNING = "incorrect regex pattern"


@pytest.fixture(scope="module")
def llama_ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    make_hf_model("llama", root / "hf")
    # transformers only checks tokenizers of more than 100000 tokens (Qwen2's has 151646)
    save_tiny_tokenizer(root / "hf", vocab_size=100_010)
    convert_hf(root / "hf", root / "ckpt", dtype="float32")
    return root / "ckpt"


def test_the_warning_is_reproduced_without_the_flag(llama_ckpt, caplog):
    """The cause: the TRT-LLM config.json has no transformers_version / model_type."""
    from transformers import AutoTokenizer

    assert "transformers_version" not in json.loads((llama_ckpt / "config.json").read_text())
    AutoTokenizer.from_pretrained(str(llama_ckpt))
    assert WARNING in caplog.text


def test_no_warning_for_a_llama_checkpoint(llama_ckpt, caplog):
    tok = load_tokenizer(llama_ckpt)
    assert tok("t5 t6").input_ids[-2:] == [5, 6]
    assert WARNING not in caplog.text


def test_mistral_and_hf_directories_keep_transformers_check(tmp_path, llama_ckpt):
    assert mistral_regex_flag(llama_ckpt) is False
    assert mistral_regex_flag(llama_ckpt.parent / "hf") is None  # HF config.json: transformers decides
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "MistralForCausalLM"}))
    assert mistral_regex_flag(tmp_path) is None
    (tmp_path / "config.json").write_text("[1]")
    assert mistral_regex_flag(tmp_path) is None
