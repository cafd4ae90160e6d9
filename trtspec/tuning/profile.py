"""Acceptance profiling: measure once per workload, derive acceptance for every K or tree later.

The target decodes each prompt greedily (the tokens any lossless speculative run would emit), or at
temperature > 0 by plain sampling with a recorded seed (the tokens an exact-match speculative run
emits for that seed: trtspec/tuning/sampled.py has the estimator, its rules and its cost). Then,
in one teacher-forced pass over the finished sequence s = prompt + output:

- chain drafts (draft-target): the draft's argmax at every index j; `agree[j]` says whether it
  equals s[j+1]. While a draft's proposals are right its context *is* the true prefix, so the
  number of consecutive proposals accepted from a state is the run of agreements starting there:
  `match_lengths[t]` = run length of `agree` from index P-1+t (P = prompt length; state t = prompt
  plus the first t output tokens), capped at max_k.
- EAGLE-3 heads (a chain): as EAGLE trees below with one candidate per depth; `match_lengths[t]`
  = the levels in a row at which the head, run on its own outputs, drafts the true token.
- EAGLE trees: along the true path, the drafter is run level by level exactly as the tree proposer
  runs it (clone d at depth d+1, features = its own output at the parent) for every state at once,
  one batch row per state; `rank_paths[t]` = the rank of the true token among the drafter's
  candidates at each depth, stopping after the first depth where it is outside the top `tree_top_k`
  (recorded as -1). A tree accepts depth d at state t iff the path of ranks [r_1..r_d] is a node.

Replaying step boundaries over these lists (trtspec.tuning.acceptance) gives the exact acceptance
length of any K <= max_k or any tree within the recorded ranks, from this single pass. Runs near
the end of a sequence are cut where the sequence ends (nothing is known beyond it).

The pass runs `batch_size` finished sequences per forward (profile_pass.py), on the runtime's
device (ProfileOptions.device / dtype).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..errors import TrtspecError
from ..runtime.hf_weights import quantization_record
from ..options import GREEDY_SAMPLING, Sampling
from ..runtime.device import compute_dtype, resolve as resolve_device
from ..runtime.generate import Models, load_models, prompts_within_positions, resolve_pair
from ..upstream.sampling import EXACT_MATCH
from ..workloads import load_workloads, render
from .options import ProfileOptions
from .profile_partial import conditions_hash, load_partial, resume_key, save_partial
from .profile_pass import agreement_runs, chain_match_lengths, eagle3_match_lengths, eagle_rank_paths
from .ngram_profile import POOL as NGRAM_POOL, check_rule as check_ngram_rule, ngram_steps
from .sampled import (decode_settings, decode_targets, estimator, rejection_agreement, samples_drafts,
                      with_overrides)
from .schema import PROFILE_SCHEMA, build_profile

GPU_BATCH = 16  # ProfileOptions.batch_size's default on a GPU (on a CPU: 1, the reference arithmetic)


@dataclass
class SampleProfile:
    id: str
    prompt_len: int
    output_ids: list[int]
    match_lengths: list[int] = field(default_factory=list)
    rank_paths: list[list[int]] = field(default_factory=list)
    ngram_steps: dict[str, list] = field(default_factory=dict)  # ngram_profile.py
    seed: int | None = None  # the draw seed of a sampled output; None when greedy


def profile_prompts(models: Models, prompts: list[tuple[str, list[int]]], max_new_tokens: int, max_k: int,
                    tree_top_k: int = 10, ignore_eos: bool = False,
                    settings: list[Sampling] | None = None, accept_rule: str = EXACT_MATCH.name,
                    ngram_sizes: list[int] | None = None, batch_size: int = 1) -> list[SampleProfile]:
    """Decode every prompt with the target (greedily, or at `settings[i]`: sampled with its seed,
    see sampled.py), then record match_lengths (draft-target) or rank_paths (EAGLE) along that
    output for the first `max_new_tokens` states (under rejection_sampling at T > 0, the kept
    indicators drawn given that output: sampled.rejection_agreement); with `ngram_sizes`, the
    n-gram replay of every (n, K) over that output instead (ngram_profile.py).

    The target decodes max_k + 1 tokens past max_new_tokens so that the runs of the last states are
    recorded in full (keyed draws make the longer sampled output extend the shorter one); the
    replay counts a step only up to the end of the recorded output, as a served request's last
    step counts (acceptance.py). batch_size: finished sequences per forward of the teacher-forced pass."""
    lookahead = max_k + 1
    settings = settings or [GREEDY_SAMPLING] * len(prompts)
    results = decode_targets(models, [p for _, p in prompts], max_new_tokens + lookahead, settings, ignore_eos,
                             accept_rule)
    drafter = ("eagle" if models.eagle is not None else "eagle3" if models.eagle3 is not None
               else "draft" if models.draft is not None else None)
    out, batched = [], []
    for i, ((sample_id, prompt), res, s) in enumerate(zip(prompts, results, settings)):
        states = min(len(res.output_ids), max_new_tokens)
        sp = SampleProfile(sample_id, len(prompt), res.output_ids[:states], seed=None if s.greedy else s.seed)
        if ngram_sizes:
            sp.ngram_steps = ngram_steps(prompt, sp.output_ids, ngram_sizes, max_k, max_new_tokens)
        elif drafter == "draft" and samples_drafts(accept_rule, s):
            seq = list(prompt) + res.output_ids
            agree = rejection_agreement(models, seq, len(prompt), s)
            sp.match_lengths = agreement_runs(agree, len(seq), len(prompt), max_k)[:states]
        elif drafter is not None:
            batched.append(i)
        out.append(sp)
    for start in range(0, len(batched), batch_size):
        chunk = batched[start:start + batch_size]
        seqs = [list(prompts[i][1]) + results[i].output_ids for i in chunk]
        plens = [len(prompts[i][1]) for i in chunk]
        if drafter == "eagle":
            lists = eagle_rank_paths(models, seqs, plens, max_k, tree_top_k)
        elif drafter == "eagle3":
            lists = eagle3_match_lengths(models, seqs, plens, max_k)
        else:
            lists = chain_match_lengths(models, seqs, plens, max_k)
        for i, values in zip(chunk, lists):
            setattr(out[i], "rank_paths" if drafter == "eagle" else "match_lengths", values[:len(out[i].output_ids)])
    return out


def workload_settings(w, sampling: Sampling, rule: str, repeats: int = 1) -> tuple[Sampling, list[Sampling]]:
    """The workload's settings (`sampling` with the workload's own) and the settings each decode runs
    at: one per sample (its own request fields applied) and repetition, seeded as sampled.py says
    (greedy outputs are not repeated: they have no draws). Checks that `rule` has an estimator at
    each (errors name profile.accept_rule)."""
    base = with_overrides(sampling, w.sampling)
    n, out = len(w.samples), []
    for r in range(repeats):
        for j, s in enumerate(w.samples):
            own = with_overrides(base, s.sampling)
            estimator(rule, own)
            out.append(decode_settings(rule, own).model_copy(update={"seed": base.seed + r * n + j}))
        if r == 0 and all(d.greedy for d in out):
            break
    return base, out


def _record(p: SampleProfile, key: str, sample, base: Sampling) -> dict:
    """A profile sample; `sampling` (the settings it decoded at) only when its request set its own."""
    rec = {"id": p.id, "prompt_len": p.prompt_len, "output_ids": p.output_ids, key: getattr(p, key)}
    if p.seed is not None:
        rec["seed"] = p.seed
    if sample.sampling:
        own = with_overrides(base, sample.sampling)
        rec["sampling"] = own.model_copy(update={"seed": own.seed if p.seed is None else p.seed}).model_dump()
    return rec


def run_profile(ckpt: Path, workloads: list, max_k: int, draft_ckpt: Path | None = None, tree_top_k: int = 10,
                progress=None, partial: Path | None = None, sampling: Sampling = GREEDY_SAMPLING,
                accept_rule: str = EXACT_MATCH.name, samples_per_prompt: int = 1, eagle3_head: Path | None = None,
                ngram_sizes: list[int] | None = None, device: str = "cpu", dtype: str | None = None,
                batch_size: int | None = None, compile_layers: bool = False, fp8_gemm: str = "auto"):
    """Profile every workload (trtspec.workloads.Workload) and return the validated `Profile`.

    sampling / accept_rule: the settings (a workload's and a request's own fields override them) and
    the rule the predictions are for (sampled.py); samples_per_prompt: sampled outputs (seeds) per
    prompt; eagle3_head: profile that EAGLE-3 head on `ckpt` (mode eagle3); ngram_sizes: profile
    n-gram drafting at these max_matching_ngram_size values (the target alone; ngram_profile.py)
    instead of the checkpoint's drafter. partial: a file to write the finished workloads to as they
    finish and to resume from (trtspec.tuning.profile_partial); the caller removes it once the profile is written. A sample
    whose prompt + decoded tokens exceed the model's positions is skipped with a warning naming it
    (a run over a user's traffic log should not die on one long prompt); a workload with no sample
    left is an error. device / dtype / batch_size: ProfileOptions' (errors name profile.device, ...)."""
    ckpt, draft_ckpt = resolve_pair(Path(ckpt), draft_ckpt)
    devices = resolve_device(device, "profile.device")
    batch_size = batch_size or (GPU_BATCH if any(d.type == "cuda" for d in devices) else 1)
    settings = {w.name: workload_settings(w, sampling, accept_rule, samples_per_prompt) for w in workloads}
    kinds = {estimator(accept_rule, s) for _, ss in settings.values() for s in ss}
    kind = next(k for k in ("approximate", "unbiased", "exact") if k in kinds | {"exact"})
    if ngram_sizes:
        check_ngram_rule(accept_rule)
    models = load_models(ckpt, None if ngram_sizes else draft_ckpt, compute_dtype(dtype, devices, "profile.dtype"),
                         eagle3_head=None if ngram_sizes else eagle3_head, device=devices,
                         fp8_gemm=fp8_gemm)
    if compile_layers:
        models.compile_layers()
    if models.eagle is None and models.draft is None and models.eagle3 is None and not ngram_sizes:
        raise TrtspecError(f"{ckpt}: nothing to profile: give an EagleForCausalLM checkpoint, a pair directory, "
                           "`draft_ckpt` or `eagle3_head`")
    if models.tokenizer is None:
        raise TrtspecError(f"{ckpt}: no tokenizer files; workloads are rendered with the target's chat template")
    mode = ("ngram" if ngram_sizes else "eagle" if models.eagle is not None else "eagle3" if models.eagle3 is not None
            else "draft-target")
    if mode in ("eagle", "eagle3") and any(samples_drafts(accept_rule, d) for _, ds in settings.values() for d in ds):
        raise TrtspecError(f"profile.accept_rule: {accept_rule} needs a chain draft (draft-target); EAGLE drafts "
                           "are accepted by greedy, exact_match or typical_acceptance")
    if mode == "eagle" and max_k > models.eagle.num_levels:
        raise TrtspecError(f"profile.max_k: {max_k} exceeds the checkpoint's num_eagle_layers={models.eagle.num_levels}")
    recorded_top_k = tree_top_k if mode == "eagle" else None
    quant = quantization_record(ckpt)  # either checkpoint format; a unified HF one names the numerics run
    conditions = {"target": str(Path(ckpt).resolve()),
                  "draft": str(Path(draft_ckpt).resolve()) if draft_ckpt else None,
                  "quantization": quant, "temperature": sampling.temperature,
                  "max_new_tokens": max(w.max_new_tokens for w in workloads), "dtype": str(models.target.dtype),
                  "trtspec_version": __version__,
                  "workloads": {w.name: w.manifest() for w in workloads},
                  "sampling": sampling.model_dump(), "accept_rule": accept_rule,
                  "estimator": kind, "samples_per_prompt": samples_per_prompt}
    if eagle3_head is not None and mode == "eagle3":
        conditions["eagle3_head"] = str(Path(eagle3_head).resolve())
    if mode == "ngram":
        conditions |= {"draft": None, "ngram_pool": NGRAM_POOL}
    digest = conditions_hash({"conditions": conditions, "mode": mode, "max_k": max_k, "tree_top_k": recorded_top_k,
                              "schema": PROFILE_SCHEMA,  # samples recorded for another schema are not resumed
                              **({"ngram_sizes": ngram_sizes} if ngram_sizes else {}),
                              **resume_key(ckpt, conditions["draft"], conditions.get("eagle3_head"), devices)})
    done = load_partial(partial, digest, progress)
    samples: dict[str, list[dict]] = {}
    key = {"eagle": "rank_paths", "ngram": "ngram_steps"}.get(mode, "match_lengths")
    for w in workloads:
        if w.name in done:
            samples[w.name] = done[w.name]
            if progress:
                progress(f"profiling {w.name}: reusing its {len(done[w.name])} finished samples from {partial}")
            continue
        base, decodes = settings[w.name]
        n = len(w.samples)
        repeats = len(decodes) // n
        named = [(s.id, render(s, models.tokenizer)) for s in w.samples]
        # profile_prompts decodes max_k + 1 tokens past max_new_tokens; prompts that do not fit are skipped
        fits = {id(x) for x in prompts_within_positions(models, named, w.max_new_tokens + max_k + 1,
                                                        f"workload {w.name}", progress)}
        keep = [i for i, x in enumerate(named) if id(x) in fits]
        prompts = [named[i] for i in keep] * repeats
        decodes = [decodes[r * n + i] for r in range(repeats) for i in keep]
        kept = [w.samples[i] for i in keep]
        if progress:
            progress(f"profiling {w.name}: {len(prompts)} samples x {w.max_new_tokens} tokens ({mode}, "
                     f"{base.label()})")
        profiles = profile_prompts(models, prompts, w.max_new_tokens, max_k, tree_top_k, settings=decodes,
                                   accept_rule=accept_rule, ngram_sizes=ngram_sizes, batch_size=batch_size)
        samples[w.name] = [_record(p, key, s, base) for p, s in zip(profiles, kept * repeats)]
        save_partial(partial, digest, samples)
    return build_profile(mode, max_k, recorded_top_k, conditions, samples,
                         sampling={name: base.model_dump() for name, (base, _) in settings.items()},
                         ngram_sizes=ngram_sizes)


def profile_workloads(ckpt: Path, workloads, options: ProfileOptions, draft_ckpt: Path | None = None,
                      progress=None, partial: Path | None = None, sampling: dict[str, dict] | None = None,
                      eagle3_head: Path | None = None):
    """The profile stage: load the workloads (`NAME=SOURCE` entries) as `options` (the recipe's
    `profile:` section / the `trtspec profile` flags) say, and profile them (resuming from and
    writing to `partial`, see run_profile). sampling: {workload name: its own temperature / top_k /
    top_p} (the recipe's `workloads: {NAME: {source, temperature, ...}}`)."""
    loaded = load_workloads(workloads, seed=options.seed, samples=options.samples,
                            max_new_tokens=options.max_new_tokens, categories=options.categories,
                            sampling=sampling)
    return run_profile(ckpt, loaded, options.max_k, draft_ckpt, options.tree_top_k, progress=progress,
                       partial=partial, sampling=options.sampling(), accept_rule=options.accept_rule,
                       samples_per_prompt=options.samples_per_prompt, eagle3_head=eagle3_head,
                       ngram_sizes=options.ngram_sizes, device=options.device, dtype=options.dtype,
                       batch_size=options.batch_size, compile_layers=options.compile_layers,
                       fp8_gemm=options.fp8_gemm)
