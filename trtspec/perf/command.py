"""Typer command `trtspec perf` (registered by trtspec/cli.py): a thin layer over runner.run_perf.

Top-level imports stay light (typer, pydantic and the options model): grpc, tritonclient and
transformers are imported only when the command runs. Defaults and help come from PerfOptions.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import TrtspecError
from ..options import default, doc, flag_context
from .options import PerfOptions as P


FLAGS = {"duration_s": "--duration", "timeout_s": "--timeout", "connect_timeout_s": "--connect-timeout"}


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise TrtspecError(f"{flag}: expected comma-separated integers like 1,2,4,8, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise TrtspecError(f"{flag}: expected positive integers like 1,2,4,8, got {text!r}")
    return values


def perf_command(
    workloads: List[str] = typer.Option(..., "--workloads", help="NAME=SOURCE[,NAME=SOURCE...]: mt-bench, humaneval, "
                                                                 "or a .jsonl/.csv prompt file (repeatable)."),
    out: Path = typer.Option(..., "--out", help="Directory for results.json, requests.csv, summary.csv."),
    url: str = typer.Option(default(P, "url"), "--url", help=doc(P, "url")),
    model: str = typer.Option(default(P, "model"), "--model", help=doc(P, "model")),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", help=doc(P, "concurrency")),
    request_rate: Optional[float] = typer.Option(default(P, "request_rate"), "--request-rate",
                                                 help=doc(P, "request_rate")),
    requests: Optional[int] = typer.Option(default(P, "requests"), "--requests", help=doc(P, "requests")),
    duration: Optional[float] = typer.Option(default(P, "duration_s"), "--duration", help=doc(P, "duration_s")),
    warmup: int = typer.Option(default(P, "warmup"), "--warmup", help=doc(P, "warmup")),
    baseline: bool = typer.Option(default(P, "baseline"), "--baseline", help=doc(P, "baseline")),
    timeout: float = typer.Option(default(P, "timeout_s"), "--timeout", help=doc(P, "timeout_s")),
    connect_timeout: float = typer.Option(default(P, "connect_timeout_s"), "--connect-timeout",
                                          help=doc(P, "connect_timeout_s")),
    max_tokens: int = typer.Option(default(P, "max_tokens"), "--max-tokens", help=doc(P, "max_tokens")),
    tuning: Optional[Path] = typer.Option(default(P, "tuning"), "--tuning", help=doc(P, "tuning")),
    seed: int = typer.Option(default(P, "seed"), "--seed", help=doc(P, "seed")),
    temperature: Optional[float] = typer.Option(default(P, "temperature"), "--temperature",
                                                help=doc(P, "temperature")),
    top_k: Optional[int] = typer.Option(default(P, "top_k"), "--top-k", help=doc(P, "top_k")),
    top_p: Optional[float] = typer.Option(default(P, "top_p"), "--top-p", help=doc(P, "top_p")),
    tokenizer: Optional[Path] = typer.Option(default(P, "tokenizer"), "--tokenizer", help=doc(P, "tokenizer")),
    chat: bool = typer.Option(default(P, "chat"), "--chat/--no-chat", help=doc(P, "chat")),
    progress: bool = typer.Option(default(P, "progress"), "--progress/--no-progress", help=doc(P, "progress")),
    processes: int = typer.Option(default(P, "processes"), "--processes", help=doc(P, "processes")),
    blocks: int = typer.Option(default(P, "blocks"), "--blocks", help=doc(P, "blocks")),
    sweep: bool = typer.Option(default(P, "sweep"), "--sweep", help=doc(P, "sweep")),
    export_genai_perf: Optional[Path] = typer.Option(
        None, "--export-genai-perf", help="Also write genai-perf 0.0.16 inputs and commands reproducing these runs "
                                          "into this directory (trtspec.perf.genai_perf)."),
):
    """Load-test a served repository over gRPC streaming: TTFT, ITL, E2E, tokens/s, acceptance; --baseline speedup."""
    from .prompts import parse_workloads
    from .compare import speedup_line
    from .runner import PerfRunError, check_options, run_perf

    specs = parse_workloads(workloads)
    with flag_context(P, FLAGS):
        options = check_options(dict(
            url=url, model=model, workloads={s.name: s.source for s in specs},
            concurrency=_ints(concurrency, "--concurrency") if concurrency else [], request_rate=request_rate,
            requests=requests, duration_s=duration, warmup=warmup, baseline=baseline, timeout_s=timeout,
            connect_timeout_s=connect_timeout, max_tokens=max_tokens, seed=seed, temperature=temperature,
            top_k=top_k, top_p=top_p, tuning=tuning, out=out,
            tokenizer=tokenizer, chat=chat, progress=progress, processes=processes, blocks=blocks, sweep=sweep))
    if export_genai_perf is not None:
        from .genai_perf import export_for_options

        try:
            with flag_context(P, FLAGS, params={"tokenizer": "--tokenizer"}):
                script = export_for_options(options, export_genai_perf)
        except TrtspecError as e:  # the library names the field; say which flag's work failed
            raise TrtspecError(f"--export-genai-perf: {e}") from None
        typer.echo(f"wrote {script}")
    try:
        with flag_context(P, FLAGS):
            results = run_perf(options)
    except PerfRunError as e:  # what was measured still gets its report
        _write_report(e.results, options)
        raise
    for run in results.runs:
        s = run.summary
        point = f"c={run.concurrency}" if run.concurrency else f"r={run.request_rate:g}/s"
        al = f"{s.acceptance_length:.2f}" if s.acceptance_length else "-"
        ttft = f"{s.ttft_s.p50 * 1e3:.1f}" if s.ttft_s.p50 is not None else "-"
        typer.echo(f"{run.workload:<12} {'spec' if run.speculation else 'base'} {point:<8} "
                   f"{s.requests_per_s:8.2f} req/s {s.output_tokens_per_s:9.1f} tok/s  AL {al}  "
                   f"TTFT p50 {ttft} ms  errors {s.errors} timeouts {s.timeouts}")
    if results.sweep is not None:
        from .sweep import sweep_lines

        for line in sweep_lines(results.sweep):
            typer.echo(line)
    for c in results.comparisons:
        typer.echo(f"speedup {speedup_line(c)}")
        point = f"c={c.concurrency}" if c.concurrency else f"r={c.request_rate:g}/s"
        if c.parity is not None:
            q = c.parity
            typer.echo(f"parity {c.workload} {point} ({c.sampling}): lengths KS p={q.lengths_p:.3g}, words "
                       f"chi2 p={q.words_p:.3g}, identical outputs {q.identical_outputs:.0%} -> "
                       f"{'consistent' if q.consistent else 'DIFFERENT distributions'}")
    _write_report(results, options)
    typer.echo(f"wrote {Path(out) / 'results.json'}")


def _write_report(results, options) -> None:
    """report.html next to results.json (trtspec.perf.report), with tuning.json's predictions when given."""
    from ..tuning.tuning_schema import load_tuning
    from .report import write_report_from

    tuning = load_tuning(options.tuning) if options.tuning else None
    path = write_report_from(results, Path(options.out) / "report.html", tuning, str(options.tuning or "") or None)
    typer.echo(f"wrote {path}")
