"""How a quality report is shown: quality_report.png (plot_report) and a rich table (print_report)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table

from ..confidence import Z95


def plot_report(report: dict, path: Path) -> Path:
    """Left: top-1 agreement per workload; middle: prompt perplexity of both models; right (with a
    draft): acceptance length against K for both pairs. Saved atomically (temp file + rename)."""
    wl = report["workloads"]
    names = list(wl)
    with_al = any(w.get("acceptance") for w in wl.values())
    fig = Figure(figsize=(14 if with_al else 9.5, 4))  # no pyplot: no global backend or figure registry
    axes = fig.subplots(1, 3 if with_al else 2)
    ax = axes[0]
    vals = [100 * (wl[n]["top1_agreement"] or 0.0) for n in names]
    bars = ax.bar(names, vals, color="tab:blue")
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set(ylabel="top-1 agreement with reference (%)", ylim=(0, 105), title="top-1 agreement")
    ax.grid(alpha=0.3, axis="y")
    ax = axes[1]
    x = range(len(names))
    ref = [wl[n]["perplexity"]["prompt"]["reference"] or 0.0 for n in names]
    qnt = [wl[n]["perplexity"]["prompt"]["quantized"] or 0.0 for n in names]
    ax.bar([i - 0.2 for i in x], ref, 0.4, label="reference")
    ax.bar([i + 0.2 for i in x], qnt, 0.4, label="quantized")
    ax.set_xticks(list(x), names)
    ax.set(ylabel="perplexity (prompt tokens)", title="held-out perplexity")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    if with_al:
        ax = axes[2]
        for n in names:
            a = wl[n].get("acceptance")
            if not a:
                continue
            ks = sorted(int(k) for k in a["reference"]["accept_length_by_k"])
            line, = ax.plot(ks, [a["reference"]["accept_length_by_k"][str(k)] for k in ks], marker="o",
                            label=f"{n} reference")
            ax.plot(ks, [a["quantized"]["accept_length_by_k"][str(k)] for k in ks], marker="s", ls="--",
                    color=line.get_color(), label=f"{n} quantized")
        ax.set(xlabel="draft length K", ylabel="acceptance length", title="acceptance length vs K")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"quantized vs reference: {Path(report['quantized']['path']).name}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _fmt(x, spec=".4f") -> str:
    return "-" if x is None else format(x, spec)


def _pm(x, se, spec: str, scale: float = 1.0) -> str:
    """`x ± 95% half-width` (the standard error over prompts; none with fewer than two prompts)."""
    if x is None:
        return "-"
    return format(scale * x, spec) + ("" if se is None else f"±{format(Z95 * scale * se, spec.lstrip('+'))}")


def report_table(report: dict):
    mixed = report["quantized"].get("mixed_precision")
    kept = f", {mixed['excluded_gemms']}/{mixed['total_gemms']} GEMMs unquantized" if mixed else ""
    t = Table(title=f"quantization quality ({report['quantized']['quantization'].get('quant_algo')}, "
                    f"KV {report['quantized']['quantization'].get('kv_cache_quant_algo')}{kept}) vs reference",
              caption="±: 95% interval over prompts")
    for col in ("workload", "samples", "held-out", "positions", "logit RMSE", "top-1 agree %", "ppl ref",
                "ppl quant", "AL ref", "AL quant", "ΔAL"):
        t.add_column(col, justify="left" if col == "workload" else "right")
    for name, w in report["workloads"].items():
        a = w.get("acceptance")
        k = str(a["max_k"]) if a else None
        ppl = w["perplexity"]["prompt"]
        t.add_row(name, str(w["num_samples"]), "yes" if w["held_out"] else "no", str(w["positions"]),
                  _fmt(w["logit_rmse"]), _pm(w["top1_agreement"], w.get("top1_agreement_se"), ".1f", 100),
                  _fmt(ppl["reference"], ".2f"), _fmt(ppl["quantized"], ".2f"),
                  _fmt(a["reference"]["accept_length_by_k"][k], ".3f") if a else "-",
                  _fmt(a["quantized"]["accept_length_by_k"][k], ".3f") if a else "-",
                  (_pm(a["delta_at_max_k"], a.get("delta_se_at_max_k"), "+.3f") + f" (K={k})") if a else "-")
    return t


def print_report(report: dict, console=None) -> None:
    (console or Console()).print(report_table(report))
