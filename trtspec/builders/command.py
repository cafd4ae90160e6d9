"""`trtspec build`: the Typer command function (the CLI registers it with `app.command("build")`).

It is a thin wrapper: options -> `make_plan` -> print the plan -> `run.build`. User mistakes raise
`TrtspecError`, which the CLI prints as one line with exit status 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from typing import TYPE_CHECKING

from .options import DEFAULT_BUILD_TIMEOUT_S, BuildOptions

if TYPE_CHECKING:  # the plan pulls in torch; keep `trtspec --help` fast by importing it on use
    from .plan import BuildPlan


def build_command(
    ckpt: Path = typer.Option(..., "--ckpt", help="TRT-LLM checkpoint directory (plain, EAGLE, or a pair dir "
                                                   "with target/ and draft/)."),
    out: Path = typer.Option(..., "--out", help="Output directory (new or empty): build_plan.json, build.sh, "
                                                 "engines/."),
    role: str = typer.Option("auto", "--role", help="auto | plain | eagle | target | draft. auto: EAGLE checkpoint "
                                                     "-> eagle, pair directory -> draft + target."),
    gpu: str = typer.Option("h100", "--gpu", help="h100 | h200 (for the memory estimate)."),
    max_batch_size: int = typer.Option(64, "--max-batch-size", help="Requests scheduled at once (EAGLE: <= 512)."),
    max_input_len: Optional[int] = typer.Option(None, "--max-input-len", help="Longest prompt (default: max-seq-len / 2)."),
    max_seq_len: Optional[int] = typer.Option(None, "--max-seq-len",
                                              help="Prompt + output tokens (default: min(8192, model positions))."),
    max_num_tokens: Optional[int] = typer.Option(
        None, "--max-num-tokens", help="Tokens per engine step (default: 8192, at least batch x (draft + 1))."),
    max_draft_len: Optional[int] = typer.Option(
        None, "--max-draft-len", help="Draft-target: most draft tokens per step (default: 8). EAGLE: the checkpoint's."),
    draft_logits: bool = typer.Option(False, "--draft-logits",
                                      help="Draft-target: build generation logits for logits-based acceptance."),
    max_beam_width: int = typer.Option(1, "--max-beam-width", help="Beam search width (speculation needs 1)."),
    gather_context_logits: bool = typer.Option(False, "--gather-context-logits",
                                               help="Return prompt logits (not with a draft length)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Write the plan and build.sh only, even if trtllm-build "
                                                          "is on PATH."),
    timeout: float = typer.Option(DEFAULT_BUILD_TIMEOUT_S, "--timeout", help="Seconds allowed per trtllm-build."),
) -> None:
    """Plan (and, with trtllm-build on PATH, run) the TensorRT-LLM 1.2 engine builds for H100."""
    from .plan import make_plan
    from .run import build

    opts = BuildOptions(role=role, gpu=gpu, max_batch_size=max_batch_size, max_input_len=max_input_len,
                        max_seq_len=max_seq_len, max_num_tokens=max_num_tokens, max_draft_len=max_draft_len,
                        draft_logits=draft_logits, max_beam_width=max_beam_width,
                        gather_context_logits=gather_context_logits)
    plan = make_plan(ckpt, opts)
    for line in describe(plan):
        typer.echo(line)
    result = build(plan, out, dry_run=dry_run, timeout=timeout,
                   on_line=lambda name, line: typer.echo(f"[{name}] {line}"))
    typer.echo(result.message)


def describe(plan: BuildPlan) -> list[str]:
    """A short human summary: builds, memory, warnings."""
    from .memory import GIB

    lines = [f"plan: {plan.role} from {plan.source} for TensorRT-LLM {plan.trtllm_version} on {plan.gpu}"]
    for b in plan.builds:
        spec = f", {b.speculative_decoding_mode} K={b.max_draft_len}" if b.speculative_decoding_mode else ""
        lines.append(f"  {b.name}: {b.architecture} {b.dtype} quant={b.quant_algo} kv={b.kv_cache_quant_algo} "
                     f"tp={b.tp}{spec}; batch {b.max_batch_size}, input {b.max_input_len}, seq {b.max_seq_len} "
                     f"(engine {b.engine_max_seq_len}), tokens {b.max_num_tokens}")
    m = plan.memory
    lines.append(f"memory per GPU: weights {m.weights_bytes / GIB:.2f} GiB, activations {m.activation_bytes / GIB:.2f} "
                 f"GiB, KV {m.kv_bytes_per_token} B/token -> about {m.kv_token_capacity} KV tokens "
                 f"({m.full_length_sequences} full-length sequences) of {m.gpu_memory_bytes / GIB:.1f} GiB")
    lines += [f"warning: {w}" for w in plan.warnings]
    lines += [f"note: {n}" for n in m.notes]
    return lines
