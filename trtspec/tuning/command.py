"""`trtspec tune` (profile + cost model -> tuning.json + plots) and `trtspec measure-cost`.

Typer-ready command functions; trtspec/cli.py registers them:

    app.command("tune")(tune_command)
    app.command("measure-cost")(measure_cost_command)

The stage itself is a library call (trtspec.tuning.tune.tune_stage); this layer parses the flags,
whose defaults and help come from TuneOptions / MeasureConfig, and re-words the library's
`tune.FIELD:` errors with the flag names.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import TrtspecError
from ..fsutil import atomic_dir, check_output_file, write_text_atomic
from ..options import default, doc, flag_context, from_cli
from ..runtime.command import COMPILE_LAYERS, DEVICE, DTYPE, FP8_GEMM
from .options import MeasureConfig, TuneOptions


def parse_ints(text: str, flag: str = "--concurrency-bands") -> list[int]:
    """'1,4,16' -> [1, 4, 16]: distinct positive integers, sorted."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values) or len(set(values)) != len(values):
        raise TrtspecError(f"{flag}: expected distinct positive integers like 1,4,16,64, got {text!r}")
    return sorted(values)


def ints_text(values: list[int]) -> str:
    return ",".join(map(str, values))


T, M = TuneOptions, MeasureConfig



def tune_command(
    profile: List[Path] = typer.Option(..., "--profile", help="profile.json from the profiler; repeat it to offer "
                                                               "several drafters (one profile each: a draft model "
                                                               "or EAGLE-3 head, n-gram) and choose per workload."),
    cost: str = typer.Option(default(T, "cost"), "--cost", help=doc(T, "cost")),
    target_ckpt: Optional[Path] = typer.Option(
        None, "--target-ckpt", help="Target (or EAGLE) checkpoint; default: the one the profile names."),
    draft_ckpt: Optional[Path] = typer.Option(
        None, "--draft-ckpt", help="Draft checkpoint (draft-target); default: the one the profile names."),
    concurrency_bands: str = typer.Option(ints_text(default(T, "concurrency_bands")), "--concurrency-bands",
                                          help=doc(T, "concurrency_bands") + " Comma-separated."),
    eagle_node_budget: Optional[int] = typer.Option(default(T, "eagle_node_budget"), "--eagle-node-budget",
                                                    help=doc(T, "eagle_node_budget")),
    max_profiles: Optional[int] = typer.Option(default(T, "max_profiles"), "--max-profiles",
                                               help=doc(T, "max_profiles")),
    context_tokens: Optional[int] = typer.Option(default(T, "context_tokens"), "--context-tokens",
                                                 help=doc(T, "context_tokens")),
    memory_budget_gib: Optional[float] = typer.Option(default(T, "memory_budget_gib"), "--memory-budget-gib",
                                                      help=doc(T, "memory_budget_gib")),
    separate_instances: bool = typer.Option(default(T, "separate_instances"), "--separate-instances",
                                            help=doc(T, "separate_instances")),
    calibrate: Optional[Path] = typer.Option(default(T, "calibrate"), "--calibrate", help=doc(T, "calibrate")),
    speculate_only_if_clear: bool = typer.Option(default(T, "speculate_only_if_clear"), "--speculate-only-if-clear",
                                                 help=doc(T, "speculate_only_if_clear")),
    in_flight_batching: bool = typer.Option(default(T, "in_flight_batching"),
                                            "--in-flight-batching/--no-in-flight-batching",
                                            help=doc(T, "in_flight_batching")),
    out: Path = typer.Option(Path("tuning.json"), "--out", help="Where to write tuning.json."),
    plots: Optional[Path] = typer.Option(
        None, "--plots", help="PNG directory (default: <out stem>_plots next to --out)."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the PNG plots."),
):
    """Pick the draft length / EAGLE tree per workload and concurrency band that maximises predicted tokens/s."""
    from .report import print_summary, write_plots
    from .schema import dump_json  # lazy: start-up
    from .tune import tune_drafters  # lazy: start-up

    if out.is_dir():
        raise TrtspecError(f"--out: {out} is a directory (expected the path of tuning.json)")
    plots = plots if plots is not None else out.parent / f"{out.stem}_plots"
    if not no_plots and plots.exists() and (not plots.is_dir() or any(
            f.suffix != ".png" or not f.is_file() for f in plots.iterdir())):
        raise TrtspecError(f"--plots: {plots} is not a directory of PNG files; give a new or empty directory")
    options = from_cli(T, cost=cost, concurrency_bands=parse_ints(concurrency_bands),
                       eagle_node_budget=eagle_node_budget, max_profiles=max_profiles, context_tokens=context_tokens,
                       memory_budget_gib=memory_budget_gib, separate_instances=separate_instances, calibrate=calibrate,
                       speculate_only_if_clear=speculate_only_if_clear, in_flight_batching=in_flight_batching)
    with flag_context(T.section):
        tuning, each = tune_drafters(profile, options, target_ckpt, draft_ckpt)
    if len(each) > 1:  # each drafter's own tuning next to the choice, for comparison
        for mode, t in each.items():
            write_text_atomic(out.with_name(f"{out.stem}-{mode}.json"), dump_json(t))
            typer.echo(f"wrote {out.with_name(f'{out.stem}-{mode}.json')}")
    write_text_atomic(out, dump_json(tuning))
    print_summary(tuning)
    typer.echo(f"wrote {out}")
    if not no_plots:
        with atomic_dir(plots, overwrite=True) as tmp:  # a previous run's plots are replaced whole
            names = [p.name for p in write_plots(tuning, tmp)]
        for name in names:
            typer.echo(f"wrote {plots / name}")


def measure_cost_command(
    target_ckpt: Path = typer.Option(..., "--target-ckpt", help="Target (or EAGLE) checkpoint to time."),
    draft_ckpt: Optional[Path] = typer.Option(None, "--draft-ckpt", help="Draft checkpoint to time as well."),
    batches: str = typer.Option(ints_text(default(M, "batches")), "--batches", help=doc(M, "batches") +
                                " Comma-separated."),
    num_tokens: str = typer.Option(ints_text(default(M, "num_tokens")), "--num-tokens", help=doc(M, "num_tokens") +
                                   " Comma-separated."),
    context: int = typer.Option(default(M, "context"), "--context", help=doc(M, "context")),
    repeats: int = typer.Option(default(M, "repeats"), "--repeats", help=doc(M, "repeats")),
    device: str = DEVICE,
    dtype: Optional[str] = DTYPE,
    compile_layers: bool = COMPILE_LAYERS,
    fp8_gemm: str = FP8_GEMM,
    out: Path = typer.Option(Path("cost_table.json"), "--out", help="Where to write the cost table."),
):
    """Time the PyTorch runtime's forwards on this machine into a cost table for `trtspec tune --cost FILE`."""
    from .measure import measure_runtime

    check_output_file(out)  # before the timing runs, not after them
    cfg = from_cli(M, batches=parse_ints(batches, "--batches"), num_tokens=parse_ints(num_tokens, "--num-tokens"),
                   context=context, repeats=repeats, device=device, dtype=dtype, compile_layers=compile_layers,
                   fp8_gemm=fp8_gemm)
    with flag_context(M):  # measure_cost.device: ... -> --device: ...
        table = measure_runtime(target_ckpt, draft_ckpt, cfg)
    write_text_atomic(out, table.model_dump_json(by_alias=True, indent=2) + "\n")
    typer.echo(f"wrote {out} ({len(table.rows)} rows)")
