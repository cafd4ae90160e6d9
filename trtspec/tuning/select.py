"""Choose the draft length (draft-target) or eagle_choices tree (EAGLE) per workload and concurrency.

Objective, per workload and concurrency band b (b sequences decoding together):

    predicted output tokens/s = b * AL / step_time(b)

(step_time(b): one forward of batch b on a server that batches concurrent requests, TensorRT-LLM's
in-flight batching; the batch-1 step where each request steps alone, CostModel.in_flight_batching.)

AL comes from exact replay of the profile (trtspec/tuning/acceptance.py), step_time from the cost
model (trtspec/tuning/cost.py) at the workload's mean KV length. "No speculation" is always a
candidate (AL 1, one target forward per token), so a useless or expensive draft is switched off.
Speedup is tokens/s over that baseline at the same band. Each chosen AL carries its standard error
over the profiled prompts (acceptance.ratio_se). A profile at temperature T (trtspec/tuning/sampled.py)
is tuned at that T: its AL is the one the accept rule it names has there, so the same selection
picks the K / tree for the workload's sampling settings, and tuning.json records both.

- draft-target: every K in 0..num_speculative_tokens. K is a per-request setting
  (`num_draft_tokens`), so each workload x band gets its own.
- Distinguishable? (`indistinguishable`, what the summary prints): the predicted tokens/s of K has a
  first-order standard error from its AL's, SE(tps_K) = b * SE(AL_K) / step_K = tps_K * SE(AL_K) / AL_K
  (the step time is a model output, not a sample, so it carries none). K and the chosen K* are "not
  distinguishable" when |tps_K - tps_K*| <= 1.96 * sqrt(SE_K^2 + SE_K*^2). The AL(K) of different K
  are replayed from the same prompts and positively correlated, so the true SE of the difference is
  smaller: the test errs towards "not distinguishable", the honest side for a 6-prompt profile. The
  choice itself stays the argmax (tuning.json is unchanged); this only qualifies it. EAGLE trees and
  n-gram or other-head chains store a standard error for the served setting only, so they are
  compared with off alone: a chat band at 1.07x with AL 1.20 +- 0.14 over 4 prompts is "not
  distinguishable from off", which is what perf then measures. `prompts_to_separate_from_off` says
  how many profiled prompts would settle it if the AL and its spread held (SE ~ 1/sqrt(prompts)).
  An AL without a standard error (acceptance.ratio_se: one profiled prompt has no spread to measure;
  or a tuning.json from before they were recorded) separates nothing: the least evidence is not
  presented as a clear gain (`se_unknown`).
- EAGLE: candidate trees are, for every size from num_eagle_layers to the node budget, the tree of
  largest empirical acceptance found by greedy growth (trtspec/tuning/trees.py), plus the top-1
  chain of full depth and TRT-LLM's default mc_sim_7b_63 when it fits the limits; each is scored
  by exact replay. The
  tree is a server-level setting (one model instance per tree), so with `max_profiles` = N the
  workloads of a band are grouped into at most N served profiles (trtspec/tuning/grouping.py) and
  each workload is served its profile's tree.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..confidence import Z95
from ..upstream import trtllm
from ..errors import TrtspecError
from .acceptance import (TreeIndex, acceptance_length_se, chain_accepted, chain_choices, replay_chain, replay_tree,
                         tree_se)
from .cost import CostModel, StepTime
from .grouping import assign, choose_medoids
from .schema import Profile, WorkloadProfile
from .tuning_schema import BandChoice, ServedProfile, SweepPoint, WorkloadTuning
from .trees import accepted_array, best_trees, check_tree, level_sizes, node_stats, replay_al, sort_choices


class SelectConfig(BaseModel):
    """Every knob of the selection; defaults are what `trtspec tune` uses."""
    model_config = ConfigDict(extra="forbid")
    concurrency_bands: list[int] = Field(default_factory=lambda: [1, 4, 16, 64])
    context_tokens: float | None = Field(None, description="KV length for step times; None: per workload "
                                         "mean prompt length + half the mean output length")
    default_prompt_tokens: int = Field(512, description="prompt length assumed when the profile has none")
    num_eagle_layers: int | None = Field(None, description="tree depth; None: the profile's num_speculative_tokens")
    eagle_node_budget: int = Field(trtllm.EAGLE_DEFAULT_MAX_DRAFT_LEN, description="max nodes (<= max_draft_len)")
    max_non_leaves: int = trtllm.EAGLE_DEFAULT_MAX_NON_LEAVES
    max_profiles: int | None = Field(None, description="EAGLE: served profiles per band; None: one per workload")
    tree_seeds: int = Field(64, ge=1, description="EAGLE: full-depth nodes tried as growth seeds (trees.py)")


def context_of(w: WorkloadProfile, cfg: SelectConfig) -> float:
    if cfg.context_tokens is not None:
        return float(cfg.context_tokens)
    prompt = w.mean_prompt_len()
    return (cfg.default_prompt_tokens if prompt is None else prompt) + 0.5 * w.num_tokens / w.num_samples


def _al(value: float | None, name: str) -> float:
    if value is None:
        raise TrtspecError(f"profile: workload '{name}' has no verify steps (every sample has fewer than 2 tokens)")
    return value


def _band(b: int, al: float, st: StepTime, base: StepTime, sweep: list[SweepPoint], own_best: float,
          **setting) -> BandChoice:
    tps, base_tps = b * al / st.total_s, b / base.total_s
    return BandChoice(concurrency=b, acceptance_length=al, step_time_s=st.total_s, draft_step_s=st.draft_s,
                      target_step_s=st.target_s, tokens_per_s=tps, baseline_step_time_s=base.total_s,
                      baseline_tokens_per_s=base_tps, speedup=tps / base_tps, own_best_tokens_per_s=own_best,
                      sweep=sweep, **setting)


def _argmax(values: list[float]) -> int:
    """First index of the maximum (candidates are ordered cheapest first, so ties pick the cheaper)."""
    best = max(values)
    return next(i for i, v in enumerate(values) if v >= best * (1 - 1e-12))


def chain_sweep(als: list[float], cost: CostModel, b: int, ctx: float, ks: list[int] | None = None,
                ngram_sizes: list[int | None] | None = None, host_draft: bool = False,
                ses: list[float | None] | None = None) -> tuple[list[SweepPoint], list[StepTime], int]:
    """Predicted tokens/s of every candidate at concurrency b: als[i] is the AL of draft length ks[i]
    (default: K = 0..len(als)-1, als[0] = 1; ses[i] its standard error), drafted by the draft network
    or, with host_draft, from the host (n-gram, whose max_matching_ngram_size is ngram_sizes[i]).
    Returns the sweep, the step times and the best candidate's index (ties: the first, so candidates
    go cheapest first)."""
    ks = list(range(len(als))) if ks is None else ks
    sizes = ngram_sizes or [None] * len(als)
    ses = ses or [None] * len(als)
    steps = [cost.draft_target_step(b, k, ctx, host_draft=host_draft) for k in ks]
    tps = [b * al / st.total_s for al, st in zip(als, steps)]
    sweep = [SweepPoint(draft_len=k, max_matching_ngram_size=n, acceptance_length=al, acceptance_length_se=se,
                        step_time_s=st.total_s, tokens_per_s=v)
             for k, n, al, se, st, v in zip(ks, sizes, als, ses, steps, tps)]
    return sweep, steps, _argmax(tps)




def within_noise(gain: float, se: float, z: float = Z95) -> bool:
    """Whether a predicted gain over off is inside its noise: gain <= z * SE (one-sided: a loss is no
    win either). indistinguishable (so held_off) applies it per band; triton_repo/routing.py to the
    token-weighted default route, its SE propagated over the workloads."""
    return gain <= z * se


def tokens_per_s_se(tokens_per_s: float, acceptance_length: float, al_se: float) -> float:
    """First-order standard error of a predicted tokens/s from its AL's (module docstring): the step
    time is a model output, not a sample, so SE(tok/s) = tok/s * SE(AL) / AL."""
    return tokens_per_s * al_se / acceptance_length


def se_unknown(band: BandChoice) -> bool:
    """Whether a speculating band's AL has no standard error (module docstring): its gain over off
    cannot be shown to be clear of the noise, so it is not clear (held_off, the notes, routing)."""
    return band.speculate and band.acceptance_length_se is None


def indistinguishable(band: BandChoice, se_by_k: dict[str, float | None] | None, z: float = Z95) -> list[int]:
    """Draft lengths whose predicted tokens/s cannot be told from the chosen setting's at 95% given the
    ALs' standard errors (module docstring); [] when none. An unknown standard error (None, or no
    `se_by_k`) tells nothing apart, so such a setting is listed. The model drafter's chain is compared
    with every K of its sweep (`se_by_k`). Any other speculating band (an n-gram or another head's
    chain, an EAGLE tree) has no per-K standard errors (an n-gram sweep mixes matching sizes), so it is
    compared with off only, from its own acceptance_length_se: [0] or []."""
    if band.speculate and (band.draft_len is None or band.drafter is not None):
        if se_unknown(band):
            return [0]
        se = tokens_per_s_se(band.tokens_per_s, band.acceptance_length, band.acceptance_length_se)
        return [0] if within_noise(band.tokens_per_s - band.baseline_tokens_per_s, se, z) else []
    if band.draft_len is None or band.drafter is not None:  # off, in a non-chain mode
        return []
    se = {0: 0.0, **{int(k): v for k, v in (se_by_k or {}).items()}}

    def tps_se(p: SweepPoint) -> float | None:
        s = se.get(p.draft_len)
        return None if s is None else tokens_per_s_se(p.tokens_per_s, p.acceptance_length, s)

    # the model drafter's points, one per K (a drafter choice's sweep also holds n-gram points, other
    # EAGLE-3 heads' chains, labelled with their names, and each drafter's own K = 0 point)
    points, seen = [], set()
    for p in band.sweep:
        if p.max_matching_ngram_size is None and p.label is None and p.draft_len not in seen:
            points.append(p)
            seen.add(p.draft_len)
    chosen = next((p for p in points if p.draft_len == band.draft_len), None)
    if chosen is None:
        return []
    c = tps_se(chosen)
    out = []
    for p in points:
        s = tps_se(p)
        if p is not chosen and (c is None or s is None
                                or abs(p.tokens_per_s - chosen.tokens_per_s) <= z * float(np.hypot(s, c))):
            out.append(p.draft_len)
    return out


def held_off(band: BandChoice, se_by_k: dict[str, float | None] | None) -> BandChoice:
    """`band`, or off where its speculating choice is not distinguishable from off (indistinguishable):
    the project's rule that a difference inside its interval is no win, applied to the prediction
    (tune.speculate_only_if_clear). The off band keeps the sweep and records the choice held back."""
    if not band.speculate or 0 not in indistinguishable(band, se_by_k):
        return band
    base = StepTime(draft_s=0.0, target_s=band.baseline_step_time_s)
    return _band(band.concurrency, 1.0, base, base, band.sweep, band.baseline_tokens_per_s, speculate=False,
                 drafter=band.drafter, draft_len=0, acceptance_length_se=0.0,
                 held_off=band.model_copy(update={"sweep": []}))


def prompts_to_separate_from_off(band: BandChoice, num_prompts: int, z: float = Z95) -> int | None:
    """Profiled prompts that would tell the band's speculating choice from off at 95%, if its AL and
    the spread over prompts hold: SE shrinks as 1/sqrt(prompts), so n' = n * (z * SE(tok/s) / gain)^2.
    None when the band does not speculate, has no standard error or no gain."""
    gain = band.tokens_per_s - band.baseline_tokens_per_s
    if not band.speculate or not band.acceptance_length_se or gain <= 0:
        return None
    se = tokens_per_s_se(band.tokens_per_s, band.acceptance_length, band.acceptance_length_se)
    return math.ceil(num_prompts * (z * se / gain) ** 2)


def profile_record(profile: Profile, w: WorkloadProfile) -> dict:
    """What tuning.json says each workload's predictions assumed: its sampling settings and the
    accept rule of the profile (None for profiles written before either was recorded), and the
    distinct prompts its standard errors are over (acceptance.ratio_se clusters by prompt id and
    leaves out a prompt without a step: an answer of at most one token), and the mean prompt length
    (what a served request holds besides its output; context_tokens is an override's when one is set)."""
    cond = profile.measurement_conditions
    return {"sampling": w.sampling or cond.sampling, "accept_rule": cond.accept_rule,
            "num_prompts": len({s.id for s in w.samples if s.num_states > 1}), "prompt_tokens": w.mean_prompt_len()}


def tune_draft_target(profile: Profile, cost: CostModel, cfg: SelectConfig) -> dict[str, WorkloadTuning]:
    K = profile.num_speculative_tokens
    out = {}
    for name, w in profile.workloads.items():
        lists, ids = [s.match_lengths for s in w.samples], [s.id for s in w.samples]
        als = [1.0] + [_al(replay_chain(lists, k).acceptance_length, name) for k in range(1, K + 1)]
        ses = [0.0] + [acceptance_length_se([chain_accepted(m, k) for m in lists], ids) for k in range(1, K + 1)]
        ctx = context_of(w, cfg)
        bands = []
        for b in cfg.concurrency_bands:
            sweep, steps, k = chain_sweep(als, cost, b, ctx, ses=ses)
            bands.append(_band(b, als[k], steps[k], steps[0], sweep, sweep[k].tokens_per_s, speculate=k > 0,
                               draft_len=k, acceptance_length_se=ses[k]))
        out[name] = WorkloadTuning(num_samples=w.num_samples, num_tokens=w.num_tokens, context_tokens=ctx,
                                   accept_length_by_k={str(k): als[k] for k in range(1, K + 1)}, bands=bands,
                                   accept_length_se_by_k={str(k): ses[k] for k in range(1, K + 1)},
                                   **profile_record(profile, w))
    return out


class _Tree:
    """A candidate EAGLE setting: its choices (None = no speculation), label and drafter level sizes."""

    def __init__(self, choices: list[list[int]] | None, label: str, depth: int):
        self.choices, self.label = choices, label
        self.key = None if choices is None else tuple(tuple(c) for c in sort_choices(map(tuple, choices)))
        self.num_nodes = 0 if choices is None else len(choices)
        self.levels = [] if choices is None else level_sizes(choices, depth)

    def step(self, cost: CostModel, b: int, ctx: float) -> StepTime:
        return cost.eagle_step(b, self.levels, self.num_nodes, ctx)


def _eagle_candidates(w: WorkloadProfile, profile: Profile, cfg: SelectConfig, depth: int
                      ) -> tuple[list[_Tree], dict]:
    """This workload's candidate trees and their exact replay AL {key: AL}."""
    top_k = profile.tree_top_k
    samples = [s.rank_paths for s in w.samples]
    stats = node_stats(samples, depth)
    trees, al = [_Tree(None, "none", depth)], {None: 1.0}
    grown = best_trees(stats, depth, cfg.eagle_node_budget, cfg.max_non_leaves, top_k, cfg.tree_seeds)
    for nodes in grown.values():
        t = _Tree(sort_choices(nodes), "greedy", depth)
        trees.append(t)
        al[t.key] = replay_al(stats, accepted_array(stats, nodes))
    extra = [(chain_choices(depth), "chain")]
    try:
        check_tree(trtllm.MC_SIM_7B_63, depth, cfg.eagle_node_budget, cfg.max_non_leaves, top_k)
        extra.append((trtllm.MC_SIM_7B_63, "default"))
    except TrtspecError:
        pass  # the default tree does not fit this engine's limits: not a candidate
    for choices, label in extra:
        t = _Tree(choices, label, depth)
        if t.key not in al:
            trees.append(t)
            al[t.key] = replay_tree(samples, TreeIndex(choices)).acceptance_length
    return trees, al


def tune_eagle(profile: Profile, cost: CostModel, cfg: SelectConfig
               ) -> tuple[dict[str, WorkloadTuning], list[ServedProfile]]:
    depth = cfg.num_eagle_layers or profile.num_speculative_tokens
    if depth > profile.num_speculative_tokens:
        raise TrtspecError(f"num_eagle_layers={depth} exceeds the profiled depth "
                           f"num_speculative_tokens={profile.num_speculative_tokens}: re-profile deeper")
    names = list(profile.workloads)
    ctx = {n: context_of(profile.workloads[n], cfg) for n in names}
    cands, als = {}, {}
    for n in names:
        cands[n], al = _eagle_candidates(profile.workloads[n], profile, cfg, depth)
        als[n] = {k: _al(v, n) for k, v in al.items()}
    pool = {t.key: t for n in names for t in cands[n]}  # every distinct tree, for cross-evaluation

    def al_of(n: str, t: _Tree) -> float:
        if t.key not in als[n]:
            samples = [s.rank_paths for s in profile.workloads[n].samples]
            als[n][t.key] = _al(replay_tree(samples, TreeIndex(t.choices)).acceptance_length, n)
        return als[n][t.key]

    tunings = {n: [] for n in names}
    served: list[ServedProfile] = []
    for b in cfg.concurrency_bands:
        base = {n: cost.baseline_step(b, ctx[n]) for n in names}
        own, sweeps = {}, {}
        for n in names:
            steps = [t.step(cost, b, ctx[n]) for t in cands[n]]
            tps = [b * als[n][t.key] / st.total_s for t, st in zip(cands[n], steps)]
            sweeps[n] = [SweepPoint(num_nodes=t.num_nodes, label=t.label, acceptance_length=als[n][t.key],
                                    step_time_s=st.total_s, tokens_per_s=v)
                         for t, st, v in zip(cands[n], steps, tps)]
            own[n] = cands[n][_argmax(tps)].key
        columns = list(dict.fromkeys(own[n] for n in names))  # the distinct own-best trees
        tps = np.array([[b * al_of(n, pool[k]) / pool[k].step(cost, b, ctx[n]).total_s for k in columns]
                        for n in names])
        best = tps.max(axis=1)  # >= own best: another workload's tree can beat a greedy one
        loss = 1.0 - tps / best[:, None]
        chosen = choose_medoids(loss, cfg.max_profiles or len(columns))
        picks = assign(loss, chosen)
        for j in chosen:
            members = [n for n, k in zip(names, picks) if k == j]
            if not members:  # a pick no workload ended up preferring (possible after swaps): not served
                continue
            name, t = f"c{b}-p{sum(p.concurrency == b for p in served)}", pool[columns[j]]
            served.append(ServedProfile(name=name, concurrency=b, workloads=members, eagle_choices=t.choices,
                                        num_nodes=t.num_nodes, mean_throughput_loss=float(
                                            np.mean([loss[names.index(m), j] for m in members]))))
            for m in members:
                tunings[m].append(_band(b, al_of(m, t), t.step(cost, b, ctx[m]), base[m], sweeps[m],
                                        float(best[names.index(m)]), speculate=t.choices is not None,
                                        eagle_choices=t.choices, profile=name,
                                        acceptance_length_se=_tree_se(profile.workloads[m], t)))
    out = {}
    for n in names:
        w = profile.workloads[n]
        out[n] = WorkloadTuning(num_samples=w.num_samples, num_tokens=w.num_tokens, context_tokens=ctx[n],
                                accept_length_by_k=w.accept_length_by_k,
                                bands=tunings[n], accept_length_se_by_k=w.accept_length_se_by_k,
                                **profile_record(profile, w))
    return out, served


def _tree_se(w: WorkloadProfile, t: _Tree) -> float | None:
    """Standard error of a served tree's AL on a workload (0 for no speculation: AL is 1 exactly)."""
    if t.choices is None:
        return 0.0
    return tree_se([s.rank_paths for s in w.samples], t.choices, [s.id for s in w.samples])
