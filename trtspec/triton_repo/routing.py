"""Per-workload routes from tuning.json: what `generate` does with each request's `workload`.

Draft-target: K (num_draft_tokens) per workload and concurrency band, all bands served by one
target/draft pair (K is a per-request setting, so every band costs nothing extra). `generate`
picks the band from the number of requests it has in flight when a request arrives: the largest
tuned band <= in-flight (the smallest band below that; models/serving_rules.py `pick_band`). On
TensorRT-LLM that is the batch the engines will see, which is what the tuning's step-time model was
evaluated at; the cpu flavor steps each request alone, and its tuning prices every band at batch 1
(tune.in_flight_batching). Each request's route label names its band (serving_rules.band_label).

N-gram: the same routes, each band also carrying its max_matching_ngram_size (no draft model; the
orchestration drafts from a per-request pool, so both settings are per request as K is). Several
EAGLE-3 heads (a general head and heads per workload, tuning/choose.py): a band routed to another
head than the general one names it (`draft_head`); the heads share the one loaded target.

EAGLE: `eagle_choices` is a per-model setting, so each served profile is a whole engine instance
(weights, activations and KV cache again, see the README's memory table). Serving every band's
profiles would multiply that by the number of bands, so one band is served (`triton.eagle_band`,
default the smallest: speculation matters most at low concurrency) and its profiles become
`tensorrt_llm_<profile>` models. A profile the tuner left without speculation (eagle_choices null)
still needs a tree (an EAGLE engine always drafts): it gets the cheapest legal one, a chain of
num_eagle_layers nodes.

Unknown or missing `workload` -> the default route. With `triton.default_workload: NAME` that is NAME's
route; otherwise it is computed: draft-target, per band the K with the highest tokens/s summed over
the workloads' tuning sweeps weighted by their profiled token counts (the K a mixed stream of the
tuned traffic would want), drafting only with drafters the choice serves; under
tune.speculate_only_if_clear (recorded in tuning.json) off where that sum's gain over off is inside
its noise, as each workload's band is (select.held_off); the route's `source` says why a band is
off. EAGLE, the profile whose workloads carry the most profiled tokens.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from ..errors import TrtspecError
from ..tuning.select import tokens_per_s_se, within_noise
from .contracts import TENSORRT_LLM, sanitize
from .models.serving_rules import CHAIN_MODES, chain_setting

WORKLOAD_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # trtspec.workloads.spec.NAME_RE


def chain_tree(depth: int) -> list[list[int]]:
    return [[0] * d for d in range(1, depth + 1)]


def check_tuning(tuning, where: str) -> None:
    """Consistency the repository relies on (load_tuning checked the schema)."""
    if not tuning.workloads:
        raise TrtspecError(f"{where}: no workloads")
    bands = sorted(tuning.concurrency_bands)
    for name, w in tuning.workloads.items():
        if not WORKLOAD_NAME_RE.match(name):
            raise TrtspecError(f"{where}: workload name {name!r} is not a plain name (letters, digits, _ . -)")
        got = sorted(b.concurrency for b in w.bands)
        if got != bands:
            raise TrtspecError(f"{where}: workload '{name}' has bands {got}, expected concurrency_bands {bands}")
        for b in w.bands:
            if tuning.mode in CHAIN_MODES and b.draft_len is None:  # (its range: check_tuning_values)
                raise TrtspecError(f"{where}: workload '{name}' band {b.concurrency}: draft_len missing")
    if tuning.mode == "eagle":
        names = {p.name for p in tuning.profiles or []}
        for p in tuning.profiles or []:
            for m in p.workloads:
                if m not in tuning.workloads:
                    raise TrtspecError(f"{where}: profile '{p.name}' names workload '{m}', which is not one of the "
                                       f"tuned workloads ({', '.join(sorted(tuning.workloads))})")
        for name, w in tuning.workloads.items():
            for b in w.bands:
                if b.profile not in names:
                    raise TrtspecError(f"{where}: workload '{name}' band {b.concurrency} names profile "
                                       f"{b.profile!r}, which is not in 'profiles'")


def _check_default(tuning, default_workload: str | None) -> None:
    if default_workload is not None and default_workload not in tuning.workloads:
        raise TrtspecError(f"triton.default_workload: '{default_workload}' is not a workload of the tuning "
                           f"({', '.join(sorted(tuning.workloads))})")


def draft_target_routes(tuning, default_workload: str | None = None) -> dict:
    _check_default(tuning, default_workload)
    bands = sorted(tuning.concurrency_bands)
    table = {name: [_entry(b.concurrency, b.draft_len, b.max_matching_ngram_size, b.drafter)
                    for b in sorted(w.bands, key=lambda b: b.concurrency)]
             for name, w in sorted(tuning.workloads.items())}
    if default_workload is not None:
        default = {"source": f"workload {default_workload}", "bands": table[default_workload]}
    else:
        best = {c: _best_shared(tuning, c) for c in bands}
        clear = ", served only where clear of the AL noise: tune.speculate_only_if_clear" \
            if tuning.speculate_only_if_clear else ""
        why = "".join(f"; off at concurrency {c}: {best[c].off_because}" for c in bands if best[c].off_because)
        default = {"source": f"computed (K with the highest token-weighted tokens/s over the tuned workloads{clear})"
                             + why, "bands": [_entry(c, best[c].draft_len, best[c].ngram_size) for c in bands]}
    return {"mode": tuning.mode, "bands": bands, "workloads": table, "default": default}


def _entry(concurrency: int, k, ngram_size: int | None, drafter: str | None = None) -> dict:
    """One band's route: K, an n-gram band's max_matching_ngram_size, and the EAGLE-3 head of a band
    the drafter choice gave another head than the general one (`draft_head`: its drafter name)."""
    e = {"concurrency": concurrency, "num_draft_tokens": int(k)}
    if ngram_size is not None:
        e["max_matching_ngram_size"] = int(ngram_size)
    if drafter not in (None, "ngram") and k:
        e["draft_head"] = drafter
    return e


def served_drafters(tuning) -> tuple[bool, bool]:
    """(the model drafter served, n-gram served): a drafter the choice left out (the memory budget,
    tuning/choose.py) is not the repository's to draft with, for the default route either. Without a
    choice, the tuning's one drafter. (Another head served brings the general one: choose._loadable.)"""
    if tuning.choice is None:
        return True, True
    served = [d.mode for d in tuning.choice.drafters.values() if d.served]
    return any(m != "ngram" for m in served), "ngram" in served


