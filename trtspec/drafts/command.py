"""`trtspec train-draft`: the Typer command over trtspec.drafts.train.train_draft.

Flags are TrainDraftOptions' fields (defaults and help from the model); library errors naming
`draft.train.FIELD` are re-worded with the flag."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..confidence import PM_MEANS
from ..errors import TrtspecError
from ..options import default, doc, flag_context, from_cli
from .options import TrainDraftOptions as D


def parse_k(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise TrtspecError(f"--eval-k: expected comma-separated integers like 1,2,3, got {text!r}") from None


def train_draft_command(
    target: Path = typer.Option(..., "--target", help="The target's Hugging Face model directory."),
    out: Path = typer.Option(..., "--out", help="Where the exported EAGLE-3 head goes (ModelOpt's layout)."),
    workloads: str = typer.Option(default(D, "workloads"), "--workloads", help=doc(D, "workloads")),
    samples: Optional[int] = typer.Option(default(D, "samples"), "--samples", help=doc(D, "samples")),
    heldout: int = typer.Option(default(D, "heldout"), "--heldout", help=doc(D, "heldout")),
    self_prompts: int = typer.Option(default(D, "self_prompts"), "--self-prompts", help=doc(D, "self_prompts")),
    max_new_tokens: int = typer.Option(default(D, "max_new_tokens"), "--max-new-tokens", help=doc(D, "max_new_tokens")),
    max_prompt_tokens: int = typer.Option(default(D, "max_prompt_tokens"), "--max-prompt-tokens",
                                          help=doc(D, "max_prompt_tokens")),
    regen_batch_size: int = typer.Option(default(D, "regen_batch_size"), "--regen-batch-size",
                                         help=doc(D, "regen_batch_size")),
    num_layers: int = typer.Option(default(D, "num_layers"), "--num-layers", help=doc(D, "num_layers")),
    intermediate_size: Optional[int] = typer.Option(default(D, "intermediate_size"), "--intermediate-size",
                                                    help=doc(D, "intermediate_size")),
    draft_vocab_size: Optional[int] = typer.Option(default(D, "draft_vocab_size"), "--draft-vocab-size",
                                                   help=doc(D, "draft_vocab_size")),
    ttt_steps: int = typer.Option(default(D, "ttt_steps"), "--ttt-steps", help=doc(D, "ttt_steps")),
    loss_on_prompt: bool = typer.Option(default(D, "loss_on_prompt"), "--loss-on-prompt",
                                        help=doc(D, "loss_on_prompt")),
    epochs: int = typer.Option(default(D, "epochs"), "--epochs", help=doc(D, "epochs")),
    batch_size: int = typer.Option(default(D, "batch_size"), "--batch-size", help=doc(D, "batch_size")),
    lr: float = typer.Option(default(D, "lr"), "--lr", help=doc(D, "lr")),
    eval_every: int = typer.Option(default(D, "eval_every"), "--eval-every", help=doc(D, "eval_every")),
    checkpoint_every: int = typer.Option(default(D, "checkpoint_every"), "--checkpoint-every",
                                         help=doc(D, "checkpoint_every")),
    eval_k: str = typer.Option(",".join(map(str, default(D, "eval_k"))), "--eval-k",
                               help=doc(D, "eval_k") + " Comma-separated."),
    seed: int = typer.Option(default(D, "seed"), "--seed", help=doc(D, "seed")),
    device: str = typer.Option(default(D, "device"), "--device", help=doc(D, "device")),
    threads: Optional[int] = typer.Option(default(D, "threads"), "--threads", help=doc(D, "threads")),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing, non-empty --out."),
):
    """Train an EAGLE-3 head for a target with ModelOpt on the target's own answers to workload prompts."""
    from .report import al_texts, last_heldout
    from .train import train_draft

    options = from_cli(D, workloads=workloads, samples=samples, heldout=heldout, self_prompts=self_prompts,
                       max_new_tokens=max_new_tokens,
                       max_prompt_tokens=max_prompt_tokens, regen_batch_size=regen_batch_size, num_layers=num_layers,
                       intermediate_size=intermediate_size, draft_vocab_size=draft_vocab_size, ttt_steps=ttt_steps,
                       loss_on_prompt=loss_on_prompt, epochs=epochs, batch_size=batch_size, lr=lr,
                       eval_every=eval_every, checkpoint_every=checkpoint_every, eval_k=parse_k(eval_k), seed=seed, device=device,
                       threads=threads)
    with flag_context(D, params={"target": "--target", "overwrite": "--overwrite"}):
        summary = train_draft(target, out, options, overwrite=overwrite)
    al = ", ".join(al_texts(last_heldout(summary["history"]), digits=3))
    al = f"{al} over {summary['heldout_prompts']} prompts; {PM_MEANS}" if al else "n/a"
    typer.echo(f"wrote {out} ({summary['train_tokens']} response tokens trained on; held-out {al})")
    coverage = summary["heldout_vocab_coverage"]
    if any(c < 1.0 for c in coverage.values()):
        typer.echo("draft vocabulary holds " + ", ".join(f"{w} {c:.0%}" for w, c in coverage.items())
                   + " of the held-out answer tokens (the rest can never be drafted)")
