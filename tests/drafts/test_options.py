"""Bad train-draft options are one-line errors naming the field (library) or the flag (CLI)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cli_helpers import run_cli
from trtspec.drafts.command import train_draft_command
from trtspec.drafts.options import TrainDraftOptions
from trtspec.options import default


@pytest.mark.parametrize("field,value", [("heldout", 0), ("eval_k", [3, 3]), ("lr", 0.0), ("device", "tpu"),
                                         ("num_layers", 0), ("draft_vocab_size", 1)])
def test_a_bad_option_names_its_field(field, value):
    with pytest.raises(ValidationError) as e:
        TrainDraftOptions(**{field: value})
    assert e.value.errors()[0]["loc"][0] == field


def test_an_unknown_recipe_key_is_an_error():
    with pytest.raises(ValidationError):
        TrainDraftOptions(epoch=3)


def test_cli_defaults_are_the_options_model():
    import inspect

    params = inspect.signature(train_draft_command).parameters
    assert set(TrainDraftOptions.model_fields) <= set(params)  # every option is a flag
    for name, param in params.items():
        if name in TrainDraftOptions.model_fields:
            want = default(TrainDraftOptions, name)
            want = ",".join(map(str, want)) if name == "eval_k" else want
            assert param.default.default == want, name


def test_cli_errors_name_the_flag(capsys, tmp_path):
    code, _, err = run_cli(capsys, "train-draft", "--target", tmp_path, "--out", tmp_path / "o", "--eval-k", "0")
    assert code == 2 and err.strip().splitlines() == [err.strip()] and err.startswith("error: --eval-k:")
    code, _, err = run_cli(capsys, "train-draft", "--target", tmp_path, "--out", tmp_path / "o", "--heldout", "0")
    assert code == 2 and err.startswith("error: --heldout:")

