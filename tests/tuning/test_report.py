"""The tuning plots (trtspec/tuning/report.py) read on their plotted data, not their pixels: an AL
whose standard error is unknown (one profiled prompt) is drawn as unknown, not as an exact value."""

from __future__ import annotations

from matplotlib.figure import Figure

from trtspec.confidence import Z95
from trtspec.options import Sampling
from trtspec.perf.compare import predicted_al_pm
from trtspec.tuning import report
from trtspec.tuning.report import _plot_chains, al_by_temperature, al_text, plot_al_vs_temperature
from trtspec.tuning.select import SelectConfig, tune_draft_target
from trtspec.tuning.synthetic import chain_profile, example_cost_model


def _tuned(num_prompts: int):
    """A draft-target workload tuned from 2 samples of `num_prompts` distinct prompts (1: no AL SE)."""
    prof = chain_profile({"code": 0.6}, num_samples=2, T=64, max_k=4, seed=1)
    for i, s in enumerate(prof.workloads["code"].samples):
        s.id = f"code-{i % num_prompts}"
    return tune_draft_target(prof, example_cost_model("draft-target"), SelectConfig(concurrency_bands=[1]))


def _drawn(ax) -> tuple[set[float], set[float]]:
    """(x of every point with an error bar, x of every hollow marker) on the axes."""
    bars = {round(float(seg[0][0])) for c in ax.containers if c.has_yerr for seg in c[2][0].get_segments()}
    hollow = {round(float(x)) for line in ax.get_lines() if line.get_markerfacecolor() == "none"
              for x in line.get_xdata()}
    return bars, hollow


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_an_al_without_a_standard_error_has_no_bar_and_a_hollow_marker_named_in_the_legend():
    """One profiled prompt: AL(K) for K >= 1 has no standard error. A zero-length bar would claim an
    exact value; the plot draws those points hollow, without a bar, and its legend says '±?' (as the
    table does). K = 0 is no speculation, AL 1 exactly: its bar of zero is right."""
    tuned = _tuned(1)
    fig = Figure()
    ax_al, ax_tps = fig.subplots(1, 2)
    _plot_chains("code", tuned["code"], "draft-target", ax_al, ax_tps)
    assert _drawn(ax_al) == ({0}, {1, 2, 3, 4})
    assert "AL ±?: standard error unknown (one prompt)" in _legend(ax_al)


def test_als_with_standard_errors_keep_their_bars_and_no_unknown_marker():
    tuned = _tuned(2)
    fig = Figure()
    ax_al, ax_tps = fig.subplots(1, 2)
    _plot_chains("code", tuned["code"], "draft-target", ax_al, ax_tps)
    assert _drawn(ax_al) == ({0, 1, 2, 3, 4}, set())
    assert not any("±?" in t for t in _legend(ax_al))


def test_al_vs_temperature_keeps_an_unknown_standard_error_unknown(tmp_path):
    """A profile over one prompt has no AL standard error: None (unknown) in the points, not 0."""
    profiles = [chain_profile({"code": 0.6}, num_samples=1, T=64, max_k=4, seed=1, temperature=t,
                              accept_rule="exact_match", sampling=Sampling(temperature=t).model_dump())
                for t in (0.0, 0.7)]
    assert [se for _, _, se in al_by_temperature(profiles, k=3)["code"]] == [None, None]
    assert plot_al_vs_temperature(profiles, tmp_path / "t.png", k=3).read_bytes()[:4] == b"\x89PNG"


def test_the_tables_pm_is_the_95pct_half_width_perf_prints_for_the_same_al():
    """One '±' in trtspec: the tune table's AL ± is 1.96 standard errors, the same text perf prints
    under that predicted AL (it once printed 1 SE here and 1.96 SE there: 1.65 ±0.13 vs ±0.26)."""
    band = _tuned(2)["code"].bands[0].model_copy(update={"acceptance_length_se": 0.133})
    assert band.speculate and al_text(band) == f"{band.acceptance_length:.2f} ±0.26"
    assert al_text(band) == f"{band.acceptance_length:.2f}" + predicted_al_pm(
        band.acceptance_length, band.acceptance_length_se, band.draft_len)


def test_al_vs_temperature_bars_are_95pct(tmp_path, monkeypatch):
    """Every plot's AL error bars are 95% (1.96 SE), as the tuning plots' and perf's intervals."""
    zs = []
    real = report.al_points
    monkeypatch.setattr(report, "al_points", lambda ax, xs, ys, ses, z, *a, **k: (zs.append(z),
                                                                                   real(ax, xs, ys, ses, z, *a, **k))[1])
    profiles = [chain_profile({"code": 0.6}, num_samples=2, T=64, max_k=4, seed=1, temperature=t,
                              accept_rule="exact_match", sampling=Sampling(temperature=t).model_dump())
                for t in (0.0, 0.7)]
    plot_al_vs_temperature(profiles, tmp_path / "t.png", k=3)
    assert zs == [Z95]