def drafts_ngrams_only(tuning) -> bool:
    """A draft-target or EAGLE-3 tuning whose choice left the draft model (or head) out: its repository
    drafts n-grams only, so it neither loads the draft nor needs one given (repo.py)."""
    return tuning.mode in ("draft-target", "eagle3") and not served_drafters(tuning)[0]


class SharedSetting(NamedTuple):
    draft_len: int
    ngram_size: int | None = None
    off_because: str | None = None  # why the default route is off at this band, when it is


def _best_shared(tuning, concurrency: int) -> SharedSetting:
    """The setting (K, n-gram size or None) with the highest token-weighted tokens/s over the
    workloads' sweeps, among the settings of served drafters and off (every drafter's sweep has
    its own K = 0 point: counted once per workload). With tune.speculate_only_if_clear a setting whose
    token-weighted gain over off is inside its noise is off, as select.held_off rules per workload:
    the workloads' errors are independent, so the sum's SE is sqrt(sum((weight x SE)^2)); one
    workload's unknown SE makes the sum's unknown, and so not clear (select.se_unknown)."""
    model, ngram = served_drafters(tuning)
    score: dict[tuple, float] = {}
    var: dict[tuple, float | None] = {}  # None: a point without a standard error
    seen: dict[tuple, int] = {}
    for w in tuning.workloads.values():
        band = next(b for b in w.bands if b.concurrency == concurrency)
        points = {(p.draft_len, p.max_matching_ngram_size): p for p in band.sweep
                  if p.draft_len is not None and p.label is None  # (a labelled chain: another head's, choose.py)
                  and (not p.draft_len or (ngram if p.max_matching_ngram_size is not None else model))}
        for key, p in points.items():
            score[key] = score.get(key, 0.0) + w.num_tokens * p.tokens_per_s
            se = None if p.acceptance_length_se is None else \
                w.num_tokens * tokens_per_s_se(p.tokens_per_s, p.acceptance_length, p.acceptance_length_se)
            var[key] = None if se is None or var.get(key, 0.0) is None else var.get(key, 0.0) + se ** 2
            seen[key] = seen.get(key, 0) + 1
    full = [k for k, n in seen.items() if n == len(tuning.workloads)]
    if not full:  # no setting was swept for every workload: the most common tuned choice
        ks = [(b.draft_len, b.max_matching_ngram_size) for w in tuning.workloads.values()
              for b in w.bands if b.concurrency == concurrency]
        return SharedSetting(*max(set(ks), key=lambda k: (ks.count(k), -k[0], -(k[1] or 0))))
    best = max(full, key=lambda k: (score[k], -k[0], -(k[1] or 0)))
    if not best[0]:
        return SharedSetting(0, None, "off predicts the most tokens/s")
    off = score.get((0, None))
    if not (tuning.speculate_only_if_clear and off):
        return SharedSetting(*best)
    gain = f"{chain_setting(*best)} (x{score[best] / off:.3f} token-weighted)"
    if var[best] is None:  # select.se_unknown: a workload's AL has no standard error
        return SharedSetting(0, None, f"{gain} is not shown clear of off: a workload's AL has no standard error "
                             "(fewer than 2 profiled prompts)")
    if within_noise(score[best] - off, math.sqrt(var[best])):
        return SharedSetting(0, None, f"{gain} is not distinguishable from off (95%, the profiled AL standard errors)")
    return SharedSetting(*best)


