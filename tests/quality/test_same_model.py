"""The quality report compares a checkpoint only with the unquantized model of its own source: same
vocabulary size is not enough (trtspec/quality/same_model.py). Tiny Llamas with one vocabulary size:
another source model, or the same model with another tokenizer, is refused naming both paths and
what differs; a checkpoint without a source record is compared with a warning."""

from __future__ import annotations

import shutil

import pytest
import torch

from tiny_models import make_hf_model, save_tiny_tokenizer
from trtspec.checkpoints.convert import convert_hf
from trtspec.errors import TrtspecError
from trtspec.quality.report import quality_report
from trtspec.quality.same_model import check_same_model
from trtspec.tokenizer import load_tokenizer

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, vocab_size=301)
PROMPTS = {"ids": [("s0", [1, 5, 6, 7, 8])]}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """a16 (float16) / a32 (float32): one source; b32: another model of the same shape and tokenizer;
    a32_tok: a32 with a tokenizer whose token 7 is another word."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("same_model")
    for name, seed in (("hf_a", 0), ("hf_b", 1)):
        make_hf_model("llama", root / name, seed=seed, **TINY)
        save_tiny_tokenizer(root / name, vocab_size=301)
    convert_hf(root / "hf_a", root / "a16", dtype="float16")
    convert_hf(root / "hf_a", root / "a32", dtype="float32")
    convert_hf(root / "hf_b", root / "b32", dtype="float32")
    shutil.copytree(root / "a32", root / "a32_tok")
    save_tiny_tokenizer(root / "a32_tok", vocab_size=301, rename={7: "seven"})
    return root


def test_another_source_model_with_the_same_vocabulary_is_refused(ckpts):
    with pytest.raises(TrtspecError, match=rf"^{ckpts / 'a16'} and {ckpts / 'b32'}: made from different models "
                                           rf"\({ckpts / 'hf_a'} vs {ckpts / 'hf_b'}: model.safetensors differs\)"):
        quality_report(ckpts / "a16", ckpts / "b32", [], None, max_new_tokens=2, prompts=PROMPTS)


def test_another_tokenizer_is_refused(ckpts):
    with pytest.raises(TrtspecError, match=rf"^{ckpts / 'a16'} and {ckpts / 'a32_tok'}: tokenizers differ at "
                                           r"token id 7: quantized 't7', reference 'seven'"):
        quality_report(ckpts / "a16", ckpts / "a32_tok", [], None, max_new_tokens=2, prompts=PROMPTS)


def test_the_same_source_passes_and_an_unrecorded_one_warns(ckpts, tmp_path, capsys):
    tok = load_tokenizer(ckpts / "a32")
    check_same_model(ckpts / "a16", ckpts / "a32", tok, tok)
    assert capsys.readouterr().err == ""
    bare = tmp_path / "bare"
    shutil.copytree(ckpts / "a32", bare)
    (bare / "trtspec.json").unlink()
    check_same_model(ckpts / "a16", bare, tok, tok)
    assert f"warning: {bare}: no source recorded in trtspec.json" in capsys.readouterr().err
