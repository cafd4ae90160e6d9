"""The cost presets are defined once (trtspec.tuning.gpus) and `tune --help` lists each of them."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from trtspec.tuning import gpus
from trtspec.tuning.command import tune_command
from trtspec.tuning.options import TuneOptions


def test_tune_help_lists_every_preset():
    app = typer.Typer()
    app.command("tune")(tune_command)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0
    text = re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", result.output))
    assert len(gpus.PRESETS) >= 3
    for name in gpus.PRESETS:
        assert name in TuneOptions.model_fields["cost"].description
        assert re.search(rf"\b{name}\b", text), name
