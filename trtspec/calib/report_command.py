"""`trtspec quant-report`: the Typer command (registered by the CLI with `app.command("quant-report")`).

Light at import (no torch): the work is in trtspec.calib.report, imported when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import TrtspecError

DEFAULT_WORKLOADS = "chat=mt-bench,code=humaneval"


def quant_report_command(
    ckpt: Path = typer.Option(..., "--ckpt", help="Quantized TRT-LLM checkpoint (or pair directory)."),
    ref: Path = typer.Option(..., "--ref", help="Unquantized reference checkpoint of the same model "
                                                "(e.g. `trtspec convert --dtype float32`)."),
    draft_ckpt: Optional[Path] = typer.Option(None, "--draft-ckpt", help="The quantized pair's draft checkpoint."),
    ref_draft_ckpt: Optional[Path] = typer.Option(None, "--ref-draft-ckpt",
                                                  help="The reference pair's draft (default: --draft-ckpt)."),
    workloads: str = typer.Option(DEFAULT_WORKLOADS, "--workloads", help="NAME=SOURCE[,...] (trtspec.workloads)."),
    samples: int = typer.Option(8, "--samples", help="Held-out prompts per workload."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Reference continuation length per prompt."),
    max_k: int = typer.Option(4, "--max-k", help="Acceptance length is reported for K = 1..max-k."),
    seed: int = typer.Option(0, "--seed", help="Seed of the prompt sampling."),
    out: Path = typer.Option(..., "--out", help="Directory for quality_report.json and quality_report.png."),
):
    """Quality of a quantized checkpoint against its unquantized reference: logit RMSE, top-1 agreement,
    held-out perplexity and (with a draft) the change in acceptance length, per workload."""
    if samples < 1:
        raise TrtspecError(f"--samples: expected a positive integer, got {samples}")
    if out.exists() and not out.is_dir():
        raise TrtspecError(f"--out {out}: exists and is not a directory")
    from ..workloads import load_workloads
    from .report import JSON_NAME, PNG_NAME, print_report, quality_report

    wls = load_workloads(workloads, seed=seed)
    report = quality_report(ckpt, ref, wls, out, draft_ckpt=draft_ckpt, ref_draft_ckpt=ref_draft_ckpt,
                            max_new_tokens=max_new_tokens, samples=samples, seed=seed, max_k=max_k,
                            progress=lambda m: typer.echo(m, err=True))
    print_report(report)
    typer.echo(f"wrote {out / JSON_NAME} and {out / PNG_NAME}")
