"""Plots and a summary table of a tuning result (reads only the `Tuning` model, i.e. tuning.json).

One PNG per workload, two panels:
- left: predicted acceptance length against the draft length K (draft-target) or the number of
  tree nodes (EAGLE: greedy-grown trees as a line, the top-1 chain and TRT-LLM's default tree as
  markers);
- right: predicted output tokens/s against the same axis, one line per concurrency band (log
  scale: bands differ by orders of magnitude), the chosen setting starred, K = 0 / 0 nodes being
  no speculation.
Chains come in series: the model drafter's K, and n-gram drafting's K at each matching size n
(an n-gram tuning, or a drafter choice that offered both: tuning/choose.py), one line each
(solid: the model drafter; dashed, dotted...: n-gram sizes, named in a legend of line styles), so
the comparison is visible; each AL with its 95% error bar (1.96 standard errors over the profiled
prompts, SweepPoint.acceptance_length_se); an AL whose standard error is unknown (one profiled
prompt has no spread; '±?' in the table) is a hollow marker without a bar, named in the legend, since a
bar of zero would claim an exact value (`al_points`). The unfitted cpu preset's tokens/s axis says it is a
placeholder: its ratios carry the choice, its absolute numbers do not (`tps_label`).

Under the table, every band whose chosen draft length the profile's AL standard errors cannot
separate from another K at 95% (an n-gram or tree choice: from off) is named
(select.indistinguishable): a winner by less than the noise of a few prompts is not presented as one;
nor is one whose AL has no standard error (one profiled prompt: select.se_unknown, '±?' in the table).

And `plot_al_vs_temperature`: from profiles at several temperatures (one `trtspec profile
--temperature T` each), AL of a chain of K drafts against T, one line per workload, error bars of
95% (1.96 standard errors; hollow, without a bar, where unknown): how fast acceptance falls as the traffic
gets hotter.
"""

from __future__ import annotations

import re
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator
from rich.console import Console
from rich.table import Table

from ..confidence import PM_MEANS, UNKNOWN_PM, Z95, pm_text
from .calibrate import WITHIN, within_share
from .fit import Calibration
from .gpus import PRESETS
from .schema import Profile
from .tuning_schema import BandChoice, Tuning, WorkloadTuning
from .select import indistinguishable, prompts_to_separate_from_off, se_unknown


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "workload"


def _x(band: BandChoice, eagle: bool):
    pts = [p for p in band.sweep if not eagle or p.label in ("none", "greedy")]
    return [p.num_nodes if eagle else p.draft_len for p in pts], pts


MODEL_DRAFTER = {"draft-target": "draft model", "eagle3": "EAGLE-3 head"}
STYLES = ("-", "--", ":", "-.")
PREDICTED_TPS = "predicted output tokens/s"


def chain_series(band: BandChoice, mode: str) -> dict[str, list]:
    """{label: the band's sweep points of one drafter setting, by K}: the model drafter's and
    n-gram's per matching size, each starting at K = 0 (no speculation, the same for all)."""
    off = next((p for p in band.sweep if p.draft_len == 0), None)
    out: dict[str, list] = {}
    for p in band.sweep:
        if p.draft_len:
            n = p.max_matching_ngram_size
            label = f"n-gram n={n}" if n is not None else p.label or MODEL_DRAFTER.get(mode, "draft")  # label: a head
            out.setdefault(label, []).append(p)
    head = [off] if off is not None else []
    return {k: head + sorted(v, key=lambda p: p.draft_len) for k, v in out.items()} or {"off": head}


