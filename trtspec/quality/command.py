"""`trtspec quant-report`: the Typer command (registered by the CLI with `app.command("quant-report")`).

Light at import (no torch): the work is in trtspec.quality.report, imported when the command runs.
Defaults and help come from QuantReportOptions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import TrtspecError
from ..options import default, doc, flag_context, from_cli
from .options import QuantReportOptions as Q


# quality_report's arguments (errors name them as Python does) -> this command's flags
REPORT_PARAMS = {"quant_ckpt": "--ckpt", "ref_ckpt": "--ref", "draft_ckpt": "--draft-ckpt",
                 "ref_draft_ckpt": "--ref-draft-ckpt", "workloads": "--workloads", "max_new_tokens": "--max-new-tokens",
                 "max_k": "--max-k"}


def entries(workloads: dict[str, str]) -> str:
    """{name: source} -> the `NAME=SOURCE,...` text of a --workloads flag."""
    return ",".join(f"{n}={s}" for n, s in workloads.items())


def quant_report_command(
    ckpt: Path = typer.Option(..., "--ckpt", help="Quantized TRT-LLM checkpoint (or pair directory)."),
    ref: Path = typer.Option(..., "--ref", help="Unquantized reference checkpoint of the same model "
                                                "(e.g. `trtspec convert --dtype float32`)."),
    draft_ckpt: Optional[Path] = typer.Option(None, "--draft-ckpt", help="The quantized pair's draft checkpoint."),
    ref_draft_ckpt: Optional[Path] = typer.Option(None, "--ref-draft-ckpt",
                                                  help="The reference pair's draft (default: --draft-ckpt)."),
    workloads: str = typer.Option(entries(default(Q, "workloads")), "--workloads",
                                  help="NAME=SOURCE[,...]. " + doc(Q, "workloads")),
    samples: int = typer.Option(default(Q, "samples"), "--samples", help=doc(Q, "samples")),
    max_new_tokens: int = typer.Option(default(Q, "max_new_tokens"), "--max-new-tokens", help=doc(Q, "max_new_tokens")),
    max_k: int = typer.Option(default(Q, "max_k"), "--max-k", help=doc(Q, "max_k")),
    seed: int = typer.Option(default(Q, "seed"), "--seed", help=doc(Q, "seed")),
    out: Path = typer.Option(..., "--out", help="Directory for quality_report.json and quality_report.png."),
):
    """Quality of a quantized checkpoint against its unquantized reference: logit RMSE, top-1 agreement,
    held-out perplexity and (with a draft) the change in acceptance length, per workload."""
    from ..workloads import load_workloads, parse_workload_specs

    specs = parse_workload_specs(workloads)
    opts = from_cli(Q, workloads={s.name: s.source for s in specs}, samples=samples, max_new_tokens=max_new_tokens,
                    max_k=max_k, seed=seed)
    if out.exists() and not out.is_dir():
        raise TrtspecError(f"--out {out}: exists and is not a directory")
    from .render import print_report
    from .report import JSON_NAME, PNG_NAME, quality_report

    wls = load_workloads(specs, seed=opts.seed)
    with flag_context(None, params=REPORT_PARAMS):
        report = quality_report(ckpt, ref, wls, out, draft_ckpt=draft_ckpt, ref_draft_ckpt=ref_draft_ckpt,
                                max_new_tokens=opts.max_new_tokens, samples=opts.samples, seed=opts.seed,
                                max_k=opts.max_k, progress=lambda m: typer.echo(m, err=True))
    print_report(report)
    typer.echo(f"wrote {out / JSON_NAME} and {out / PNG_NAME}")
