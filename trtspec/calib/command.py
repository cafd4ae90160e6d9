"""`trtspec quantize`: the Typer command (registered by the CLI with `app.command("quantize")`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..upstream import trtllm as upstream
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
    exclude: Optional[list[str]] = typer.Option(
        None, "--exclude", help="Keep matching linears in the model dtype (repeatable; fnmatch on TRT-LLM names, "
        "e.g. 'transformer.layers.0.*' or '*.mlp.proj'); written to quantization.exclude_modules."),
    keep_sensitive: int = typer.Option(0, "--keep-sensitive", help="Also keep the N most sensitive GEMMs in the model "
                                       "dtype, measured after calibration on calibration prompts."),
    sensitivity_samples: int = typer.Option(8, "--sensitivity-samples",
                                            help="--keep-sensitive: calibration prompts the measurement runs on."),
    sensitivity_seq_len: int = typer.Option(64, "--sensitivity-seq-len",
                                            help="--keep-sensitive: tokens kept per measurement prompt."),
    awq_group_size: int = typer.Option(upstream.AWQ_DEFAULT_GROUP_SIZE, "--awq-group-size",
                                       help="w4a16_awq: input channels per scale group."),
    max_draft_len: int = typer.Option(upstream.EAGLE_DEFAULT_MAX_DRAFT_LEN, help="EAGLE: maximum number of tree nodes."),
    num_eagle_layers: int = typer.Option(upstream.EAGLE_DEFAULT_NUM_LAYERS, help="EAGLE: tree depth."),
    max_non_leaves: int = typer.Option(upstream.EAGLE_DEFAULT_MAX_NON_LEAVES, help="EAGLE: non-leaf nodes per level."),
    allow_pickle: bool = typer.Option(False, help="Allow a pytorch_model.bin EAGLE head (weights_only=True)."),
    report: bool = typer.Option(True, "--report/--no-report",
                                help="Write a quality report (vs the unquantized model) into OUT/quant_report."),
    report_workloads: str = typer.Option("chat=mt-bench", "--report-workloads",
                                         help="Workloads of the report (held-out prompts: calibration ids excluded)."),
    report_samples: int = typer.Option(4, "--report-samples", help="Report prompts per workload (kept small: "
                                       "the report re-runs both models on the CPU)."),
    report_max_new_tokens: int = typer.Option(32, "--report-max-new-tokens",
                                              help="Reference continuation length per report prompt."),
):
    """Quantize with ModelOpt (calibrated on workload prompts) into a TensorRT-LLM 1.2 checkpoint."""
    from .quantize import CalibOptions, quantize_eagle, quantize_hf, quantize_pair

    if eagle and draft:
        raise TrtspecError("--eagle and --draft are mutually exclusive")
    if draft_format != "same" and not draft:
        raise TrtspecError("--draft-format applies to a draft-target pair; give --draft too")
    if report and report_samples < 1:
        raise TrtspecError(f"--report-samples: expected a positive integer, got {report_samples}")
    mixed = bool(exclude) or keep_sensitive != 0
    if mixed and (eagle or draft):
        raise TrtspecError("--exclude/--keep-sensitive: mixed precision is written for a plain decoder only, "
                           "not with --eagle or --draft")
    opts = CalibOptions(calib=calib, samples=calib_samples, seq_len=calib_seq_len, seed=seed)
    common = dict(fmt=format, kv_cache=kv_cache, calib=opts, dtype=dtype, tp=tp, group_size=awq_group_size)
    if eagle:
        quantize_eagle(hf, eagle, out, max_draft_len=max_draft_len, num_eagle_layers=num_eagle_layers,
                       max_non_leaves=max_non_leaves, allow_pickle=allow_pickle, **common)
    elif draft:
        quantize_pair(hf, draft, out, draft_format=draft_format, **common)
    else:
        from .pipeline import KeepSensitive

        patterns = [p for item in exclude or [] for p in item.split(",")]
        quantize_hf(hf, out, exclude=patterns, keep_sensitive=KeepSensitive(keep_sensitive, sensitivity_samples,
                                                                             sensitivity_seq_len), **common)
    typer.echo(f"wrote {out}")
    if report:
        from .report import print_report, report_after_quantize

        eagle_opts = dict(max_draft_len=max_draft_len, num_eagle_layers=num_eagle_layers,
                          max_non_leaves=max_non_leaves)
        try:  # the checkpoint is complete and valid by now: a report that cannot be made is a warning
            rep = report_after_quantize(hf, out, out / "quant_report", workloads=report_workloads,
                                        samples=report_samples, max_new_tokens=report_max_new_tokens, seed=seed,
                                        draft_hf=draft, eagle_head=eagle, eagle_opts=eagle_opts,
                                        allow_pickle=allow_pickle, progress=lambda m: typer.echo(m, err=True))
        except TrtspecError as e:
            typer.echo(f"warning: quality report not written: {e}", err=True)
            return
        print_report(rep)
        typer.echo(f"wrote {out / 'quant_report'} (skip with --no-report)")
