"""`trtspec quantize`: the Typer command (registered by the CLI with `app.command("quantize")`).

The quantize stage is the quantization (trtspec.calib.quantize.quantize) and then, by default, its
quality report (trtspec.quality.report.report_or_warning), so the command lives here, above both:
calib stays free of the report's runtime and tuning imports. Every default and help text comes from
the options models (QuantizeStage: the quantization and its report; ConvertOptions: dtype, tp, EAGLE
limits), which are also the recipe's sections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..checkpoints.options import EAGLE_FLAGS, ConvertOptions as C, EagleOptions as E
from ..options import default, doc, flag_context, from_cli
from .command import entries
from .options import QualityReportOptions as R, QuantizeStage as Q

FLAGS = {"samples": "--calib-samples", "seq_len": "--calib-seq-len", "report.workloads": "--report-workloads",
         "report.samples": "--report-samples", "report.max_new_tokens": "--report-max-new-tokens"}


def quantize_command(
    hf: Path = typer.Option(..., "--hf", help="HF model directory (the target, or the EAGLE base)."),
    out: Path = typer.Option(..., "--out", help="Output checkpoint directory (must not exist or be empty)."),
    format: str = typer.Option(..., "--format", help=doc(Q, "format")),
    kv_cache: Optional[str] = typer.Option(default(Q, "kv_cache"), "--kv-cache", help=doc(Q, "kv_cache")),
    calib: str = typer.Option("mt-bench", "--calib", help="NAME=SOURCE[,...]. " + doc(Q, "calib")),
    calib_samples: int = typer.Option(default(Q, "samples"), "--calib-samples", help=doc(Q, "samples")),
    calib_seq_len: int = typer.Option(default(Q, "seq_len"), "--calib-seq-len", help=doc(Q, "seq_len")),
    seed: int = typer.Option(default(Q, "seed"), "--seed", help=doc(Q, "seed")),
    tp: int = typer.Option(default(C, "tp"), "--tp", help=doc(C, "tp")),
    dtype: str = typer.Option(default(C, "dtype"), "--dtype", help=doc(C, "dtype") + " Unquantized tensors."),
    eagle: Optional[Path] = typer.Option(None, "--eagle", help="SafeAILab-style EAGLE-1 head, quantized with the base."),
    draft: Optional[Path] = typer.Option(None, "--draft", help="HF draft model (draft-target pair: out/target, out/draft)."),
    draft_format: str = typer.Option(default(Q, "draft_format"), "--draft-format", help=doc(Q, "draft_format")),
    exclude: Optional[list[str]] = typer.Option(None, "--exclude", help=doc(Q, "exclude") + " Repeatable."),
    keep_sensitive: int = typer.Option(default(Q, "keep_sensitive"), "--keep-sensitive", help=doc(Q, "keep_sensitive")),
    sensitivity_samples: int = typer.Option(default(Q, "sensitivity_samples"), "--sensitivity-samples",
                                            help=doc(Q, "sensitivity_samples")),
    sensitivity_seq_len: int = typer.Option(default(Q, "sensitivity_seq_len"), "--sensitivity-seq-len",
                                            help=doc(Q, "sensitivity_seq_len")),
    awq_group_size: int = typer.Option(default(Q, "awq_group_size"), "--awq-group-size", help=doc(Q, "awq_group_size")),
    output_format: str = typer.Option(default(Q, "output_format"), "--output-format", help=doc(Q, "output_format")),
    device: str = typer.Option(default(Q, "device"), "--device", help=doc(Q, "device")),
    max_draft_len: int = typer.Option(default(E, "max_draft_len"), help=doc(E, "max_draft_len")),
    num_eagle_layers: int = typer.Option(default(E, "num_eagle_layers"), help=doc(E, "num_eagle_layers")),
    max_non_leaves: int = typer.Option(default(E, "max_non_leaves"), help=doc(E, "max_non_leaves")),
    allow_pickle: bool = typer.Option(default(C, "allow_pickle"), help=doc(C, "allow_pickle")),
    report: bool = typer.Option(default(Q, "report"), "--report/--no-report", help=doc(Q, "report")),
    report_workloads: str = typer.Option(entries(default(R, "workloads")), "--report-workloads",
                                         help="NAME=SOURCE[,...]. " + doc(R, "workloads")),
    report_samples: int = typer.Option(default(R, "samples"), "--report-samples", help=doc(R, "samples")),
    report_max_new_tokens: int = typer.Option(default(R, "max_new_tokens"), "--report-max-new-tokens",
                                              help=doc(R, "max_new_tokens")),
):
    """Quantize with ModelOpt (calibrated on workload prompts) into a TensorRT-LLM 1.2 checkpoint, or
    (--output-format hf) ModelOpt's unified HF checkpoint for the PyTorch / LLM-API backend."""
    from ..calib.quantize import quantize
    from ..workloads import parse_workload_specs

    rep = {s.name: s.source for s in parse_workload_specs(report_workloads)} if report else None
    options = from_cli(Q, FLAGS, format=format, kv_cache=kv_cache, draft_format=draft_format,
                       calib={s.name: s.source for s in parse_workload_specs(calib)}, samples=calib_samples,
                       seq_len=calib_seq_len, seed=seed, awq_group_size=awq_group_size,
                       exclude=[p for item in exclude or [] for p in item.split(",")], keep_sensitive=keep_sensitive,
                       sensitivity_samples=sensitivity_samples, sensitivity_seq_len=sensitivity_seq_len,
                       output_format=output_format, device=device,
                       report=dict(workloads=rep, samples=report_samples, max_new_tokens=report_max_new_tokens)
                       if report else False)
    conv = from_cli(C, EAGLE_FLAGS, dtype=dtype, tp=tp, allow_pickle=allow_pickle, eagle=dict(
        max_draft_len=max_draft_len, num_eagle_layers=num_eagle_layers, max_non_leaves=max_non_leaves))
    with flag_context(C), flag_context(E), flag_context(Q, FLAGS):  # library errors name convert./quantization.FIELD
        quantize(hf, out, options, conv, eagle_head=eagle, draft_hf=draft)
    typer.echo(f"wrote {out}")
    if report:
        _report(hf, out, options, conv, eagle, draft)


def _report(hf: Path, out: Path, options, conv, eagle: Path | None, draft: Path | None) -> None:
    from .render import print_report
    from .report import REPORT_DIR, report_or_warning

    rep = report_or_warning(hf, out, options.report_options(), lambda w: typer.echo(f"warning: {w}", err=True),
                            seed=options.seed, draft_hf=draft, eagle_head=eagle, convert=conv,
                            progress=lambda m: typer.echo(m, err=True))
    if rep is not None:
        print_report(rep)
        typer.echo(f"wrote {out / REPORT_DIR} (skip with --no-report)")
