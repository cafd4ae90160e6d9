"""`trtspec generate --stop-words / --bad-words` (GenerateOptions.stop_words / bad_words).

Oracle: the runtime's own `generate_batch(..., words=Words.of(...))` (itself checked against
transformers in tests/runtime/test_words.py) with the words given as token ids, and Triton's
preprocessing model for how a string word becomes token ids. The stop word is two tokens of the
plain greedy output, so that draft-target steps complete it in the middle of their accepted drafts.
"""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli_helpers import run_cli
from tiny_models import make_hf_model, save_tiny_tokenizer
from trtspec.checkpoints.convert import convert_hf
from trtspec.cli import app
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.runtime.words import Words
from trtspec.triton_repo.models.word_rules import word_list_format

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [5, 17, 300, 42, 8]
TEXT = "t5 t17 t300 t42 t8"
NEW = 16
MODELS = Path(__file__).resolve().parents[1] / "trtspec" / "triton_repo" / "models"


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    d = tmp_path_factory.mktemp("words")
    make_hf_model("llama", d / "hf", num_key_value_heads=1)
    make_hf_model("llama", d / "draft_hf", seed=4, num_key_value_heads=1, num_hidden_layers=1)
    convert_hf(d / "hf", d / "bare", dtype="float32")  # no tokenizer files
    for name in ("hf", "draft_hf"):
        save_tiny_tokenizer(d / name)
    convert_hf(d / "hf", d / "plain", dtype="float32")
    convert_hf(d / "draft_hf", d / "draft", dtype="float32")
    return d


@pytest.fixture(scope="module")
def runtime(d):
    """(the models, their greedy output of PROMPT, a two-token stop word and a one-token bad word from it)."""
    models = load_models(d / "plain")
    greedy = generate_batch(models, [PROMPT], NEW, ignore_eos=True)[0].output_ids
    assert all(t > 2 for t in greedy[4:8]), greedy  # words the tiny tokenizer writes as text
    return models, greedy, tuple(greedy[5:7]), (greedy[3],)


def text(ids) -> str:
    return " ".join(f"t{i}" for i in ids)


