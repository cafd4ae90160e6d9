"""What a training run shows: the learning curve (held-out AL(K) with its 95% error bars, and loss
against tokens trained on) as `learning_curve.png`, the one-line status of the progress bar, and the
held-out AL text the command line and the pipeline print (each AL with its ±, confidence.pm_text)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from ..confidence import Z95, pm_text
from ..tuning.report import al_points, unknown_se_legend

# why a held-out AL has no standard error (the plot's hollow markers, '±?' in text)
UNKNOWN_WHY = "< 2 prompts, or not recorded"


def last_heldout(history: list[dict]) -> dict:
    """The last history entry that measured the held-out AL ({} if none did)."""
    return next((h for h in reversed(history) if h.get("al")), {})


def al_texts(entry: dict, digits: int = 2) -> list[str]:
    """`AL(3) 1.62 ±0.05` per measured K of a history entry: its 95% half-width, or '±?' where the
    standard error is unknown (fewer than two held-out prompts with a step, or a training.json written
    before `al_se` was recorded): a bare number would read as exact."""
    se = entry.get("al_se") or {}
    return [f"AL({k}) {v:.{digits}f}{pm_text(se.get(k))}" for k, v in (entry.get("al") or {}).items()
            if v is not None]


def status(entry: dict) -> str:
    """`loss 2.31 acc 0.41 AL(3) 1.62 ±0.05` for the progress bar."""
    parts = [f"loss {entry['loss']:.3f}"] if entry.get("loss") is not None else []
    parts += [f"acc {entry['train_acc'][0]:.2f}"] if entry.get("train_acc") else []
    parts += al_texts(entry)[-1:]
    return " ".join(parts)


def plot_curve(history: list[dict], path: Path) -> Path:
    """Held-out AL(K) per K, with 95% error bars (hollow and no bar where the standard error is
    unknown: tuning.report.al_points, as the tuner's plots), and training loss against tokens trained on."""
    evals = [h for h in history if h.get("al")]
    fig = Figure(figsize=(11, 4.2))  # no pyplot: no global backend or figure registry to manage
    ax_al, ax_loss = fig.subplots(1, 2)
    unknown = False
    for k in (evals[-1]["al"] if evals else {}):
        pts = [(h["tokens"], h["al"][k], (h.get("al_se") or {}).get(k)) for h in evals if h["al"].get(k) is not None]
        unknown |= al_points(ax_al, [x for x, _, _ in pts], [y for _, y, _ in pts], [s for *_, s in pts], Z95,
                             label=f"K = {k}")
    ax_al.set(xlabel="response tokens trained on", ylabel="acceptance length (tokens / verify step)",
              title="held-out acceptance (greedy; 95% error bars)")
    ax_al.grid(alpha=0.3)
    if unknown:
        unknown_se_legend(ax_al, UNKNOWN_WHY)
    elif evals:
        ax_al.legend(fontsize=8)
    losses = [(h["tokens"], h["loss"]) for h in history if h.get("loss") is not None]
    ax_loss.plot([x for x, _ in losses], [y for _, y in losses], marker="o", ms=3)
    ax_loss.set(xlabel="response tokens trained on", ylabel="EAGLE-3 loss (ModelOpt)", title="training loss")
    ax_loss.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