def al_points(ax, xs: list[float], ys: list[float], ses: list[float | None], z: float, style: str = "-",
              label: str | None = None) -> bool:
    """One series of ALs: a line through all, each point with its ±z standard-error bar, or, where
    the standard error is unknown (None), a hollow marker and no bar (a bar of zero length would
    claim an exact value; SE 0 is one: the AL 1 of no speculation). Returns whether any was unknown."""
    line, = ax.plot(xs, ys, style, label=label)
    known = [i for i, se in enumerate(ses) if se is not None]
    unknown = [i for i, se in enumerate(ses) if se is None]
    if known:
        ax.errorbar([xs[i] for i in known], [ys[i] for i in known], yerr=[z * ses[i] for i in known], fmt="o",
                    color=line.get_color(), capsize=3)
    if unknown:
        ax.plot([xs[i] for i in unknown], [ys[i] for i in unknown], "o", mfc="none", color=line.get_color())
    return bool(unknown)


def unknown_se_legend(ax, why: str) -> None:
    """The legend, with an entry for al_points' hollow markers when the axes has any ('±?', as the table)."""
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], ls="", marker="o", mfc="none", color="gray"))
    labels.append(f"AL{UNKNOWN_PM}: standard error unknown ({why})")
    ax.legend(handles, labels, fontsize=8)


def _plot_chains(name: str, wt: WorkloadTuning, mode: str, ax_al, ax_tps) -> None:
    """Left: each drafter setting's AL by K with 95% error bars (1.96 standard errors over the
    profiled prompts; hollow, no bar: unknown, al_points). Right: colour = concurrency band, line
    style = drafter setting as on the left (a second legend says which)."""
    series = chain_series(wt.bands[0], mode)
    unknown = False
    for i, ((label, pts), style) in enumerate(zip(series.items(), STYLES * 8)):
        dodge = 0.06 * (i - (len(series) - 1) / 2)  # side by side, so that equal ALs' bars stay apart
        ses = [0.0 if p.draft_len == 0 else p.acceptance_length_se for p in pts]  # K = 0: AL 1 exactly
        unknown |= al_points(ax_al, [p.draft_len + dodge for p in pts], [p.acceptance_length for p in pts], ses,
                             Z95, style, label)
    if unknown:
        unknown_se_legend(ax_al, "one prompt" if wt.num_prompts == 1 else "not recorded")
    else:
        ax_al.legend(fontsize=8)
    for band in wt.bands:
        color = None
        for (label, pts), style in zip(chain_series(band, mode).items(), STYLES * 8):
            line, = ax_tps.plot([p.draft_len for p in pts], [p.tokens_per_s for p in pts], style, marker="o", ms=3,
                                color=color, label=f"concurrency {band.concurrency}" if color is None else None)
            color = line.get_color()
        ax_tps.scatter([band.draft_len], [band.tokens_per_s], marker="*", s=160, color=color, zorder=3,
                       edgecolors="black", linewidths=0.5)
    if len(series) > 1:
        styles = [Line2D([], [], color="black", ls=style, lw=1) for _, style in zip(series, STYLES * 8)]
        ax_tps.add_artist(ax_tps.legend(styles, list(series), fontsize=7, loc="best"))


def plot_workload(name: str, wt: WorkloadTuning, mode: str, path: Path, tps_label: str = PREDICTED_TPS) -> Path:
    eagle = mode == "eagle"
    xlabel = "tree nodes (eagle_choices)" if eagle else "draft length K"
    fig = Figure(figsize=(11, 4.2))  # no pyplot: no global backend or figure registry to manage
    ax_al, ax_tps = fig.subplots(1, 2)
    if not eagle:
        _plot_chains(name, wt, mode, ax_al, ax_tps)
        return _finish(fig, ax_al, ax_tps, name, xlabel, path, tps_label)
    xs, pts = _x(wt.bands[0], eagle)
    ax_al.plot(xs, [p.acceptance_length for p in pts], marker=None, label="greedy trees")
    for p in wt.bands[0].sweep:
        if p.label in ("chain", "default"):
            ax_al.scatter([p.num_nodes], [p.acceptance_length], marker="s" if p.label == "chain" else "D",
                          label=f"{p.label} tree", zorder=3)
    ax_al.legend(fontsize=8)
    for band in wt.bands:
        xs, pts = _x(band, eagle)
        line, = ax_tps.plot(xs, [p.tokens_per_s for p in pts], marker=None, ms=3,
                            label=f"concurrency {band.concurrency}")
        chosen = len(band.eagle_choices) if band.eagle_choices else 0
        ax_tps.scatter([chosen], [band.tokens_per_s], marker="*", s=160, color=line.get_color(), zorder=3,
                       edgecolors="black", linewidths=0.5)
    return _finish(fig, ax_al, ax_tps, name, xlabel, path, tps_label)