def served_band(tuning, band: int | None) -> int:
    """The one concurrency band served where a repository cannot route by load: EAGLE engines (a
    model per tree profile) and the llmapi flavor (an LLM instance per setting); serving every band
    would multiply those models. triton.eagle_band picks it; default the smallest."""
    bands = sorted(tuning.concurrency_bands)
    band = bands[0] if band is None else band
    if band not in bands:
        raise TrtspecError(f"triton.eagle_band: {band} is not a tuned concurrency band ({', '.join(map(str, bands))})")
    return band


def eagle_routes(tuning, band: int | None = None, default_workload: str | None = None,
                 num_eagle_layers: int | None = None) -> dict:
    """Routes plus the served profiles (one tensorrt_llm_<profile> model each) at one band."""
    _check_default(tuning, default_workload)
    band = served_band(tuning, band)
    depth = num_eagle_layers or (tuning.eagle.num_eagle_layers if tuning.eagle else None)
    profiles = [p for p in tuning.profiles or [] if p.concurrency == band]
    models, by_profile = [], {}
    for p in profiles:
        name = f"{TENSORRT_LLM}_{sanitize(p.name)}"
        if name in {m["model"] for m in models}:
            raise TrtspecError(f"tuning: profiles at band {band} sanitize to the same model name {name!r}")
        choices = p.eagle_choices if p.eagle_choices else chain_tree(depth or 1)
        entry = {"model": name, "profile": p.name, "workloads": sorted(p.workloads), "eagle_choices": choices,
                 "num_draft_tokens": len(choices), "speculate": bool(p.eagle_choices),
                 "mean_throughput_loss": p.mean_throughput_loss}
        models.append(entry)
        by_profile[p.name] = entry
    table = {}
    for name, w in sorted(tuning.workloads.items()):
        b = next(b for b in w.bands if b.concurrency == band)
        e = by_profile.get(b.profile)
        if e is None:
            raise TrtspecError(f"tuning: workload '{name}' at band {band} names profile {b.profile!r}, "
                               "which is not served at that band")
        table[name] = {"model": e["model"], "profile": e["profile"], "num_draft_tokens": e["num_draft_tokens"]}
    if default_workload is not None:
        default = {"source": f"workload {default_workload}", **table[default_workload]}
    else:
        weight = {e["model"]: sum(tuning.workloads[m].num_tokens for m in e["workloads"]) for e in models}
        best = max(models, key=lambda e: (weight[e["model"]], -e["mean_throughput_loss"], e["model"]))
        default = {"source": "computed (the profile serving the most profiled tokens)", "model": best["model"],
                   "profile": best["profile"], "num_draft_tokens": best["num_draft_tokens"]}
    return {"mode": "eagle", "band": band, "bands": sorted(tuning.concurrency_bands), "workloads": table, "default": default, "models": models}


def tree_problems(choices: list[list[int]], max_draft_len: int, num_eagle_layers: int | None,
                  max_non_leaves: int | None) -> list[str]:
    """TRT-LLM's eagle_choices rules (reference §3.3): prefix-closed, no duplicates, at most
    max_draft_len nodes, depth == num_eagle_layers, at most max_non_leaves non-leaves per level."""
    probs = []
    paths = [tuple(c) for c in choices]
    if any(not p or any(i < 0 for i in p) for p in paths):
        probs.append("a choice is empty or has a negative index")
        return probs
    if len(set(paths)) != len(paths):
        probs.append("duplicate choices")
    present = set(paths)
    missing = next((p for p in paths for d in range(1, len(p)) if p[:d] not in present), None)
    if missing is not None:
        probs.append(f"{list(missing)} is present but its prefix is not")
    if max_draft_len and len(present) > max_draft_len:
        probs.append(f"{len(present)} nodes exceed the engine's max_draft_len {max_draft_len}")
    depth = max(len(p) for p in paths)
    if num_eagle_layers is not None and depth != num_eagle_layers:
        probs.append(f"depth {depth} differs from num_eagle_layers {num_eagle_layers}")
    if max_non_leaves is not None:
        for d in range(1, depth):
            n = len({p[:d] for p in present if len(p) > d})
            if n > max_non_leaves:
                probs.append(f"{n} non-leaf nodes at depth {d} exceed max_non_leaves_per_layer {max_non_leaves}")
    return probs
