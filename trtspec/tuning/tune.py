"""The tuning stage as a library call: profile.json + cost model -> Tuning (no files, no CLI).

`tune_stage(profile_path, TuneOptions)` is what `trtspec tune` and the recipe's tune stage call
(`tune_drafters` with several profiles of one target, one per drafter offered: each tuned alone,
then the drafter chosen per workload x band, choose.py);
`run_tune` is the same with a full SelectConfig (benchmarks and tests set its inner knobs). The
analytic cost model needs the networks' sizes and quantization: from `target_ckpt` / `draft_ckpt`,
else from the checkpoint directories the profile's measurement_conditions name (target, draft).
Errors name the option (`tune.cost: ...`); the CLI re-words them with its flags.
"""

from __future__ import annotations

from pathlib import Path

from .. import __version__
from ..checkpoints.eagle3 import load_eagle3_head
from ..checkpoints.hf_unified import open_checkpoint
from ..errors import TrtspecError
from ..fsutil import sha256_file
from ..upstream import trtllm as upstream
from .cost import CostModel, ModelShape, shape_from_eagle3, shapes_from_checkpoint
from .gpus import PRESETS, gpu_preset
from .fit import fit_gpu, load_cost_table
from .options import TuneOptions
from .schema import Profile, load_profile
from .tuning_schema import CostInfo, EagleLimits, Tuning
from .ngram_select import tune_ngram
from .select import SelectConfig, context_of, held_off, tune_draft_target, tune_eagle
from .calibrate import calibrate_cost
from .choose import choose


def _ckpt(given: Path | None, recorded: str | None, what: str, base: Path) -> Path | None:
    """The checkpoint given by the caller, else the one the profile recorded (as written, or
    relative to the profile's directory)."""
    if given is not None:
        if not (Path(given) / "config.json").is_file():
            raise TrtspecError(f"tune.{what}_ckpt: {given} is not a TRT-LLM checkpoint directory (no config.json)")
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
        raise TrtspecError(f"tune.target_ckpt: needed for the cost model (the profile's measurement_conditions.target "
                           f"{cond.target!r} is not a checkpoint directory here)")

    shapes = shapes_from_checkpoint(target, "target")
    config = open_checkpoint(target).config
    if profile.mode == "eagle" and "eagle" not in shapes:
        raise TrtspecError(f"tune.target_ckpt: {target} is not an EagleForCausalLM checkpoint, but the profile is eagle")
    if profile.mode == "draft-target":
        draft = _ckpt(draft_ckpt, cond.draft, "draft", base)
        if draft is None:
            raise TrtspecError(f"tune.draft_ckpt: needed for a draft-target profile (measurement_conditions.draft "
                               f"{cond.draft!r} is not a checkpoint directory here)")
        shapes["draft"] = shapes_from_checkpoint(draft, "draft")["draft"]
    if profile.mode == "eagle3":
        shapes["draft"] = eagle3_shape(profile, target, config, base)
    return shapes, config


def eagle3_shape(profile: Profile, target: Path, config: dict, base: Path) -> ModelShape:
    """The EAGLE-3 head the profile recorded (measurement_conditions.eagle3_head) as the draft network."""
    recorded = (profile.measurement_conditions.model_extra or {}).get("eagle3_head")
    head = next((c for c in ([Path(recorded), base / recorded] if recorded else []) if (c / "config.json").is_file()),
                None)
    if head is None:
        raise TrtspecError(f"tune.target_ckpt: an eagle3 profile needs its head (measurement_conditions.eagle3_head "
                           f"{recorded!r} is not a head directory here)")
    spec = open_checkpoint(target).spec
    return shape_from_eagle3(load_eagle3_head(head, spec), config, head.name, str(head / "config.json"))


def build_cost(cost: str, shapes: dict[str, ModelShape], mode: str) -> tuple[CostModel, CostInfo]:
    draft = shapes.get("eagle" if mode == "eagle" else "draft")
    if cost in PRESETS:
        gpu = gpu_preset(cost)
        return CostModel(gpu=gpu, target=shapes["target"], draft=draft), CostInfo(
            source="analytic", gpu=gpu, target=shapes["target"], draft=draft)
    path = Path(cost)
    if not path.is_file():
        raise TrtspecError(f"tune.cost: {cost!r} is neither a GPU ({', '.join(PRESETS)}) nor a cost table file")
    table = load_cost_table(path)
    gpu, report = fit_gpu(table, shapes)
    return CostModel(gpu=gpu, target=shapes["target"], draft=draft), CostInfo(
        source="measured", table=str(path), gpu=gpu, fit=report, target=shapes["target"], draft=draft)


def eagle_limits(profile: Profile, config: dict, cfg: SelectConfig, budget: int | None) -> SelectConfig:
    layers = int(config.get("num_eagle_layers", upstream.EAGLE_CONFIG_DEFAULT_NUM_LAYERS))
    max_len = int(config.get("max_draft_len", upstream.EAGLE_DEFAULT_MAX_DRAFT_LEN))
    if budget is not None and not 1 <= budget <= max_len:
        raise TrtspecError(f"tune.eagle_node_budget: {budget} is outside [1, max_draft_len={max_len}] of the checkpoint")
    return cfg.model_copy(update={
        "num_eagle_layers": layers, "eagle_node_budget": budget or max_len,
        "max_non_leaves": int(config.get("max_non_leaves_per_layer", upstream.EAGLE_DEFAULT_MAX_NON_LEAVES))})


