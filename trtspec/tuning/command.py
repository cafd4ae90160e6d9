"""`trtspec tune` (profile + cost model -> tuning.json + plots) and `trtspec measure-cost`.

Typer-ready command functions; trtspec/cli.py registers them:

    app.command("tune")(tune_command)
    app.command("measure-cost")(measure_cost_command)

`run_tune` is the same stage as a plain function. The analytic cost model needs the networks'
sizes and quantization: from --target-ckpt / --draft-ckpt, else from the checkpoint directories
the profile's measurement_conditions name (target, draft).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import __version__
from ..upstream import trtllm as upstream
from ..errors import TrtspecError
from ..fsutil import atomic_dir, sha256_file, write_text_atomic
from .cost import PRESETS, CostModel, ModelShape, gpu_preset, shapes_from_checkpoint
from .fit import fit_gpu, load_cost_table
from .schema import CostInfo, EagleLimits, Profile, Tuning, dump_json, load_profile
from .select import SelectConfig, tune_draft_target, tune_eagle


def parse_ints(text: str, flag: str = "--concurrency-bands") -> list[int]:
    """'1,4,16' -> [1, 4, 16]: distinct positive integers, sorted."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values) or len(set(values)) != len(values):
        raise TrtspecError(f"{flag}: expected distinct positive integers like 1,4,16,64, got {text!r}")
    return sorted(values)


def _ckpt(given: Path | None, recorded: str | None, what: str, base: Path) -> Path | None:
    """The checkpoint given on the command line, else the one the profile recorded (as written, or
    relative to the profile's directory)."""
    if given is not None:
        if not (Path(given) / "config.json").is_file():
            raise TrtspecError(f"--{what}-ckpt: {given} is not a TRT-LLM checkpoint directory (no config.json)")
        return Path(given)
    for candidate in ([Path(recorded), base / recorded] if recorded else []):
        if (candidate / "config.json").is_file():
            return candidate
    return None


def resolve_shapes(profile: Profile, target_ckpt: Path | None, draft_ckpt: Path | None, base: Path = Path(".")
                   ) -> tuple[dict[str, ModelShape], dict]:
    """{role: shape} for the profile's mode, and the target checkpoint's config (EAGLE limits)."""
    cond = profile.measurement_conditions
    target = _ckpt(target_ckpt, cond.target, "target", base)
    if target is None:
        raise TrtspecError(f"--target-ckpt: needed for the cost model (the profile's measurement_conditions.target "
                           f"{cond.target!r} is not a checkpoint directory here)")
    from ..checkpoints.trtllm_ckpt import load_checkpoint

    shapes = shapes_from_checkpoint(target, "target")
    config = load_checkpoint(target).config
    if profile.mode == "eagle" and "eagle" not in shapes:
        raise TrtspecError(f"--target-ckpt: {target} is not an EagleForCausalLM checkpoint, but the profile is eagle")
    if profile.mode == "draft-target":
        draft = _ckpt(draft_ckpt, cond.draft, "draft", base)
        if draft is None:
            raise TrtspecError(f"--draft-ckpt: needed for a draft-target profile (measurement_conditions.draft "
                               f"{cond.draft!r} is not a checkpoint directory here)")
        shapes["draft"] = shapes_from_checkpoint(draft, "draft")["draft"]
    return shapes, config


def build_cost(cost: str, shapes: dict[str, ModelShape], mode: str) -> tuple[CostModel, CostInfo]:
    draft = shapes.get("eagle" if mode == "eagle" else "draft")
    if cost in PRESETS:
        gpu = gpu_preset(cost)
        return CostModel(gpu=gpu, target=shapes["target"], draft=draft), CostInfo(
            source="analytic", gpu=gpu, target=shapes["target"], draft=draft)
    path = Path(cost)
    if not path.is_file():
        raise TrtspecError(f"--cost: {cost!r} is neither a GPU ({', '.join(PRESETS)}) nor a cost table file")
    table = load_cost_table(path)
    gpu, report = fit_gpu(table, shapes)
    return CostModel(gpu=gpu, target=shapes["target"], draft=draft), CostInfo(
        source="measured", table=str(path), gpu=gpu, fit=report, target=shapes["target"], draft=draft)


def eagle_limits(profile: Profile, config: dict, cfg: SelectConfig, budget: int | None) -> SelectConfig:
    layers = int(config.get("num_eagle_layers", upstream.EAGLE_DEFAULT_NUM_LAYERS))
    max_len = int(config.get("max_draft_len", upstream.EAGLE_DEFAULT_MAX_DRAFT_LEN))
    if budget is not None and not 1 <= budget <= max_len:
        raise TrtspecError(f"--eagle-node-budget: {budget} is outside [1, max_draft_len={max_len}] of the checkpoint")
    return cfg.model_copy(update={
        "num_eagle_layers": layers, "eagle_node_budget": budget or max_len,
        "max_non_leaves": int(config.get("max_non_leaves_per_layer", upstream.EAGLE_DEFAULT_MAX_NON_LEAVES))})


