"""The report's figures carry the intervals the tables do: drawn as matplotlib artists (perf.plots'
PNG step is swapped for the figure itself), checked for the error bars' extents, the legend's labels
and where the value labels stand."""

from __future__ import annotations

import pytest
from matplotlib.container import ErrorbarContainer

from trtspec.perf import plots


@pytest.fixture
def figures(monkeypatch):
    monkeypatch.setattr(plots, "_png", lambda fig: fig)


def _bars_extents(ax) -> list[tuple[float, float]]:
    """(low, high) of every error bar on the axes."""
    out = []
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            for seg in c.lines[2][0].get_segments():
                out.append((min(seg[:, 1]), max(seg[:, 1])))
    return out


def test_throughput_points_carry_their_intervals_and_the_baseline_stays_visible(figures):
    fig = plots.throughput({"chat": {plots.SPEC: [(1, 14.0, (12.1, 15.8)), (4, 40.0, None)],
                                     plots.BASE: [(1, 14.1, (12.2, 15.7))]}}, "concurrency")
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert sorted(_bars_extents(ax)) == [(12.1, 15.8), (12.2, 15.7), (40.0, 40.0)]
    marks = {c.get_label(): c.lines[0] for c in ax.containers}
    assert marks[plots.BASE].get_markerfacecolor() == "none"  # hollow: a point shared with speculation shows both
    assert marks[plots.SPEC].get_markerfacecolor() != "none"


def test_bars_name_the_prediction_and_write_the_value_above_its_interval(figures):
    fig = plots.bars({"code": [("c=1", 2.05, 1.65, (1.69, 2.53))], "chat": [("c=1", 1.0, 1.0, None)]},
                     "AL", "acceptance", "predicted (tuning.json)")
    ax = fig.axes[0]
    assert "predicted (tuning.json)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert _bars_extents(ax) == [(1.69, 2.53)]
    labels = {t.get_text(): t.xy[1] for t in ax.texts}
    assert labels == {"2.05": 2.53, "1.00": 1.0}  # above the interval's top, not inside the error bar


def test_predicted_vs_measured_shows_the_measured_interval(figures):
    fig = plots.predicted_vs_measured([("edit", "c=1", 1.64, 1.53, (1.36, 1.71)), ("chat", "c=1", 1.0, 0.99, None)])
    ax = fig.axes[0]
    assert _bars_extents(ax) == [(1.36, 1.71)]
    lo, hi = ax.get_ylim()
    assert lo < 1.36 and hi > 1.71  # the whole interval is on the plot
