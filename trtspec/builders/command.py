"""`trtspec build`: the Typer command function (the CLI registers it with `app.command("build")`).

It is a thin wrapper: options -> `make_plan` -> print the plan -> `run.build`. User mistakes raise
`TrtspecError`, which the CLI prints as one line with exit status 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from typing import TYPE_CHECKING

from ..options import default, doc, flag_context, from_cli
from .options import BuildOptions as B

if TYPE_CHECKING:  # the plan pulls in torch; keep `trtspec --help` fast by importing it on use
    from .plan import BuildPlan


def build_command(
    ckpt: Path = typer.Option(..., "--ckpt", help="TRT-LLM checkpoint directory (plain, EAGLE, or a pair dir "
                                                   "with target/ and draft/)."),
    out: Path = typer.Option(..., "--out", help="Output directory (new or empty): build_plan.json, build.sh, "
                                                 "engines/."),
    role: str = typer.Option(default(B, "role"), "--role", help=doc(B, "role")),
    gpu: str = typer.Option(default(B, "gpu"), "--gpu", help=doc(B, "gpu")),
    max_batch_size: int = typer.Option(default(B, "max_batch_size"), "--max-batch-size", help=doc(B, "max_batch_size")),
    max_input_len: Optional[int] = typer.Option(default(B, "max_input_len"), "--max-input-len",
                                                help=doc(B, "max_input_len")),
    max_seq_len: Optional[int] = typer.Option(default(B, "max_seq_len"), "--max-seq-len", help=doc(B, "max_seq_len")),
    max_num_tokens: Optional[int] = typer.Option(default(B, "max_num_tokens"), "--max-num-tokens",
                                                 help=doc(B, "max_num_tokens")),
    max_draft_len: Optional[int] = typer.Option(default(B, "max_draft_len"), "--max-draft-len",
                                                help=doc(B, "max_draft_len")),
    draft_logits: bool = typer.Option(default(B, "draft_logits"), "--draft-logits", help=doc(B, "draft_logits")),
    max_beam_width: int = typer.Option(default(B, "max_beam_width"), "--max-beam-width", help=doc(B, "max_beam_width")),
    gather_context_logits: bool = typer.Option(default(B, "gather_context_logits"), "--gather-context-logits",
                                               help=doc(B, "gather_context_logits")),
    dry_run: bool = typer.Option(False, "--dry-run", help="Write the plan and build.sh only, even if trtllm-build "
                                                          "is on PATH."),
    timeout: float = typer.Option(default(B, "timeout_s"), "--timeout", help=doc(B, "timeout_s")),
) -> None:
    """Plan (and, with trtllm-build on PATH, run) the TensorRT-LLM 1.2 engine builds for H100."""
    from .plan import make_plan
    from .run import build

    opts = from_cli(B, {"timeout_s": "--timeout"}, role=role, gpu=gpu, max_batch_size=max_batch_size,
                    max_input_len=max_input_len, max_seq_len=max_seq_len, max_num_tokens=max_num_tokens,
                    max_draft_len=max_draft_len, draft_logits=draft_logits, max_beam_width=max_beam_width,
                    gather_context_logits=gather_context_logits, timeout_s=timeout)
    with flag_context(B, {"timeout_s": "--timeout"}):  # library errors name build.FIELD; say the flag
        plan = make_plan(ckpt, opts)
    for line in describe(plan):
        typer.echo(line)
    result = build(plan, out, dry_run=dry_run, timeout=opts.timeout_s,
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
