"""`trtspec profile`: the Typer command over `trtspec.tuning.profile.run_profile` (imports torch on use)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import TrtspecError


def profile_command(
    ckpt: Path = typer.Option(..., "--ckpt", help="Target checkpoint: EagleForCausalLM, or a pair directory."),
    workloads: str = typer.Option(..., "--workloads", help="NAME=SOURCE[,...]; SOURCE: mt-bench, humaneval, or a "
                                                            "JSONL/CSV file of prompts or chat messages."),
    max_k: int = typer.Option(8, "--max-k", help="Longest chain (or EAGLE depth) to measure."),
    draft_ckpt: Optional[Path] = typer.Option(None, "--draft-ckpt", help="Draft checkpoint (draft-target)."),
    samples: Optional[int] = typer.Option(None, "--samples", help="Prompts per workload (seeded sample)."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Override each workload's default."),
    tree_top_k: int = typer.Option(10, "--tree-top-k", help="EAGLE: candidate ranks recorded per depth."),
    seed: int = typer.Option(0, "--seed"),
    out: Path = typer.Option(..., "--out", help="profile.json to write."),
):
    """Measure per-workload acceptance once; every K or EAGLE tree is derived from it later."""
    from ..fsutil import write_text_atomic
    from ..workloads import load_workloads, parse_workload_specs
    from .schema import dump_json

    if max_k < 1:
        raise TrtspecError(f"--max-k: expected >= 1, got {max_k}")
    loaded = load_workloads(parse_workload_specs(workloads), seed=seed, samples=samples,
                            max_new_tokens=max_new_tokens)
    from .profile import run_profile

    profile = run_profile(ckpt, loaded, max_k, draft_ckpt, tree_top_k, progress=typer.echo)
    write_text_atomic(out, dump_json(profile))
    for name, w in profile.workloads.items():
        al = ", ".join(f"K={k}: {v:.2f}" for k, v in w.accept_length_by_k.items())
        typer.echo(f"{name}: {w.num_samples} samples, {w.num_tokens} tokens; AL {al}")
    typer.echo(f"wrote {out}")