def run_tune(profile_path: Path, cost: str = "h100", target_ckpt: Path | None = None, draft_ckpt: Path | None = None,
             cfg: SelectConfig | None = None, eagle_node_budget: int | None = None,
             calibrate: Path | None = None, speculate_only_if_clear: bool = False,
             in_flight_batching: bool = True) -> Tuning:
    cfg = cfg or SelectConfig()
    profile = load_profile(Path(profile_path))
    shapes, config = resolve_shapes(profile, target_ckpt, draft_ckpt, Path(profile_path).parent)
    model, info = build_cost(cost, shapes, profile.mode)
    if not in_flight_batching:  # every band priced at batch 1 (CostModel.in_flight_batching)
        model, info = (x.model_copy(update={"in_flight_batching": False}) for x in (model, info))
    if calibrate is not None:  # the deployment's sweep refits `cost` (calibrate.py)
        contexts = {name: context_of(w, cfg) for name, w in profile.workloads.items()}
        prompts = {name: w.mean_prompt_len() or cfg.default_prompt_tokens for name, w in profile.workloads.items()}
        model, info = calibrate_cost(Path(calibrate), model, info, contexts, prompts, cost)
    served, limits = None, None
    if profile.mode == "eagle":
        if speculate_only_if_clear:
            raise TrtspecError("tune.speculate_only_if_clear: not for EAGLE trees (their served profiles are shared "
                               "by workloads); chains and n-gram only")
        cfg = eagle_limits(profile, config, cfg, eagle_node_budget)
        workloads, served = tune_eagle(profile, model, cfg)
        limits = EagleLimits(num_eagle_layers=cfg.num_eagle_layers, node_budget=cfg.eagle_node_budget,
                             max_non_leaves_per_layer=cfg.max_non_leaves, max_profiles=cfg.max_profiles,
                             tree_top_k=profile.tree_top_k)
        needed = max((len(b.eagle_choices or []) for w in workloads.values() for b in w.bands), default=0)
    else:
        if eagle_node_budget is not None or cfg.max_profiles is not None:
            raise TrtspecError("tune.eagle_node_budget: applies to EAGLE profiles only (as does tune.max_profiles)")
        workloads = (tune_ngram if profile.mode == "ngram" else tune_draft_target)(profile, model, cfg)
        if speculate_only_if_clear:  # select.held_off
            for w in workloads.values():
                w.bands = [held_off(b, w.accept_length_se_by_k) for b in w.bands]
        needed = max(b.draft_len for w in workloads.values() for b in w.bands)
    return Tuning(mode=profile.mode, profile={"path": str(profile_path), "sha256": sha256_file(Path(profile_path))},
                  measurement_conditions=profile.measurement_conditions.model_dump(), trtspec_version=__version__,
                  cost=info, concurrency_bands=cfg.concurrency_bands, max_draft_len=needed, eagle=limits,
                  workloads=workloads, profiles=served, speculate_only_if_clear=speculate_only_if_clear)


def tune_stage(profile_path: Path, options: TuneOptions, target_ckpt: Path | None = None,
               draft_ckpt: Path | None = None) -> Tuning:
    """The tune stage: `options` is the recipe's `tune:` section / the `trtspec tune` flags."""
    cfg = SelectConfig(concurrency_bands=options.concurrency_bands, max_profiles=options.max_profiles,
                       context_tokens=options.context_tokens)
    return run_tune(profile_path, options.cost, target_ckpt, draft_ckpt, cfg, options.eagle_node_budget,
                    options.calibrate, options.speculate_only_if_clear, options.in_flight_batching)


def tune_drafters(profiles: list[Path] | dict[str, Path], options: TuneOptions, target_ckpt: Path | None = None,
                  draft_ckpt: Path | None = None) -> tuple[Tuning, dict[str, Tuning]]:
    """Several drafters offered: each profile (one per drafter: {name: profile}, or a list named by
    their modes) tuned alone, then the choice (choose.py). Several EAGLE-3 heads of one target (a
    general head and per-workload heads) are several drafters of one mode, each named. Returns the
    chosen Tuning and each drafter's own. One profile: its tuning, with the memory options unused."""
    tunings: dict[str, Tuning] = {}
    for given, path in profiles.items() if isinstance(profiles, dict) else ((None, p) for p in profiles):
        mode = load_profile(Path(path), check=False).mode
        name = given or mode
        if name in tunings:
            raise TrtspecError(f"tune.profile: two {mode} profiles ({Path(path).name} and another); offer one "
                               "profile per drafter")
        tunings[name] = tune_stage(path, options, target_ckpt, None if mode == "ngram" else draft_ckpt)
    if len(tunings) == 1:
        return next(iter(tunings.values())), tunings
    return choose(tunings, options.memory_budget_gib, options.separate_instances), tunings
