"""The `trtspec run` summary after perf: every measured number with its interval, the predicted AL
with its ±, in a table that still reads in a 100-column terminal."""

from __future__ import annotations

from rich.console import Console

from tests.perf.test_report import make_results, make_run
from trtspec.confidence import Z95
from trtspec.perf.compare import comparisons
from trtspec.perf.schema import PerfResults, dump_results
from trtspec.pipeline.summary import print_speedups


def render(tmp_path, results: PerfResults, width: int = 300) -> tuple[str, list]:
    """What `trtspec run` prints after perf, in a terminal `width` columns wide (300: nothing wraps)."""
    path = tmp_path / "results.json"
    path.write_text(dump_results(results))
    console = Console(width=width, record=True, color_system=None)
    rows = print_speedups(path, console)
    return console.export_text(), rows


def test_measured_tokens_per_s_and_als_carry_their_intervals_and_the_prediction_its_pm(tmp_path):
    """tok/s spec and base, the measured AL: value and 95% interval; predicted AL: ±1.96 SE (the
    caption says which ± it is); every cell whole within 100 columns."""
    res = make_results(workloads=("code",), concs=(1,))
    res.comparisons = comparisons(res.runs)
    c = res.comparisons[0]
    c.predicted_speedup, c.predicted_acceptance_length, c.predicted_acceptance_length_se = 1.2, 1.65, 0.13
    c.predicted_draft_len = 2
    c.predicted_step_speedup = 1.31
    narrow = render(tmp_path, res, 100)[0].splitlines()
    narrow = [line for line in narrow if not line.startswith("code c=1:")]  # the sentence soft-wraps
    assert max(len(line) for line in narrow) <= 100 and not any("…" in line for line in narrow)
    table, _ = render(tmp_path, res)
    spec, base = res.runs[0], res.runs[1]
    for ci in (spec.summary.tokens_per_s_ci, base.summary.tokens_per_s_ci):
        assert ci is None or f"[{ci.low:.1f}, {ci.high:.1f}]" in table
    al = c.acceptance_length_ci
    assert f"{c.acceptance_length:.2f}" in table and f"[{al.low:.2f}, {al.high:.2f}]" in table
    assert f"1.65 ±{Z95 * 0.13:.2f}" in table and "±: 95%" in table


def test_numbers_without_an_interval_say_unknown(tmp_path):
    """One request per run: no interval to resample, so tokens/s and AL show '±?', not a bare
    number that reads as exact; so does a predicted AL without a standard error."""
    one = PerfResults(created="x", trtspec_version="0.1", settings=make_results().settings, completed=True,
                      runs=[make_run("chat", True, 1, n=1, al=2.0), make_run("chat", False, 1, n=1)])
    one.comparisons = comparisons(one.runs)
    c = one.comparisons[0]
    c.predicted_acceptance_length, c.predicted_draft_len = 2.34, 3
    text, _ = render(tmp_path, one)
    row = next(line for line in text.splitlines() if line.startswith("│") and "chat" in line)
    assert row.count("±?") == 5, row  # tok/s spec and base, speedup, AL measured and predicted
