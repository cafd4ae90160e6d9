"""`trtspec profile`: the Typer command over `trtspec.tuning.profile.profile_workloads` (imports torch on use).

Its flags' defaults and help are ProfileOptions' (the recipe's `profile:` section)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..confidence import PM_MEANS, pm_text
from ..options import default, doc, flag_context, from_cli
from ..runtime.command import COMPILE_LAYERS, DEVICE, DTYPE, FP8_GEMM
from .options import ProfileOptions as P


def profile_command(
    ckpt: Path = typer.Option(..., "--ckpt", help="Target checkpoint: EagleForCausalLM, or a pair directory."),
    workloads: str = typer.Option(..., "--workloads", help="NAME=SOURCE[,...]; SOURCE: mt-bench, humaneval, or a "
                                                            "JSONL/CSV file of prompts or chat messages."),
    max_k: int = typer.Option(default(P, "max_k"), "--max-k", help=doc(P, "max_k")),
    draft_ckpt: Optional[Path] = typer.Option(None, "--draft-ckpt", help="Draft checkpoint (draft-target)."),
    eagle3_head: Optional[Path] = typer.Option(None, "--eagle3-head", help="EAGLE-3 head directory drafting for "
                                                                           "--ckpt (profile mode eagle3)."),
    samples: Optional[int] = typer.Option(default(P, "samples"), "--samples", help=doc(P, "samples")),
    max_new_tokens: Optional[int] = typer.Option(default(P, "max_new_tokens"), "--max-new-tokens",
                                                 help=doc(P, "max_new_tokens")),
    tree_top_k: int = typer.Option(default(P, "tree_top_k"), "--tree-top-k", help=doc(P, "tree_top_k")),
    seed: int = typer.Option(default(P, "seed"), "--seed", help=doc(P, "seed")),
    categories: Optional[str] = typer.Option(default(P, "categories"), "--categories",
                                             help=doc(P, "categories") + " Comma-separated."),
    temperature: float = typer.Option(default(P, "temperature"), "--temperature", help=doc(P, "temperature")),
    top_k: int = typer.Option(default(P, "top_k"), "--top-k", help=doc(P, "top_k")),
    top_p: float = typer.Option(default(P, "top_p"), "--top-p", help=doc(P, "top_p")),
    sampling_seed: int = typer.Option(default(P, "sampling_seed"), "--sampling-seed", help=doc(P, "sampling_seed")),
    accept_rule: str = typer.Option(default(P, "accept_rule"), "--accept-rule", help=doc(P, "accept_rule")),
    samples_per_prompt: int = typer.Option(default(P, "samples_per_prompt"), "--samples-per-prompt",
                                           help=doc(P, "samples_per_prompt")),
    ngram_sizes: Optional[str] = typer.Option(default(P, "ngram_sizes"), "--ngram-sizes",
                                              help=doc(P, "ngram_sizes") + " Comma-separated."),
    fp8_gemm: str = FP8_GEMM,
    device: str = DEVICE,
    dtype: Optional[str] = DTYPE,
    batch_size: Optional[int] = typer.Option(default(P, "batch_size"), "--batch-size", help=doc(P, "batch_size")),
    compile_layers: bool = COMPILE_LAYERS,
    out: Path = typer.Option(..., "--out", help="profile.json to write."),
):
    """Measure per-workload acceptance once; every K or EAGLE tree is derived from it later."""
    from ..fsutil import check_output_file, write_text_atomic
    from ..workloads import parse_workload_specs
    from .schema import dump_json

    check_output_file(out)  # before the profiling runs, not after them
    options = from_cli(P, max_k=max_k, samples=samples, max_new_tokens=max_new_tokens, tree_top_k=tree_top_k,
                       seed=seed, categories=categories.split(",") if categories is not None else None,
                       temperature=temperature, top_k=top_k, top_p=top_p, sampling_seed=sampling_seed,
                       accept_rule=accept_rule, samples_per_prompt=samples_per_prompt,
                       ngram_sizes=ngram_sizes.split(",") if ngram_sizes is not None else None,
                       device=device, dtype=dtype, batch_size=batch_size, compile_layers=compile_layers,
                       fp8_gemm=fp8_gemm)
    specs = parse_workload_specs(workloads)
    from .profile import profile_workloads
    from .profile_partial import partial_path

    partial = partial_path(out)  # finished workloads as they finish: an interrupted run resumes from it
    with flag_context(P, params={"draft_ckpt": "--draft-ckpt", "eagle3_head": "--eagle3-head"}):
        profile = profile_workloads(ckpt, specs, options, draft_ckpt, progress=typer.echo, partial=partial,
                                    eagle3_head=eagle3_head)
    write_text_atomic(out, dump_json(profile))
    partial.unlink(missing_ok=True)
    for name, w in profile.workloads.items():
        label = w.sampling.label() if w.sampling is not None else "greedy"
        by_n = w.accept_length_by_n_k or {"": w.accept_length_by_k}  # n-gram: one line per matching size
        for n, by_k in by_n.items():
            se = (w.accept_length_se_by_n_k or {}).get(n) if n else w.accept_length_se_by_k
            al = ", ".join(f"K={k}: {v:.2f}" + pm_text((se or {}).get(k)) for k, v in by_k.items())
            size = f" n={n}" if n else ""
            typer.echo(f"{name} ({label}){size}: {w.num_samples} samples, {w.num_tokens} tokens; AL {al}")
    typer.echo(f"AL {PM_MEANS} over the profiled prompts; wrote {out}")