def run_tune(profile_path: Path, cost: str = "h100", target_ckpt: Path | None = None, draft_ckpt: Path | None = None,
             cfg: SelectConfig | None = None, eagle_node_budget: int | None = None) -> Tuning:
    cfg = cfg or SelectConfig()
    profile = load_profile(Path(profile_path))
    shapes, config = resolve_shapes(profile, target_ckpt, draft_ckpt, Path(profile_path).parent)
    model, info = build_cost(cost, shapes, profile.mode)
    served, limits = None, None
    if profile.mode == "eagle":
        cfg = eagle_limits(profile, config, cfg, eagle_node_budget)
        workloads, served = tune_eagle(profile, model, cfg)
        limits = EagleLimits(num_eagle_layers=cfg.num_eagle_layers, node_budget=cfg.eagle_node_budget,
                             max_non_leaves_per_layer=cfg.max_non_leaves, max_profiles=cfg.max_profiles,
                             tree_top_k=profile.tree_top_k)
        needed = max((len(b.eagle_choices or []) for w in workloads.values() for b in w.bands), default=0)
    else:
        if eagle_node_budget is not None or cfg.max_profiles is not None:
            raise TrtspecError("--eagle-node-budget / --max-profiles apply to EAGLE profiles only")
        workloads = tune_draft_target(profile, model, cfg)
        needed = max(b.draft_len for w in workloads.values() for b in w.bands)
    return Tuning(mode=profile.mode, profile={"path": str(profile_path), "sha256": sha256_file(Path(profile_path))},
                  measurement_conditions=profile.measurement_conditions.model_dump(), trtspec_version=__version__,
                  cost=info, concurrency_bands=cfg.concurrency_bands, max_draft_len=needed, eagle=limits,
                  workloads=workloads, profiles=served)


def tune_command(
    profile: Path = typer.Option(..., "--profile", help="profile.json from the profiler."),
    cost: str = typer.Option("h100", "--cost", help="h100 | h200 (analytic model) or a measured cost table JSON."),
    target_ckpt: Optional[Path] = typer.Option(
        None, "--target-ckpt", help="Target (or EAGLE) checkpoint; default: the one the profile names."),
    draft_ckpt: Optional[Path] = typer.Option(
        None, "--draft-ckpt", help="Draft checkpoint (draft-target); default: the one the profile names."),
    concurrency_bands: str = typer.Option(
        "1,4,16,64", "--concurrency-bands", help="Concurrency (batch) bands, comma-separated."),
    eagle_node_budget: Optional[int] = typer.Option(
        None, "--eagle-node-budget", help="EAGLE: max tree nodes (default: the checkpoint's max_draft_len)."),
    max_profiles: Optional[int] = typer.Option(
        None, "--max-profiles", help="EAGLE: served trees per band (default: one per workload)."),
    context_tokens: Optional[int] = typer.Option(
        None, "--context-tokens", help="KV length for step times (default: mean prompt + half the output)."),
    out: Path = typer.Option(Path("tuning.json"), "--out", help="Where to write tuning.json."),
    plots: Optional[Path] = typer.Option(
        None, "--plots", help="PNG directory (default: <out stem>_plots next to --out)."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the PNG plots."),
):
    """Pick the draft length / EAGLE tree per workload and concurrency band that maximises predicted tokens/s."""
    from .report import print_summary, write_plots

    if out.is_dir():
        raise TrtspecError(f"--out: {out} is a directory (expected the path of tuning.json)")
    plots = plots if plots is not None else out.parent / f"{out.stem}_plots"
    if not no_plots and plots.exists() and (not plots.is_dir() or any(
            f.suffix != ".png" or not f.is_file() for f in plots.iterdir())):
        raise TrtspecError(f"--plots: {plots} is not a directory of PNG files; give a new or empty directory")
    if max_profiles is not None and max_profiles < 1:
        raise TrtspecError(f"--max-profiles: expected >= 1, got {max_profiles}")
    if context_tokens is not None and context_tokens < 0:
        raise TrtspecError(f"--context-tokens: expected >= 0, got {context_tokens}")
    cfg = SelectConfig(concurrency_bands=parse_ints(concurrency_bands), max_profiles=max_profiles,
                       context_tokens=context_tokens)
    tuning = run_tune(profile, cost, target_ckpt, draft_ckpt, cfg, eagle_node_budget)
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
    batches: str = typer.Option("1,2,4", "--batches", help="Batch sizes, comma-separated."),
    num_tokens: str = typer.Option("1,2,4,8", "--num-tokens", help="Tokens per forward, comma-separated."),
    context: int = typer.Option(32, "--context", help="Committed KV length before the timed forward."),
    repeats: int = typer.Option(3, "--repeats", help="Timed runs per shape (median kept)."),
    out: Path = typer.Option(Path("cost_table.json"), "--out", help="Where to write the cost table."),
):
    """Time the PyTorch runtime's forwards on this machine into a cost table for `trtspec tune --cost FILE`."""
    from .measure import MeasureConfig, measure_runtime

    cfg = MeasureConfig(batches=parse_ints(batches, "--batches"), num_tokens=parse_ints(num_tokens, "--num-tokens"),
                        context=context, repeats=repeats)
    table = measure_runtime(target_ckpt, draft_ckpt, cfg)
    write_text_atomic(out, table.model_dump_json(by_alias=True, indent=2) + "\n")
    typer.echo(f"wrote {out} ({len(table.rows)} rows)")
