"""The figures of the perf report, each returned as PNG bytes (matplotlib, Agg backend).

Every function takes plain data the report already derived from results.json and either returns
PNG bytes or raises `NoPlot` with one sentence saying why the figure cannot be drawn; the report
shows that sentence in the figure's place, so partial results never abort the report.
"""

from __future__ import annotations

import io
import math

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

SPEC, BASE = "speculation", "baseline"
COLORS = {SPEC: "#1f77b4", BASE: "#7f7f7f"}


class NoPlot(Exception):
    """The figure cannot be drawn from these results; the message says why (shown in the report)."""


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _grid(n: int, width: float = 4.6, height: float = 3.4):
    """One small panel per workload, at most 3 per row (workload names differ in scale, so no
    shared y axis)."""
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(width * cols, height * rows))  # no pyplot: no global backend or figure registry
    axes = fig.subplots(rows, cols, squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _yerr(ys: list[float], cis: list) -> list[list[float]]:
    """matplotlib's [[below...], [above...]] for values and their (low, high) or None (no bar); a
    bound past its value (a percentile interval of near-identical requests, float noise) draws as 0."""
    return [[max(0.0, y - ci[0]) if ci else 0.0 for y, ci in zip(ys, cis)],
            [max(0.0, ci[1] - y) if ci else 0.0 for y, ci in zip(ys, cis)]]


def throughput(points: dict[str, dict[str, list[tuple]]], xlabel: str) -> bytes:
    """points: {workload: {"speculation"|"baseline": [(load, tokens/s, (low, high) or None), ...]}},
    each point with its 95% interval as an error bar; the baseline's markers are hollow so that a
    point it shares with speculation (no measurable difference) shows both."""
    points = {w: {k: v for k, v in s.items() if v} for w, s in points.items()}
    points = {w: s for w, s in points.items() if s}
    if not points:
        raise NoPlot("no run finished with successful requests, so there is no throughput to plot.")
    fig, axes = _grid(len(points))
    for ax, (w, series) in zip(axes, points.items()):
        for kind, pts in series.items():
            pts = sorted(pts, key=lambda p: p[0])
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            ax.errorbar(xs, ys, yerr=_yerr(ys, [p[2] for p in pts]), marker="o" if kind == SPEC else "s", ms=7,
                        capsize=3, color=COLORS[kind], mfc=COLORS[kind] if kind == SPEC else "none", label=kind)
        ax.set(title=w, xlabel=xlabel, ylabel="output tokens/s (tokens / window)")
        ax.set_xticks(sorted({p[0] for pts in series.values() for p in pts}))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _png(fig)


def cdf(samples: dict[str, dict[tuple[str, str], list[float]]], what: str) -> bytes:
    """Empirical CDFs in milliseconds: {workload: {(kind, load label): [seconds, ...]}}; colour per
    load point, solid = speculation, dashed = baseline. A CDF shows the whole distribution (median,
    tail) of a few dozen requests without binning choices."""
    samples = {w: {k: v for k, v in s.items() if v} for w, s in samples.items()}
    samples = {w: s for w, s in samples.items() if s}
    if not samples:
        raise NoPlot(f"no successful request has a {what} (ITL needs at least 2 output tokens).")
    cmap = colormaps["tab10"]
    loads = sorted({load for s in samples.values() for _, load in s}, key=_load_key)
    fig, axes = _grid(len(samples))
    for ax, (w, series) in zip(axes, samples.items()):
        for (kind, load), xs in sorted(series.items(), key=lambda kv: (_load_key(kv[0][1]), kv[0][0] != SPEC)):
            xs = np.sort(np.asarray(xs, dtype=float)) * 1e3
            ys = np.arange(1, len(xs) + 1) / len(xs)
            ax.step(xs, ys, where="post", label=f"{kind} {load}", color=cmap(loads.index(load) % 10),
                    linestyle="-" if kind == SPEC else "--")
        ax.set(title=w, xlabel=f"{what} (ms)", ylabel="fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _png(fig)


def bars(groups: dict[str, list[tuple]], ylabel: str, title: str, predicted_label: str,
         ref_line: float | None = None, why_empty: str = "nothing to plot.") -> bytes:
    """Grouped bars: {workload: [(load label, measured, predicted[, (low, high)]), ...]}; the predicted
    value is a black tick over its bar (absent when None, named `predicted_label` in the legend), the
    optional (low, high) the measured value's 95% interval as an error bar, and the measured value
    is written above whichever of the three reaches highest. `ref_line` draws a dashed horizontal
    line (1.0 for speedup: below it speculation loses)."""
    groups = {w: [b for b in bs if b[1] is not None or b[2] is not None] for w, bs in groups.items()}
    groups = {w: bs for w, bs in groups.items() if bs}
    if not groups:
        raise NoPlot(why_empty)
    width_per = max(len(bs) for bs in groups.values())
    fig = Figure(figsize=(max(5.0, 1.1 * width_per * len(groups) + 2), 3.8))
    ax = fig.subplots()
    bw = 0.8 / width_per
    cmap = colormaps["tab10"]
    loads = sorted({b[0] for bs in groups.values() for b in bs}, key=_load_key)
    predicted_labelled = False
    for gi, (w, bs) in enumerate(groups.items()):
        for bi, (load, measured, predicted, *ci) in enumerate(bs):
            x = gi + (bi - (len(bs) - 1) / 2) * bw
            color = cmap(loads.index(load) % 10)
            if measured is not None:
                ax.bar(x, measured, bw * 0.9, color=color, label=load)
                if ci and ci[0] is not None:
                    ax.errorbar([x], [measured], yerr=_yerr([measured], ci), color="black", capsize=3,
                                lw=1, label="95% interval")
                above = max(v for v in (measured, predicted, ci[0][1] if ci and ci[0] else None) if v is not None)
                ax.annotate(f"{measured:.2f}", (x, above), xytext=(0, 3), textcoords="offset points", ha="center",
                            va="bottom", fontsize=7)
            if predicted is not None:
                ax.plot([x - bw * 0.45, x + bw * 0.45], [predicted, predicted], color="black", lw=2,
                        label=None if predicted_labelled else predicted_label)
                predicted_labelled = True
    if ref_line is not None:
        ax.axhline(ref_line, color="red", ls="--", lw=1)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set(ylabel=ylabel, title=title)
    top = max(v for bs in groups.values() for b in bs for v in (*b[1:3], *(b[3] if len(b) > 3 and b[3] else ()))
              if v is not None)
    ax.set_ylim(0, max(top, ref_line or 0) * 1.3)  # headroom for the legend above the bars
    ax.grid(alpha=0.3, axis="y")
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    ax.legend(seen.values(), seen.keys(), fontsize=8, loc="upper right", ncol=min(len(seen), 4))
    return _png(fig)


def predicted_vs_measured(points: list[tuple]) -> bytes:
    """points: [(workload, load label, predicted speedup, measured speedup, (low, high) or None)],
    colour per workload, marker per load, the measured speedup's 95% interval as a vertical bar, with
    the y = x line: a point whose bar the line does not cross falls outside its interval."""
    if not points:
        raise NoPlot("no load point has both a measured speedup and a prediction.")
    fig = Figure(figsize=(5.6, 4.8))
    ax = fig.subplots()
    xs, ys = [p[2] for p in points], [p[3] for p in points]
    ends = [e for p in points if p[4] for e in p[4]]
    hi = max(xs + ys + ends + [1.0]) * 1.1
    lo = min(xs + ys + ends + [1.0]) * 0.9
    ax.plot([lo, hi], [lo, hi], color="gray", ls="--", lw=1, label="y = x")
    workloads = list(dict.fromkeys(p[0] for p in points))
    loads = sorted({p[1] for p in points}, key=_load_key)
    cmap, markers = colormaps["tab10"], "os^DvP*X"
    for w, load, x, y, ci in points:
        color = cmap(workloads.index(w) % 10)
        if ci:
            ax.errorbar([x], [y], yerr=_yerr([y], [ci]), color=color, capsize=3, lw=1, zorder=2)
        ax.scatter([x], [y], color=color, marker=markers[loads.index(load) % len(markers)],
                   s=50, zorder=3, label=f"{w} {load}")
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="predicted speedup (tuning.json, end to end)", ylabel="measured speedup",
           title="predicted vs measured speedup")
    ax.set_aspect("equal")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return _png(fig)


def _load_key(label: str):
    """'c=4' < 'c=16' numerically; request-rate labels after concurrencies."""
    kind, _, num = label.partition("=")
    try:
        return (kind != "c", float(num.split("/")[0]))
    except ValueError:
        return (True, math.inf)
