"""The best drafter per workload: several tunings of one target, one choice per workload x band.

A recipe may offer several drafters for one target: a draft model or an EAGLE-3 head (the "model"
drafter, tuned from its own profile) and n-gram drafting (tuned from an n-gram profile), besides
not speculating at all. Several model drafters may be offered when all are EAGLE-3 heads of the
target (a general head and heads trained per workload, each named): a workload then goes to the
head that serves it best, and every extra head served counts its weights against the budget. Each was tuned alone (tune.py: the same target, cost model, workloads and
bands), so their predictions are comparable: each band's tokens/s is b * AL / step time of the same
target under the same GPU model, and "off" is the same baseline in all of them.

What a drafter costs to serve is memory: a draft model or head holds its weights on the GPU for as
long as any workload routes to it; n-gram drafting holds nothing. Memory is counted per GPU, as
builders.memory counts an engine's (rank 0 of its tp; gpu_weight_bytes): the weights one GPU of
the deployment holds, embedding, lm_head, norms and quantization scales included. A TP target puts
1/tp of its weights on each GPU; a draft engine runs on the target's first GPUs at its own tp (its
checkpoint's mapping; triton_repo.memory.engine_gpus: rank r on GPU r), and an EAGLE-3
head is sharded over the target's tp. Weights only: activations, runtime overhead and the KV cache
an instance sizes from what is left are not counted. When each drafter is its own model
instance (the llmapi flavor: `speculative_config` is a per-model setting, so every setting served,
a drafter at one K and n-gram size at the flavor's one band, is an instance with its own target and
drafter; a workload served without speculation needs a plain instance too), every instance beyond
the first costs the target's weights again. With a memory
budget (`tune.memory_budget_gib`, extra GiB per GPU beyond one target) the choice is therefore over *sets*
of served drafters: for every set within the budget, each workload x band takes
the best of that set's settings (or off), and the set with the highest token-weighted sum of
predicted tokens/s over the served bands wins (ties: less memory, then fewer drafters). Separate
instances serve one band, the smallest (the llmapi flavor), so there the score, the memory and
each drafter's `served` count that band alone: a drafter that would win only at a larger band is
not served, and no band names a drafter outside the chosen set. The sets are enumerated: a recipe
offers a handful of drafters, so 2^n is small, and the answer is exact over sets of drafters. With
separate instances it is not exact over what is served: each workload keeps its drafter's own best
K, so workloads sharing one K (one instance) instead of their own (one each) is never considered,
and a tight budget can leave off what one shared setting would serve (at budget 0, nothing where
one n-gram instance for every workload would gain).

The result is one Tuning (the model drafter's mode, so the repository serves it as it would that
drafter alone) whose bands each name their `drafter` (None: the model drafter, or with several
heads the general one, named by its mode; "ngram"; or another head's name), with every offered drafter's points in the
sweep and a `choice` section saying what was offered, what it costs and what is served.
"""

from __future__ import annotations

from itertools import combinations

from ..builders.memory import WeightCounter
from ..errors import TrtspecError
from .cost import ModelShape
from .tuning_schema import BandChoice, DrafterChoice, OfferedDrafter, Tuning, WorkloadTuning

GIB = float(1 << 30)
TOLERANCE = 1e-6  # relative: the baseline of the same target and cost model must agree


def gpu_weight_bytes(shape: ModelShape) -> float:
    """Bytes of `shape`'s weights on one GPU (rank 0 of its tp): builders.memory's WeightCounter,
    the count `trtspec build` and the Triton memory plan make of a checkpoint (layers, embedding,
    lm_head, norms, group scales), over the sizes the cost model kept. Every decoder linear counts
    at the shape's weight_bytes: a checkpoint excluding some of them from quantization counts more
    in builders.memory."""
    dtype_bytes = shape.dtype_bytes if shape.dtype_bytes is not None else shape.lm_head_bytes
    c = WeightCounter(dtype_bytes, shape.tp, lambda m: shape.lm_head_bytes if m == "lm_head" else shape.weight_bytes)
    extra = c.linear("fc", shape.extra_linear_params / shape.tp)  # EAGLE fc (and EAGLE-3's wider q/k/v input)
    return c.decoder(shape, "", shape.parallel_embedding, shape.own_embedding) + extra


def drafter_memory(tuning: Tuning, separate_instances: bool) -> float:
    """GiB per GPU this drafter's weights take (none for n-gram), plus with separate instances the
    target's under it (what `choice.drafters.*.memory_gib` reports; the set's total is _set_memory)."""
    draft = gpu_weight_bytes(tuning.cost.draft) if tuning.cost.draft is not None and tuning.mode != "ngram" else 0.0
    target = gpu_weight_bytes(tuning.cost.target) if separate_instances else 0.0
    return (draft + target) / GIB


