"""What a training run shows: the learning curve (held-out AL(K) and loss against tokens trained on)
as `learning_curve.png`, and the one-line status of the progress bar."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure


def status(entry: dict) -> str:
    """`loss 2.31 acc 0.41 AL(3) 1.62` for the progress bar."""
    parts = [f"loss {entry['loss']:.3f}"] if entry.get("loss") is not None else []
    parts += [f"acc {entry['train_acc'][0]:.2f}"] if entry.get("train_acc") else []
    parts += [f"AL({k}) {v:.2f}" for k, v in (entry.get("al") or {}).items() if v is not None][-1:]
    return " ".join(parts)


def plot_curve(history: list[dict], path: Path) -> Path:
    """Held-out AL(K) per K and training loss against tokens trained on."""
    evals = [h for h in history if h.get("al")]
    fig = Figure(figsize=(11, 4.2))  # no pyplot: no global backend or figure registry to manage
    ax_al, ax_loss = fig.subplots(1, 2)
    for k in (evals[-1]["al"] if evals else {}):
        pts = [(h["tokens"], h["al"][k]) for h in evals if h["al"].get(k) is not None]
        ax_al.plot([x for x, _ in pts], [y for _, y in pts], marker="o", ms=3, label=f"K = {k}")
    ax_al.set(xlabel="response tokens trained on", ylabel="acceptance length (tokens / verify step)",
              title="held-out acceptance (greedy)")
    ax_al.grid(alpha=0.3)
    if evals:
        ax_al.legend(fontsize=8)
    losses = [(h["tokens"], h["loss"]) for h in history if h.get("loss") is not None]
    ax_loss.plot([x for x, _ in losses], [y for _, y in losses], marker="o", ms=3)
    ax_loss.set(xlabel="response tokens trained on", ylabel="EAGLE-3 loss (ModelOpt)", title="training loss")
    ax_loss.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
