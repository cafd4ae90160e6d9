"""Typer commands `trtspec triton` and `trtspec serve` (registered by trtspec/cli.py).

Top-level imports stay light (typer and the standard library): protobuf, grpc, torch and
transformers are imported only by the work each command does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import TrtspecError
from ..options import default, doc, flag_context, from_cli
from .flavors import is_pytorch
from .options import ServeOptions as S, TritonOptions as T


# RepoRequest's path arguments (not options fields): library errors name them as Python does.
PORT_FLAGS = {"ports": "--http-port/--grpc-port/--metrics-port", "ports.http": "--http-port",
              "ports.grpc": "--grpc-port", "ports.metrics": "--metrics-port", "start_timeout_s": "--timeout",
              "drain_timeout_s": "--drain-timeout", "model_control": "--model-control"}
REPO_PARAMS = {"engines": "--engines", "draft_engines": "--draft-engines", "ckpt": "--ckpt",
               "draft_ckpt": "--draft-ckpt", "tokenizer": "--tokenizer", "tuning": "--tuning",
               "overwrite": "--overwrite"}


def triton_command(
    tuning: Optional[Path] = typer.Option(None, "--tuning", help="tuning.json from trtspec tune."),
    flavor: Optional[str] = typer.Option(default(T, "flavor"), "--flavor", help=doc(T, "flavor")),
    device: str = typer.Option(default(T, "device"), "--device", help=doc(T, "device")),
    out: Optional[Path] = typer.Option(None, "--out", help="Repository directory to write (new or empty)."),
    engines: Optional[Path] = typer.Option(None, "--engines", help="trtllm: engine directory, or a trtspec build "
                                                                  "output directory (engines/<name>/)."),
    draft_engines: Optional[Path] = typer.Option(None, "--draft-engines", help="trtllm, draft-target: the draft "
                                                                              "engine directory (not needed when "
                                                                              "tuning.json's drafter choice serves "
                                                                              "n-grams only)."),
    ckpt: Optional[Path] = typer.Option(None, "--ckpt", help="cpu: TRT-LLM checkpoint (EAGLE, or a target/ + draft/ "
                                                            "pair); llmapi: the HF target directory."),
    draft_ckpt: Optional[Path] = typer.Option(None, "--draft-ckpt", help="cpu: draft checkpoint; llmapi: the HF "
                                                                        "EAGLE-3 head or draft model (either: not "
                                                                        "needed when tuning.json's drafter choice "
                                                                        "serves n-grams only)."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="Tokenizer directory (default: next to the "
                                                                      "checkpoint, or the engines' build plan)."),
    max_batch_size: Optional[int] = typer.Option(default(T, "max_batch_size"), "--max-batch-size",
                                                 help=doc(T, "max_batch_size")),
    instances: int = typer.Option(default(T, "instances"), "--instances", help=doc(T, "instances")),
    gpu: str = typer.Option(default(T, "gpu"), "--gpu", help=doc(T, "gpu")),
    eagle_band: Optional[int] = typer.Option(default(T, "eagle_band"), "--eagle-band", help=doc(T, "eagle_band")),
    default_workload: Optional[str] = typer.Option(default(T, "default_workload"), "--default-workload",
                                                   help=doc(T, "default_workload")),
    tp: Optional[int] = typer.Option(default(T, "tp"), "--tp", help=doc(T, "tp")),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out directory."),
    check: Optional[Path] = typer.Option(None, "--check", help="Only validate this repository."),
):
    """Write a Triton model repository serving each workload's tuned draft length / EAGLE tree (or --check one)."""
    if check is not None:
        from .validate import check_repository

        problems = check_repository(check)
        if problems:
            for p in problems:
                typer.echo(p, err=True)
            raise TrtspecError(f"{check}: {len(problems)} problem(s), the first: {problems[0]}")
        typer.echo(f"{check}: valid")
        return
    if tuning is None:
        raise TrtspecError("--tuning: needed (or --check REPO)")
    if flavor is None:
        raise TrtspecError("--flavor: needed (trtllm, llmapi or pytorch, formerly cpu)")
    if out is None:
        raise TrtspecError("--out: needed (the repository directory to write)")
    from .repo import RepoRequest, make_repository

    with flag_context(T, params=REPO_PARAMS):
        res = make_repository(RepoRequest(tuning=tuning, flavor=flavor, out=out, engines=engines,
                                          draft_engines=draft_engines, ckpt=ckpt, draft_ckpt=draft_ckpt,
                                          tokenizer=tokenizer, max_batch_size=max_batch_size, instances=instances,
                                          gpu=gpu, eagle_band=eagle_band, default_workload=default_workload,
                                          tp=tp, device=device, overwrite=overwrite))
    for w in res.warnings:
        typer.echo(f"warning: {w}", err=True)
    typer.echo(f"wrote {res.path} ({res.flavor} flavor, {res.mode}: {', '.join(res.models)}); validated; "
               f"see {res.path / 'README.md'}")


def serve_command(
    repo: Path = typer.Argument(..., help="Repository written by trtspec triton."),
    http_port: Optional[int] = typer.Option(None, "--http-port", help="HTTP port (default 8000)."),
    grpc_port: Optional[int] = typer.Option(None, "--grpc-port", help="gRPC port (default 8001)."),
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Metrics port (default 8002)."),
    timeout: float = typer.Option(default(S, "start_timeout_s"), "--timeout", help=doc(S, "start_timeout_s")),
    log_file: Optional[Path] = typer.Option(None, "--log-file", help="cpu: server log (default: REPO.tritonserver.log "
                                                                    "next to the repository)."),
    exec_: bool = typer.Option(False, "--exec", help="trtllm/llmapi: run the container command instead of printing it."),
    image: Optional[str] = typer.Option(None, "--image", help="trtllm/llmapi: container image override."),
    drain_timeout: int = typer.Option(default(S, "drain_timeout_s"), "--drain-timeout", help=doc(S, "drain_timeout_s")),
    model_control: bool = typer.Option(default(S, "model_control"), "--model-control", help=doc(S, "model_control")),
):
    """Serve a repository: cpu flavor on the bundled tritonserver (127.0.0.1); trtllm/llmapi: the container command."""
    from . import container as c
    from . import serve as s

    ports = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
    opts = from_cli(S, PORT_FLAGS, ports=ports, start_timeout_s=timeout, drain_timeout_s=drain_timeout,
                    model_control=model_control)
    repo = Path(repo).expanduser().resolve()
    if not repo.is_dir():
        raise TrtspecError(f"{repo}: repository directory not found")
    manifest = s.read_manifest(repo)
    if is_pytorch(manifest.get("flavor")):
        try:
            with flag_context(S, PORT_FLAGS):
                code = s.serve_cpu(repo, ports, opts.start_timeout_s, log_file, typer.echo, opts.drain_timeout_s,
                                   opts.model_control)
        except s.ServerStartError as e:
            e.print_log()
            raise
        raise typer.Exit(code)
    cmd = c.container_command(repo, manifest, ports, image)
    if not exec_:
        typer.echo(c.shell_join(cmd))
        return
    s.check_servable(repo)  # on the GPU host: the engines / HF dirs the configs name are there
    if manifest.get("flavor") == "llmapi":
        c.check_llmapi_model_py(repo, manifest)
    raise typer.Exit(c.run_container(cmd))