def _finish(fig, ax_al, ax_tps, name: str, xlabel: str, path: Path, tps_label: str) -> Path:
    ax_al.set(xlabel=xlabel, ylabel="acceptance length (tokens / verify step)", title=f"{name}: acceptance")
    ax_al.grid(alpha=0.3)
    for ax in (ax_al, ax_tps):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # K and node counts are whole
    ax_tps.set_yscale("log")
    ax_tps.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 200, not 2 x 10^2
    # between the decades only 2x and 5x are named: enough to read a value, few enough not to collide
    ax_tps.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
    ax_tps.tick_params(axis="y", which="minor", labelsize=7)
    ax_tps.set(xlabel=xlabel, ylabel=tps_label, title=f"{name}: throughput (* = chosen)")
    ax_tps.grid(alpha=0.3, which="both")
    ax_tps.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def tps_label(tuning: Tuning) -> str:
    """The throughput axis' label: the cpu preset unfitted (the demo's) prices steps with placeholder
    peaks, right in ratio (what the choice rests on) but not in absolute tokens/s, and says so."""
    placeholder = tuning.cost.source == "analytic" and tuning.cost.gpu.name == PRESETS["cpu"].name
    return PREDICTED_TPS + ("\n(cpu placeholder, unfitted: compare ratios)" if placeholder else "")