def _check_comparable(tunings: dict[str, Tuning]) -> None:
    names = list(tunings)
    first = tunings[names[0]]
    for name in names[1:]:
        t = tunings[name]
        if set(t.workloads) != set(first.workloads):
            raise TrtspecError(f"tune.profile: '{name}' was tuned on workloads {sorted(t.workloads)}, "
                               f"'{names[0]}' on {sorted(first.workloads)}; tune every drafter on the same ones")
        if sorted(t.concurrency_bands) != sorted(first.concurrency_bands):
            raise TrtspecError(f"tune.profile: '{name}' has concurrency bands {t.concurrency_bands}, "
                               f"'{names[0]}' {first.concurrency_bands}")
        for w, wt in t.workloads.items():
            for b in wt.bands:
                other = _band(first.workloads[w], b.concurrency)
                if abs(b.baseline_tokens_per_s / other.baseline_tokens_per_s - 1) > TOLERANCE:
                    raise TrtspecError(f"tune.profile: '{name}' and '{names[0]}' predict different baselines for "
                                       f"workload '{w}' at concurrency {b.concurrency} ({b.baseline_tokens_per_s:.4g} "
                                       f"vs {other.baseline_tokens_per_s:.4g} tokens/s): tuned with another target, "
                                       "cost model or context length")
    models = [t.mode for t in tunings.values() if t.mode != "ngram"]
    if len(models) > 1 and set(models) != {"eagle3"}:
        raise TrtspecError("tune.profile: at most one model drafter (draft model or EAGLE-3 head) besides n-gram, "
                           "unless all are EAGLE-3 heads of the target (a general head, heads per workload); got "
                           f"{', '.join(models)}")
    if any(t.mode == "eagle" for t in tunings.values()) and len(tunings) > 1:
        raise TrtspecError("tune.profile: an EAGLE-1 engine always drafts with its own tree, so it cannot share a "
                           "deployment with other drafters; offer it alone")


def _band(w: WorkloadTuning, concurrency: int) -> BandChoice:
    return next(b for b in w.bands if b.concurrency == concurrency)


def _best(options: list[tuple[str, BandChoice]]) -> tuple[str, BandChoice]:
    """The highest tokens/s; ties keep the earlier option (the cheaper drafter, see choose)."""
    best = max(b.tokens_per_s for _, b in options)
    return next((n, b) for n, b in options if b.tokens_per_s >= best * (1 - 1e-12))


def _pick(tunings: dict[str, Tuning], served: tuple[str, ...], workload: str, concurrency: int
          ) -> tuple[str | None, BandChoice]:
    """The best setting of the served drafters for one workload x band; off (None) when none speculates."""
    options = [(n, _band(tunings[n].workloads[workload], concurrency)) for n in served]
    options = [(n, b) for n, b in options if b.speculate]
    if not options:
        return None, _off(_band(next(iter(tunings.values())).workloads[workload], concurrency))
    return _best(options)


def _off(band: BandChoice) -> BandChoice:
    """The band without speculation: the baseline step, AL 1 (what every sweep's K = 0 point is)."""
    return band.model_copy(update={
        "speculate": False, "drafter": None, "draft_len": 0, "eagle_choices": None, "max_matching_ngram_size": None,
        "acceptance_length": 1.0, "acceptance_length_se": 0.0, "step_time_s": band.baseline_step_time_s,
        "draft_step_s": 0.0, "target_step_s": band.baseline_step_time_s, "tokens_per_s": band.baseline_tokens_per_s,
        "speedup": 1.0})


def _served_bands(tunings: dict[str, Tuning], separate: bool) -> list[int]:
    """The bands a repository serves: every band (one spec_decode takes K per request), or with
    separate instances only the smallest (the llmapi flavor's one band, triton_repo/llmapi.py). The
    score, the memory and `served` count these alone, so that they say what is served."""
    bands = sorted(next(iter(tunings.values())).concurrency_bands)
    return bands[:1] if separate else bands


def _score(tunings: dict[str, Tuning], served: tuple[str, ...], separate: bool) -> float:
    """Token-weighted tokens/s over workloads and the served bands."""
    first = next(iter(tunings.values()))
    return sum(wt.num_tokens * _pick(tunings, served, w, c)[1].tokens_per_s  # off: the baseline (_off)
               for w, wt in first.workloads.items() for c in _served_bands(tunings, separate))


def _instances(tunings: dict[str, Tuning], served: tuple[str, ...]) -> list[str | None]:
    """The drafter of each model instance a set takes when every setting is its own instance (the
    llmapi flavor, triton_repo/llmapi.py): one per distinct (drafter, K, n-gram size) at the band
    that flavor serves (_served_bands); None: a plain instance, for the workloads left off there."""
    first = next(iter(tunings.values()))
    settings = {}
    (band_served,) = _served_bands(tunings, True)
    for w in first.workloads:
        name, band = _pick(tunings, served, w, band_served)
        settings[(name, band.draft_len, band.max_matching_ngram_size)] = name
    return list(settings.values())


