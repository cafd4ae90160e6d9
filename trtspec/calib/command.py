"""`trtspec quantize`: the Typer command (registered by the CLI with `app.command("quantize")`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import upstream
from ..errors import TrtspecError


def quantize_command(
    hf: Path = typer.Option(..., "--hf", help="HF model directory (the target, or the EAGLE base)."),
    out: Path = typer.Option(..., "--out", help="Output checkpoint directory (must not exist or be empty)."),
    format: str = typer.Option(..., "--format", help="fp8 | int8_sq | w8a16 | w4a16_awq (all run on H100)."),
    kv_cache: Optional[str] = typer.Option(None, "--kv-cache", help="fp8 | int8: quantize the KV cache too."),
    calib: str = typer.Option("mt-bench", "--calib",
                              help="Calibration workloads, NAME=SOURCE[,...]: mt-bench, humaneval or a .jsonl/.csv."),
    calib_samples: int = typer.Option(512, "--calib-samples", help="Prompts in all, split evenly over the sources."),
    calib_seq_len: int = typer.Option(512, "--calib-seq-len", help="Tokens kept per prompt (its first ones)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the prompt sampling."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size (number of rank files)."),
    dtype: str = typer.Option("auto", "--dtype", help="float16 | bfloat16 | float32 | auto: unquantized tensors."),
    eagle: Optional[Path] = typer.Option(None, "--eagle", help="SafeAILab-style EAGLE-1 head, quantized with the base."),
    draft: Optional[Path] = typer.Option(None, "--draft", help="HF draft model (draft-target pair: out/target, out/draft)."),
    draft_format: str = typer.Option("same", "--draft-format",
                                     help="The draft's format: same (as --format), one of the formats, or none."),
    awq_group_size: int = typer.Option(upstream.AWQ_DEFAULT_GROUP_SIZE, "--awq-group-size",
                                       help="w4a16_awq: input channels per scale group."),
    max_draft_len: int = typer.Option(upstream.EAGLE_DEFAULT_MAX_DRAFT_LEN, help="EAGLE: maximum number of tree nodes."),
    num_eagle_layers: int = typer.Option(upstream.EAGLE_DEFAULT_NUM_LAYERS, help="EAGLE: tree depth."),
    max_non_leaves: int = typer.Option(upstream.EAGLE_DEFAULT_MAX_NON_LEAVES, help="EAGLE: non-leaf nodes per level."),
    allow_pickle: bool = typer.Option(False, help="Allow a pytorch_model.bin EAGLE head (weights_only=True)."),
):
    """Quantize with ModelOpt (calibrated on workload prompts) into a TensorRT-LLM 1.2 checkpoint."""
    from .quantize import CalibOptions, quantize_eagle, quantize_hf, quantize_pair

    if eagle and draft:
        raise TrtspecError("--eagle and --draft are mutually exclusive")
    if draft_format != "same" and not draft:
        raise TrtspecError("--draft-format applies to a draft-target pair; give --draft too")
    opts = CalibOptions(calib=calib, samples=calib_samples, seq_len=calib_seq_len, seed=seed)
    common = dict(fmt=format, kv_cache=kv_cache, calib=opts, dtype=dtype, tp=tp, group_size=awq_group_size)
    if eagle:
        quantize_eagle(hf, eagle, out, max_draft_len=max_draft_len, num_eagle_layers=num_eagle_layers,
                       max_non_leaves=max_non_leaves, allow_pickle=allow_pickle, **common)
    elif draft:
        quantize_pair(hf, draft, out, draft_format=draft_format, **common)
    else:
        quantize_hf(hf, out, **common)
    typer.echo(f"wrote {out}")
