"""The held-out AL comes with its standard error: the profile's (tuning.acceptance, clustered by
prompt), recorded in training.json beside the AL, printed as its 95% ± and drawn as error bars; a
training.json from before it was recorded still loads (its ALs print '±?')."""

from __future__ import annotations

import json

import pytest

from cli_helpers import run_cli
from tiny_models import tiny_draft_target
from trtspec.confidence import Z95
from trtspec.drafts import heldout, report
from trtspec.pipeline.train_stage import heldout_note
from trtspec.tuning.acceptance import summarize

pytestmark = pytest.mark.usefixtures("one_torch_thread")

OLD_HISTORY = [{"step": 0, "tokens": 0, "loss": None, "train_acc": None, "al": {"1": 1.1, "3": 1.2}},
               {"step": 4, "tokens": 64, "loss": 9.5, "train_acc": [0.2], "al": {"1": 1.15, "3": 1.23}}]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTSPEC_CACHE", str(tmp_path / "cache"))


def test_the_history_records_the_profiles_standard_error_and_the_command_prints_its_95_pm(tmp_path, capsys,
                                                                                         monkeypatch):
    """The last evaluation's `al_se` is what tuning.acceptance.summarize (the profile's rule) gives
    on the match lengths that evaluation replayed, clustered by prompt; `train-draft` prints it."""
    target, prompts = tiny_draft_target(tmp_path)
    replayed, real = [], heldout.match_lengths

    def spy(model, prompt, response, depth):
        replayed.append((tuple(prompt), real(model, prompt, response, depth)))
        return replayed[-1][1]

    monkeypatch.setattr(heldout, "match_lengths", spy)
    code, out, _ = run_cli(capsys, "train-draft", "--target", target, "--out", tmp_path / "head",
                           "--workloads", f"p={prompts}", "--heldout", "4", "--max-new-tokens", "16",
                           "--epochs", "6", "--lr", "3e-3", "--batch-size", "4", "--eval-every", "100",
                           "--draft-vocab-size", "256", "--device", "cpu", "--eval-k", "1,3", "--threads", "1")
    assert code == 0
    last = json.loads((tmp_path / "head" / "training.json").read_text())["history"][-1]
    ids, samples = zip(*replayed[-4:])  # the last evaluation: one replay per held-out prompt
    expected = summarize("eagle3", list(samples), 3, clusters=list(ids))
    for k in ("1", "3"):
        assert last["al"][k] == pytest.approx(expected["accept_length_by_k"][k], rel=1e-12)
        assert last["al_se"][k] and last["al"][k] > 1.0  # spread to measure: the check has teeth
        assert last["al_se"][k] == pytest.approx(expected["accept_length_se_by_k"][k], rel=1e-12)
    al, se = last["al"]["3"], last["al_se"]["3"]
    assert f"AL(3) {al:.3f} ±{Z95 * se:.2f}" in out
    assert f"AL(3) {al:.2f} ±{Z95 * se:.2f}" in heldout_note(tmp_path / "head")


def test_an_old_training_json_without_standard_errors_loads_and_prints_unknown(tmp_path):
    head = tmp_path / "head"
    head.mkdir()
    (head / "training.json").write_text(json.dumps({"history": OLD_HISTORY}))
    assert heldout_note(head) == ", held-out AL(3) 1.23 ±?"
    assert report.status(OLD_HISTORY[-1]) == "loss 9.500 acc 0.20 AL(3) 1.23 ±?"
    assert report.plot_curve(OLD_HISTORY, tmp_path / "curve.png").stat().st_size > 0


def test_the_curve_draws_error_bars_where_known_and_hollow_markers_where_not(tmp_path, monkeypatch):
    drawn, legends, real = [], [], report.al_points
    monkeypatch.setattr(report, "al_points", lambda ax, xs, ys, ses, z, **kw: drawn.append((ys, ses, z))
                        or real(ax, xs, ys, ses, z, **kw))
    monkeypatch.setattr(report, "unknown_se_legend", lambda ax, why: legends.append(why))
    history = [OLD_HISTORY[0], {**OLD_HISTORY[1], "al_se": {"1": 0.02, "3": 0.04}}]
    report.plot_curve(history, tmp_path / "curve.png")
    assert drawn == [([1.1, 1.15], [None, 0.02], Z95), ([1.2, 1.23], [None, 0.04], Z95)]
    assert legends  # the hollow markers are explained