def cli_json(*args) -> dict:
    result = CliRunner().invoke(app, ["generate", *map(str, args), "--max-new-tokens", NEW, "--ignore-eos", "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def test_a_stop_word_ends_generate_there(d, runtime):
    models, greedy, stop, _ = runtime
    want = generate_batch(models, [PROMPT], NEW, ignore_eos=True, words=Words.of(stop=[stop]))[0].output_ids
    assert len(want) < NEW and tuple(want[-2:]) == stop
    as_text = cli_json("--ckpt", d / "plain", "--prompt", TEXT, "--stop-words", json.dumps([text(stop)]))
    as_ids = cli_json("--ckpt", d / "plain", "--prompt-ids", json.dumps(PROMPT), "--stop-words", json.dumps([stop]))
    for out in (as_text, as_ids):
        assert out["output_ids"] == want and out["finish_reason"] == "stop"
    assert cli_json("--ckpt", d / "plain", "--prompt", TEXT)["finish_reason"] == "length"


def test_a_bad_word_never_appears(d, runtime):
    models, greedy, _, bad = runtime
    assert bad[0] in greedy
    want = generate_batch(models, [PROMPT], NEW, ignore_eos=True, words=Words.of(bad=[bad]))[0].output_ids
    for words in ([text(bad)], [bad]):
        out = cli_json("--ckpt", d / "plain", "--prompt", TEXT, "--bad-words", json.dumps(words))
        assert out["output_ids"] == want and bad[0] not in out["output_ids"] and out["finish_reason"] == "length"


@pytest.mark.parametrize("k", [1, 3])
def test_draft_target_gives_greedys_tokens_under_the_same_words(d, runtime, k):
    _, _, stop, bad = runtime
    words = ("--stop-words", json.dumps([text(stop)]), "--bad-words", json.dumps([bad]))
    plain = cli_json("--ckpt", d / "plain", "--prompt", TEXT, *words)
    spec = cli_json("--ckpt", d / "plain", "--draft-ckpt", d / "draft", "--draft-len", k, "--prompt", TEXT, *words)
    assert spec["output_ids"] == plain["output_ids"] and spec["acceptance_length"] is not None
    assert spec["finish_reason"] == plain["finish_reason"] and bad[0] not in spec["output_ids"]


@pytest.mark.parametrize("ckpt, flags, message", [
    ("plain", ("--bad-words", "[[5], []]"), "bad_words[1]: empty token sequence"),
    ("plain", ("--stop-words", "[[-1]]"), "stop_words[0]: token id -1"),
    ("plain", ("--stop-words", "[5]"), "--stop-words: item 0 is 5; expected a string or a list of token ids"),
    ("plain", ("--bad-words", '[["t5"]]'), "--bad-words: item 0 is ['t5']"),
    ("plain", ("--bad-words", '{"t5": 1}'), "--bad-words: expected a JSON list"),
    ("plain", ("--stop-words", "t5"), "--stop-words: not valid JSON"),
    ("bare", ("--stop-words", '[[7], "t5"]'), "stop_words[1]: a string needs a tokenizer"),
])
def test_bad_words_input_is_refused_naming_the_field(d, capsys, ckpt, flags, message):
    code, out, err = run_cli(capsys, "generate", "--ckpt", d / ckpt, "--prompt-ids", json.dumps(PROMPT), *flags)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert message in err


def test_a_word_of_no_tokens_is_skipped_with_a_warning_as_served(d, runtime, capsys):
    """Triton's preprocessing (and upstream's `_to_word_list_format`) skips a word that encodes to
    no tokens: generate runs the other words, and says which one it skipped on one stderr line."""
    models, _, stop, _ = runtime
    want = generate_batch(models, [PROMPT], NEW, ignore_eos=True, words=Words.of(stop=[stop]))[0].output_ids
    code, out, err = run_cli(capsys, "generate", "--ckpt", d / "plain", "--prompt", TEXT, "--max-new-tokens", NEW,
                             "--ignore-eos", "--json", "--stop-words", json.dumps([text(stop), ""]))
    assert code == 0, err
    assert json.loads(out)["output_ids"] == want
    assert err.splitlines() == ["warning: stop_words[1]: '' encodes to no tokens; skipped, as Triton's "
                                "preprocessing skips it"]


def shipped_preprocessing(monkeypatch, tokenizer):
    """The repository's preprocessing model (as shipped, without trtspec) holding `tokenizer`."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils",
                        types.SimpleNamespace(TRITONSERVER_RESPONSE_COMPLETE_FINAL=1))
    monkeypatch.syspath_prepend(str(MODELS))
    for name in ("preprocessing", "trtspec_triton_common", "serving_rules", "word_rules"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    model = importlib.import_module("preprocessing").TritonPythonModel()
    model.tokenizer = tokenizer
    return model


def test_strings_are_tokenized_as_the_preprocessing_model_does(tmp_path, monkeypatch, capsys):
    """The same token ids as Triton's preprocessing gives a request's stop_words, on a tokenizer that
    adds a special token (<s>) to what it encodes unless told not to; a word of no tokens (empty, or
    blank for this whitespace-split tokenizer) is left out by both."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from trtspec.runtime.words import encode_words

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2, "t5": 5, "t6": 6}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    assert tokenizer.encode("t5 t6") == [1, 5, 6]

    model = shipped_preprocessing(monkeypatch, tokenizer)
    words = ["t5 t6", "", "t6", "  "]
    served = model._word_lists(np.array([words], dtype=object), 1).tolist()
    ids = encode_words(words, "stop_words", tokenizer)
    assert ids == [[5, 6], [6]] and served == word_list_format([ids])
    assert [line.split(":")[1] for line in capsys.readouterr().err.splitlines()] == [" stop_words[1]", " stop_words[3]"]
