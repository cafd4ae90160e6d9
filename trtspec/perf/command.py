"""Typer command `trtspec perf` (registered by trtspec/cli.py): a thin layer over runner.run_perf.

Top-level imports stay light (typer and the standard library): grpc, tritonclient, transformers
and pydantic's models are imported only when the command runs, so `trtspec --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import TrtspecError


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
    url: str = typer.Option("127.0.0.1:8001", "--url", help="gRPC address of the server (trtspec serve)."),
    model: str = typer.Option("generate", "--model", help="Model to drive (text_input/max_tokens, streaming)."),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", help="Closed-loop load points, e.g. 1,2,4,8 "
                                                                          "(default 1 unless --request-rate)."),
    request_rate: Optional[float] = typer.Option(None, "--request-rate", help="Open loop: Poisson arrivals per second."),
    requests: Optional[int] = typer.Option(None, "--requests", help="Requests per run (default 8 x concurrency, "
                                                                   "at least 16; open loop: 10 s of arrivals)."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Seconds per run instead of --requests."),
    warmup: int = typer.Option(2, "--warmup", help="Unrecorded requests before each run."),
    baseline: bool = typer.Option(False, "--baseline", help="Also measure speculation off (speculation=false) "
                                                            "through the same repository."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds per request before it counts as a timeout."),
    connect_timeout: float = typer.Option(10.0, "--connect-timeout", help="Seconds to wait for the server and model."),
    max_tokens: int = typer.Option(256, "--max-tokens", help="max_tokens of every request."),
    tuning: Optional[Path] = typer.Option(None, "--tuning", help="tuning.json: predicted speedup next to the measured."),
    seed: int = typer.Option(0, "--seed", help="Prompt order and open-loop arrivals."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="Tokenizer for the chat template (default: "
                                                                      "the repository's preprocessing tokenizer)."),
    chat: bool = typer.Option(True, "--chat/--no-chat", help="Render prompts with the chat template, as profile does."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr."),
    processes: int = typer.Option(1, "--processes", help="Client processes sharing each run's load (for request "
                                                         "rates one Python process cannot drive)."),
    export_genai_perf: Optional[Path] = typer.Option(
        None, "--export-genai-perf", help="Also write genai-perf 0.0.16 inputs and commands reproducing these runs "
                                          "into this directory (trtspec.perf.genai_perf)."),
):
    """Load-test a served repository over gRPC streaming: TTFT, ITL, E2E, tokens/s, acceptance; --baseline speedup."""
    from .prompts import parse_workloads
    from .runner import PerfRunError, check_options, run_perf

    specs = parse_workloads(workloads)
    options = check_options(dict(
        url=url, model=model, workloads={s.name: s.source for s in specs},
        concurrency=_ints(concurrency, "--concurrency") if concurrency else [], request_rate=request_rate,
        requests=requests, duration_s=duration, warmup=warmup, baseline=baseline, timeout_s=timeout,
        connect_timeout_s=connect_timeout, max_tokens=max_tokens, seed=seed, tuning=tuning, out=out,
        tokenizer=tokenizer, chat=chat, progress=progress, processes=processes))
    if export_genai_perf is not None:
        from .genai_perf import export_for_options

        typer.echo(f"wrote {export_for_options(options, export_genai_perf)}")
    try:
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
    for c in results.comparisons:
        pred = f" (predicted {c.predicted_speedup:.2f}x)" if c.predicted_speedup is not None else ""
        point = f"c={c.concurrency}" if c.concurrency else f"r={c.request_rate:g}/s"
        typer.echo(f"speedup {c.workload} {point}: {c.speedup:.2f}x{pred}")
    _write_report(results, options)
    typer.echo(f"wrote {Path(out) / 'results.json'}")


def _write_report(results, options) -> None:
    """report.html next to results.json (trtspec.perf.report), with tuning.json's predictions when given."""
    from ..tuning.schema import load_tuning
    from .report import write_report_from

    tuning = load_tuning(options.tuning) if options.tuning else None
    path = write_report_from(results, Path(options.out) / "report.html", tuning, str(options.tuning or "") or None)
    typer.echo(f"wrote {path}")