def write_plots(tuning: Tuning, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    label = tps_label(tuning)
    return [plot_workload(n, wt, tuning.mode, out_dir / f"{safe_name(n)}.png", label)
            for n, wt in tuning.workloads.items()]


def al_by_temperature(profiles: list[Profile], k: int | None = None
                      ) -> dict[str, list[tuple[float, float, float | None]]]:
    """{workload: [(temperature, AL of K, its standard error), ...] sorted by temperature} over the
    profiles; K default: each profile's max_k. A workload's temperature is its own sampling's, else
    the profile's; a missing standard error is None (unknown: one prompt, or not recorded)."""
    out: dict[str, list[tuple[float, float, float | None]]] = {}
    for p in profiles:
        key = str(k or p.num_speculative_tokens)
        for name, w in p.workloads.items():
            temp = (w.sampling or p.measurement_conditions.sampling)
            temp = temp.temperature if temp is not None else p.measurement_conditions.temperature
            se = (w.accept_length_se_by_k or {}).get(key)
            out.setdefault(name, []).append((temp, w.accept_length_by_k[key], se))
    return {n: sorted(v, key=lambda p: p[:2]) for n, v in out.items()}  # an SE may be None: not compared


def plot_al_vs_temperature(profiles: list[Profile], path: Path, k: int | None = None) -> Path:
    """One PNG: AL(K) against temperature per workload, 95% error bars (module docstring)."""
    fig = Figure(figsize=(6, 4.2))
    ax = fig.subplots()
    unknown = False
    for name, pts in al_by_temperature(profiles, k).items():
        unknown |= al_points(ax, [t for t, _, _ in pts], [a for _, a, _ in pts], [s for _, _, s in pts], Z95,
                             label=name)
    ax.set(xlabel="temperature", ylabel=f"acceptance length (K = {k or 'max K'})",
           title="acceptance vs temperature (95% error bars)")
    ax.grid(alpha=0.3)
    if unknown:
        unknown_se_legend(ax, "one prompt, or not recorded")
    else:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return Path(path)


def setting_text(band: BandChoice) -> str:
    """A band's served setting in a few words (the summary table, its notes, the run's tune note)."""
    if not band.speculate:
        held = band.held_off
        return "off" if held is None else f"off (held {setting_text(held)} x{held.speedup:.2f}: not clear)"
    if band.eagle_choices is not None:
        depth = max(len(c) for c in band.eagle_choices)
        return f"tree {len(band.eagle_choices)} nodes, depth {depth} ({band.profile})"
    if band.max_matching_ngram_size is not None:
        return f"ngram K={band.draft_len} n={band.max_matching_ngram_size}"
    if band.drafter is not None:  # another EAGLE-3 head (a per-workload head: tuning/choose.py)
        return f"{band.drafter} K={band.draft_len}"
    return f"K={band.draft_len}"


def al_text(band: BandChoice) -> str:
    """A band's AL and its 95% half-width (confidence.pm_text); '±?' where a speculating band has none (select.se_unknown:
    unknown, which is not zero)."""
    return f"{band.acceptance_length:.2f}" + pm_text(band.acceptance_length_se, exact=not band.speculate)


def indistinguishable_lines(tuning: Tuning) -> list[str]:
    """Per workload and band whose chosen K the AL standard errors cannot separate from other K
    (select.indistinguishable): 'chat c=1: K=3 is not distinguishable from K=2, K=4 ...'."""
    out = []
    for name, wt in tuning.workloads.items():
        for band in wt.bands:
            prompts = wt.num_prompts or wt.num_samples
            over = f"over {prompts} prompt{'s' * (prompts != 1)}"
            if band.held_off is not None:
                held = band.held_off
                out.append(f"{name} c={band.concurrency}: served off: {setting_text(held)} (x{held.speedup:.2f}, AL "
                           f"{al_text(held)} {over}) is not "
                           + ("shown clear of off: its AL has no standard error" if se_unknown(held)
                              else "distinguishable from off") + " (tune.speculate_only_if_clear)")
                continue
            if se_unknown(band):
                out.append(f"{name} c={band.concurrency}: {setting_text(band)} (x{band.speedup:.2f}) is not shown "
                           f"clear of off: its AL has no standard error ({over}; a spread needs 2 or more)")
                continue
            ks = indistinguishable(band, wt.accept_length_se_by_k)
            if ks:
                need = prompts_to_separate_from_off(band, prompts) if 0 in ks else None
                unknown = any((wt.accept_length_se_by_k or {}).get(str(k)) is None for k in ks if k)
                out.append(f"{name} c={band.concurrency}: {setting_text(band)} is not distinguishable from "
                           + ", ".join("off (K=0)" if k == 0 else f"K={k}" for k in ks)
                           + (" (AL standard errors unknown" if unknown else " (95%, AL standard errors")
                           + f" {over}; predicted "
                           + f"{band.tokens_per_s:,.0f} tok/s is not a clear winner"
                           + (f"; ~{need} prompts would separate it from off at this AL)" if need else ")"))
    return out


def summary_table(tuning: Tuning) -> Table:
    drafters = tuning.mode if tuning.choice is None else " + ".join(tuning.choice.drafters)  # all offered
    alone = "" if tuning.cost.in_flight_batching else ", each request alone: every band at batch 1"
    t = Table(title=f"trtspec tune ({drafters}, {tuning.cost.gpu.name}, {tuning.cost.source} cost{alone})",
              caption=f"AL {PM_MEANS} over the profiled prompts")
    for col, just in (("workload", "left"), ("conc.", "right"), ("setting", "left"), ("AL", "right"),
                      ("step ms", "right"), ("tok/s", "right"), ("base tok/s", "right"), ("speedup", "right")):
        t.add_column(col, justify=just)
    for name, wt in tuning.workloads.items():
        label = f"{name} ({wt.sampling.label()})" if wt.sampling is not None and not wt.sampling.greedy else name
        for band in wt.bands:
            t.add_row(label, str(band.concurrency), setting_text(band), al_text(band),
                      f"{band.step_time_s * 1e3:.2f}", f"{band.tokens_per_s:,.0f}",
                      f"{band.baseline_tokens_per_s:,.0f}", f"{band.speedup:.2f}x")
    return t


def _err(pred: float, measured: float) -> str:
    return f"{pred:,.1f} ({pred / measured - 1:+.0%})"


def calibration_table(cal: Calibration, title: str | None = None) -> Table:
    """Predicted vs measured tokens/s per workload x setting x concurrency, before and after
    calibration (tuning/calibrate.py), with the measured 95% interval; held-out points marked."""
    t = Table(title=title or f"calibration on {cal.results} (cost before: {cal.before})")
    for col, just in (("workload", "left"), ("conc.", "right"), ("setting", "left"), ("AL", "right"),
                      ("measured tok/s [95%]", "right"), ("before (err)", "right"), ("after (err)", "right"),
                      ("", "left")):
        t.add_column(col, justify=just)
    for p in cal.points:
        ci = f" [{p.tokens_per_s_ci[0]:,.1f}, {p.tokens_per_s_ci[1]:,.1f}]" if p.tokens_per_s_ci else ""
        t.add_row(p.workload, str(p.concurrency), p.label, f"{p.acceptance_length:.2f}", f"{p.tokens_per_s:,.1f}{ci}",
                  _err(p.predicted_before, p.tokens_per_s), _err(p.predicted_after, p.tokens_per_s),
                  "" if p.fitted else "held out")
    return t


def calibration_lines(cal: Calibration) -> list[str]:
    """The shares within 10% before and after, the fit's error, and the skipped points."""
    def share(after, fitted=None):
        v = within_share(cal.points, after, fitted)
        return "-" if v is None else f"{v:.0%}"
    f = cal.fit
    fitted = sum(p.fitted for p in cal.points)
    out = [f"within {WITHIN:.0%} of the measured tokens/s: before {share(False, True)}, after {share(True, True)} of "
           f"the {fitted} points the fit used (in-sample)",
           f"calibration fit: {f.num_rows} sweep points (each its mean request), rms relative request-time error "
           f"{f.rms_relative_error:.1%}, max {f.max_relative_error:.1%}; fitted {', '.join(f.fitted) or 'nothing'}"]
    with_ci = [p for p in cal.points if p.tokens_per_s_ci]  # a point of one request has no interval to judge by
    inside = [p for p in with_ci if p.tokens_per_s_ci[0] <= p.predicted_after <= p.tokens_per_s_ci[1]]
    out.append(f"after calibration {len(inside)} of the {len(with_ci)} predictions with a measured tokens/s 95% "
               "interval lie inside it (the rest differ by more than the measurement's own noise)")
    if any(not p.fitted for p in cal.points):
        out.append(f"held out: after {share(True, False)} within {WITHIN:.0%}")
    out += [f"skipped {s}" for s in cal.skipped]
    return out


def print_summary(tuning: Tuning, console: Console | None = None) -> None:
    console = console or Console()
    console.print(summary_table(tuning))
    for line in indistinguishable_lines(tuning):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    if tuning.cost.fit is not None:
        f = tuning.cost.fit
        console.print(f"cost fit: {f.num_rows} rows, rms relative error {f.rms_relative_error:.1%}, "
                      f"max {f.max_relative_error:.1%}; fitted {', '.join(f.fitted) or 'nothing'}")
    if tuning.cost.calibration is not None:
        console.print(calibration_table(tuning.cost.calibration))
        for line in calibration_lines(tuning.cost.calibration):
            console.print(line, soft_wrap=True, highlight=False, markup=False)