def _set_memory(tunings: dict[str, Tuning], served: tuple[str, ...], separate: bool) -> float:
    """GiB a served set adds beyond one target: the drafters' weights, and with separate instances
    each instance's (_instances: its drafter's weights, and a target per instance beyond the first)."""
    if not separate:
        return sum(drafter_memory(tunings[n], False) for n in served)
    instances = _instances(tunings, served)
    weights = sum(drafter_memory(tunings[n], False) for n in instances if n is not None)
    return weights + (len(instances) - 1) * gpu_weight_bytes(next(iter(tunings.values())).cost.target) / GIB


def _general_head(tunings: dict[str, Tuning]) -> str | None:
    """The general EAGLE-3 head's name (named by its mode; per-workload heads are eagle3-<workload>)."""
    return next((n for n, t in tunings.items() if t.mode == "eagle3" and n == t.mode), None)


def _loadable(tunings: dict[str, Tuning], served: tuple[str, ...]) -> bool:
    """A repository serving another EAGLE-3 head also loads the general one (the pytorch flavor's
    draft_checkpoint, and the default route of an unknown workload): such a set must include it,
    so that its memory is counted."""
    general = _general_head(tunings)
    return general is None or general in served or all(tunings[n].mode != "eagle3" for n in served)


def choose(tunings: dict[str, Tuning], memory_budget_gib: float | None = None,
           separate_instances: bool = False) -> Tuning:
    """One Tuning choosing among `tunings` ({drafter name: its tuning}) per workload x band."""
    if not tunings:
        raise TrtspecError("tune.profile: nothing to choose from")
    # the cheaper drafter first: ties (equal tokens/s) then go to it
    memory = {n: drafter_memory(t, separate_instances) for n, t in tunings.items()}
    tunings = dict(sorted(tunings.items(), key=lambda kv: (memory[kv[0]], kv[0])))
    _check_comparable(tunings)
    names, scored = list(tunings), []
    for served in (s for r in range(len(names) + 1) for s in combinations(names, r)):
        if not _loadable(tunings, served):
            continue
        score = _score(tunings, served, separate_instances)
        gib = _set_memory(tunings, served, separate_instances)
        if memory_budget_gib is None or gib <= memory_budget_gib + 1e-12:
            scored.append((score, -gib, -len(served), served))
    score, gib, _, chosen = max(scored, key=lambda x: x[:3])  # the empty set always fits
    return _merged(tunings, chosen, memory, score, -gib, memory_budget_gib, separate_instances)


def _merged(tunings: dict[str, Tuning], chosen: tuple[str, ...], memory: dict[str, float], score: float,
            gib: float, budget: float | None, separate: bool) -> Tuning:
    models = [n for n, t in tunings.items() if t.mode != "ngram"]
    model = next((n for n in models if n == tunings[n].mode), models[0] if models else None)  # the general head
    base = tunings[model or next(iter(tunings))]
    workloads, used, served_bands = {}, set(), _served_bands(tunings, separate)
    for w, wt in base.workloads.items():
        bands = []
        for c in sorted(base.concurrency_bands):
            name, band = _pick(tunings, chosen, w, c)
            used |= {name} if name is not None and c in served_bands else set()
            own = max(_band(t.workloads[w], c).own_best_tokens_per_s for t in tunings.values())  # >= any choice
            sweep = [p if n in (model, "ngram") else p.model_copy(update={"label": n})  # another head's: named
                     for n, t in tunings.items() for p in _band(t.workloads[w], c).sweep]
            head = {"drafter": name} if name not in (None, model, "ngram") else {}  # another head: named
            bands.append(band.model_copy(update={"own_best_tokens_per_s": own, "sweep": sweep, **head}))
        extra = {"accept_length_by_n_k": next((t.workloads[w].accept_length_by_n_k for t in tunings.values()
                                               if t.workloads[w].accept_length_by_n_k is not None), None)}
        workloads[w] = wt.model_copy(update={"bands": bands, **extra})
    heads = any(tunings[n].mode == "eagle3" for n in used)  # the general head is loaded with any head (_loadable)
    offered = {n: OfferedDrafter(mode=t.mode, profile=t.profile, memory_gib=memory[n],
                                 served=n in used or (heads and n == _general_head(tunings)),
                                 head=(t.measurement_conditions.get("eagle3_head") if t.mode == "eagle3" else None))
               for n, t in tunings.items()}
    needed = max((b.draft_len or len(b.eagle_choices or [])) for w in workloads.values() for b in w.bands)
    return base.model_copy(update={
        "workloads": workloads, "max_draft_len": needed,
        "speculate_only_if_clear": all(t.speculate_only_if_clear for t in tunings.values()),
        "choice": DrafterChoice(drafters=offered, memory_budget_gib=budget, separate_instances=separate,
                                memory_gib=gib, score=score)})
