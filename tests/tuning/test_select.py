"""Selection: K = 0 for a useless draft, a long K for a perfect one; EAGLE trees obey TRT-LLM's rules,
the greedy growth is exact for its surrogate, never loses to the top-1 chain or the default tree;
grouping serves at most N trees per band."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from trtspec.upstream import trtllm
from trtspec.errors import TrtspecError
from trtspec.tuning import grouping
from trtspec.tuning.acceptance import chain_choices, replay_tree
from trtspec.tuning.cost import CostModel, ModelShape
from trtspec.tuning.gpus import gpu_preset
from trtspec.tuning.select import SelectConfig, chain_sweep, tune_draft_target, tune_eagle
from trtspec.tuning.synthetic import chain_profile, eagle_profile, example_cost_model, rank_path
from trtspec.tuning.trees import accepted_array, best_trees, check_tree, level_sizes, node_stats, replay_al

BANDS = [1, 4, 16, 64, 256]


def test_useless_draft_is_switched_off():
    p = chain_profile({"junk": 0.0}, num_samples=4, T=64)
    w = tune_draft_target(p, example_cost_model("draft-target"), SelectConfig(concurrency_bands=BANDS))["junk"]
    for band in w.bands:
        assert (band.draft_len, band.speculate, band.acceptance_length, band.speedup) == (0, False, 1.0, 1.0)
        assert band.tokens_per_s == pytest.approx(band.concurrency / band.baseline_step_time_s)


def test_perfect_draft_gets_the_longest_chain():
    p = chain_profile({"copy": 1.0}, num_samples=2, T=64, max_k=8)
    # 63 tokens after the prefill's, k + 1 per step but the last, which counts only what is left
    assert p.workloads["copy"].accept_length_by_k == {str(k): 63 / math.ceil(63 / (k + 1)) for k in range(1, 9)}
    w = tune_draft_target(p, example_cost_model("draft-target"), SelectConfig(concurrency_bands=[1, 4]))["copy"]
    for band in w.bands:
        assert band.draft_len == 8 and band.acceptance_length == 9.0 and band.speedup > 2.0
        assert [s.draft_len for s in band.sweep] == list(range(9))


def test_draft_length_shrinks_as_verify_becomes_compute_bound():
    p = chain_profile({"code": 0.85}, num_samples=8, T=256, max_k=10, seed=2)
    w = tune_draft_target(p, example_cost_model("draft-target"), SelectConfig(concurrency_bands=BANDS))["code"]
    ks = [b.draft_len for b in w.bands]
    assert ks[0] >= 3 and ks[-1] < ks[0] and ks == sorted(ks, reverse=True)
    for band in w.bands:  # the recorded choice is the best of its sweep
        assert band.tokens_per_s == max(s.tokens_per_s for s in band.sweep)
        assert band.speedup == pytest.approx(band.tokens_per_s / band.baseline_tokens_per_s)


def test_a_server_that_steps_each_request_alone_gets_the_batch_1_choice_in_every_band():
    """CostModel.in_flight_batching False (the cpu flavor's thread per request): every band is priced
    at batch 1, so each gets the band-1 choice and speedup, while tokens/s still counts b requests."""
    p = chain_profile({"code": 0.85}, num_samples=8, T=256, max_k=10, seed=2)
    batched = example_cost_model("draft-target")
    alone = batched.model_copy(update={"in_flight_batching": False})
    w = tune_draft_target(p, alone, SelectConfig(concurrency_bands=BANDS))["code"]
    one = tune_draft_target(p, batched, SelectConfig(concurrency_bands=[1]))["code"].bands[0]
    assert [b.draft_len for b in tune_draft_target(p, batched, SelectConfig(concurrency_bands=BANDS))["code"].bands] \
        != [one.draft_len] * len(BANDS)  # with batching the choice moves with the band (the test above)
    for band in w.bands:
        assert (band.draft_len, band.step_time_s) == (one.draft_len, one.step_time_s)
        assert band.speedup == pytest.approx(one.speedup)
        assert band.tokens_per_s == pytest.approx(band.concurrency * one.tokens_per_s)


# landscape.md §4.2: optimal gamma (1..20) and speedup from S(a, g, c) = (1 - a^(g+1)) / ((1 - a)(g c + 1))
LEVIATHAN = {0.02: [(6, 2.17), (8, 2.76), (11, 3.82), (19, 6.37)], 0.05: [(4, 1.92), (6, 2.35), (8, 3.09), (13, 4.67)],
             0.10: [(3, 1.67), (4, 1.98), (6, 2.47), (10, 3.43)], 0.20: [(2, 1.40), (3, 1.58), (4, 1.87), (7, 2.37)]}


@pytest.mark.parametrize("c", list(LEVIATHAN))
def test_objective_reproduces_the_optimal_gamma_table(c):
    """With the paper's assumptions (target step time independent of K: memory-bound, no KV, no
    overhead; draft = c x target; i.i.d. acceptance, so AL(K) is the closed form) the selection
    objective picks the table's gamma* and speedup for every (alpha, c)."""
    gpu = gpu_preset("h100").model_copy(update={"forward_overhead_s": 0.0})

    def shape(layers, role):
        return ModelShape(name=role, role=role, num_layers=layers, hidden_size=1024, num_heads=8, num_kv_heads=8,
                          head_size=128, intermediate_size=4096, vocab_size=1, weight_bytes=2.0, lm_head_bytes=2.0,
                          kv_bytes=0.0, compute_dtype="bf16")

    cost = CostModel(gpu=gpu, target=shape(100, "target"), draft=shape(round(100 * c), "draft"))
    for alpha, (gamma, speedup) in zip((0.6, 0.7, 0.8, 0.9), LEVIATHAN[c]):
        als = [(1 - alpha ** (k + 1)) / (1 - alpha) for k in range(21)]
        sweep, _, k = chain_sweep(als, cost, 1, 0.0)
        assert k == gamma and sweep[k].tokens_per_s / sweep[0].tokens_per_s == pytest.approx(speedup, abs=0.005)


# ---- EAGLE trees --------------------------------------------------------------------------------

def surrogate(stats, nodes) -> int:
    return sum(stats.count(tuple(v)) for v in nodes)


@pytest.mark.parametrize("seed", range(6))
def test_greedy_growth_is_exact_for_its_surrogate(seed):
    """Without a binding non-leaf cap, the best tree per size found by growth equals brute force over
    every prefix-closed node set of that size reaching full depth (top_k 3, depth 2: 12 nodes)."""
    rng = random.Random(seed)
    alpha, miss = rng.uniform(0.2, 0.7), rng.uniform(0.0, 0.3)
    samples = [[rank_path(alpha, miss, 2, 3, rng) for _ in range(rng.randint(5, 40))] for _ in range(3)]
    stats = node_stats(samples, 2)
    allnodes = [(a,) for a in range(3)] + [(a, b) for a in range(3) for b in range(3)]
    found = best_trees(stats, 2, 7, max_non_leaves=99, top_k=3)
    for n in range(2, 8):
        best = max((surrogate(stats, s) for s in itertools.combinations(allnodes, n)
                    if all(v[:1] in s for v in s) and max(map(len, s)) == 2), default=None)
        if n in found:
            assert surrogate(stats, found[n]) == best, n
        else:  # growth stops when no further node is ever hit: bigger trees cannot accept more
            assert best == surrogate(stats, found[max(found)])


def test_accepted_array_matches_replay_tree():
    rng = random.Random(4)
    samples = [[rank_path(0.6, 0.1, 3, 4, rng) for _ in range(50)] for _ in range(4)]
    stats = node_stats(samples, 3)
    for nodes in best_trees(stats, 3, 12, 2, 4).values():
        assert replay_al(stats, accepted_array(stats, nodes)) == pytest.approx(
            replay_tree(samples, [list(v) for v in nodes]).acceptance_length, abs=1e-12)


def eagle_cfg(**kw):
    return SelectConfig(concurrency_bands=BANDS, **kw)


WORKLOADS = {"chat": (0.55, 0.1), "code": (0.8, 0.03), "math": (0.7, 0.05), "sum": (0.65, 0.08), "qa": (0.5, 0.15)}


@pytest.fixture(scope="module")
def eagle_prof():
    return eagle_profile(WORKLOADS, num_samples=6, T=160, depth=4, top_k=10, seed=7)


def test_trees_respect_trtllm_rules(eagle_prof):
    cfg = eagle_cfg(num_eagle_layers=3, eagle_node_budget=20, max_non_leaves=2)
    tuned, _ = tune_eagle(eagle_prof, example_cost_model("eagle"), cfg)
    for w in tuned.values():
        assert w.bands[0].eagle_choices is not None  # at concurrency 1 a tree always pays here
        for band in w.bands:
            if band.eagle_choices is None:  # no speculation can win at high concurrency
                continue
            check_tree(band.eagle_choices, depth=3, budget=20, max_non_leaves=2, top_k=10)
            assert band.eagle_choices == sorted(band.eagle_choices, key=lambda p: (len(p), p))
    stats = node_stats([s.rank_paths for s in eagle_prof.workloads["code"].samples], 3)
    for n, nodes in best_trees(stats, 3, 20, 2, 10).items():
        assert len(nodes) == n
        check_tree([list(v) for v in nodes], depth=3, budget=20, max_non_leaves=2, top_k=10)


def test_never_worse_than_the_chain_or_the_default_tree(eagle_prof):
    cost = example_cost_model("eagle")
    tuned, served = tune_eagle(eagle_prof, cost, eagle_cfg(num_eagle_layers=4))
    assert len({p.name for p in served}) == len(served)
    for name, w in tuned.items():
        samples = [s.rank_paths for s in eagle_prof.workloads[name].samples]
        for band in w.bands:
            for choices in (chain_choices(4), trtllm.MC_SIM_7B_63):
                al = replay_tree(samples, choices).acceptance_length
                st = cost.eagle_step(band.concurrency, level_sizes(choices, 4), len(choices), w.context_tokens)
                assert band.tokens_per_s >= band.concurrency * al / st.total_s * (1 - 1e-12)
            assert band.tokens_per_s == band.own_best_tokens_per_s  # no grouping: each its own best
    assert any(p.label == "default" for p in tuned["chat"].bands[0].sweep)


def test_grouping_serves_at_most_n_trees_per_band(eagle_prof):
    cost = example_cost_model("eagle")
    for n in (1, 2):
        tuned, served = tune_eagle(eagle_prof, cost, eagle_cfg(num_eagle_layers=4, max_profiles=n))
        for b in BANDS:
            profiles = [p for p in served if p.concurrency == b]
            assert 1 <= len(profiles) <= n
            members = [m for p in profiles for m in p.workloads]
            assert sorted(members) == sorted(WORKLOADS)  # each workload in exactly one profile
            for p in profiles:
                assert p.mean_throughput_loss >= 0
                for m in p.workloads:
                    band = next(x for x in tuned[m].bands if x.concurrency == b)
                    assert band.profile == p.name and band.eagle_choices == p.eagle_choices
                    assert band.tokens_per_s <= band.own_best_tokens_per_s * (1 + 1e-12)


def test_useless_eagle_head_is_switched_off():
    p = eagle_profile({"junk": (0.0, 1.0)}, num_samples=2, T=40, depth=3, top_k=4)
    tuned, served = tune_eagle(p, example_cost_model("eagle"), eagle_cfg())
    assert all(not b.speculate and b.eagle_choices is None and b.speedup == 1.0 for b in tuned["junk"].bands)
    assert all(s.eagle_choices is None and s.num_nodes == 0 for s in served)


def test_eagle_limits_are_checked(eagle_prof):
    with pytest.raises(TrtspecError, match="exceeds the profiled depth"):
        tune_eagle(eagle_prof, example_cost_model("eagle"), eagle_cfg(num_eagle_layers=5))
    with pytest.raises(TrtspecError, match="budget 2 is smaller than num_eagle_layers=4"):
        tune_eagle(eagle_prof, example_cost_model("eagle"), eagle_cfg(num_eagle_layers=4, eagle_node_budget=2))



def test_eagle_limits_of_a_config_without_the_fields_are_the_engines(eagle_prof):
    """An EAGLE config.json without num_eagle_layers / max_draft_len is built by EagleConfig's
    defaults (1 layer, 63 nodes), not the converter's 4 layers: the tuner sizes trees for that engine."""
    from trtspec.tuning.tune import eagle_limits

    got = eagle_limits(eagle_prof, {}, eagle_cfg(), None)
    assert (got.num_eagle_layers, got.eagle_node_budget) == (1, trtllm.EAGLE_DEFAULT_MAX_DRAFT_LEN)
    assert eagle_limits(eagle_prof, {"num_eagle_layers": 3}, eagle_cfg(), 7).num_eagle_layers == 3

# ---- k-medoids -----------------------------------------------------------------------------------

def brute(loss, n):
    return min(grouping._cost(loss, c) for k in range(1, n + 1)
               for c in itertools.combinations(range(loss.shape[1]), k))


@pytest.mark.parametrize("seed", range(5))
def test_medoids_exact_and_swap_search(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    loss = rng.uniform(0, 1, (7, 7))
    np.fill_diagonal(loss, 0.0)
    for n in (1, 2, 3):
        chosen = grouping.choose_medoids(loss, n)
        assert len(chosen) <= n and grouping._cost(loss, chosen) == pytest.approx(brute(loss, n))
    monkeypatch.setattr(grouping, "EXACT_LIMIT", 0)  # force greedy + swaps
    chosen = grouping.choose_medoids(loss, 3)
    assert len(chosen) == 3 and grouping._cost(loss, chosen) <= grouping._cost(loss, chosen[:1]) + 1e-12
    assert grouping.assign(loss, chosen) == [chosen[int(np.argmin(loss[i, chosen]))] for i in range(7)]


def test_the_exact_medoid_search_is_bounded_by_the_subsets_it_visits(monkeypatch):
    """Exact search enumerates every subset of at most n columns: at n = C that is 2^C - 1, not
    C(C, n) = 1 (max_profiles None over many workloads). Past EXACT_LIMIT it must fall back to greedy
    + swaps, which still serves every workload its own column (loss 0) when n = C."""
    rng = np.random.default_rng(0)
    loss = rng.uniform(0.1, 1, (10, 10))
    np.fill_diagonal(loss, 0.0)
    calls = []
    cost = grouping._cost
    monkeypatch.setattr(grouping, "_cost", lambda l, c: calls.append(1) or cost(l, c))
    monkeypatch.setattr(grouping, "EXACT_LIMIT", 50)
    chosen = grouping.choose_medoids(loss, 10)
    assert cost(loss, chosen) == 0.0
    assert len(calls) <= 10 * 11 // 2 + 10 * 10  # greedy build + one swap pass, far below 2^10 - 1 = 1023


def test_settings_within_the_al_standard_errors_are_reported_as_not_distinguishable():
    """A 3-prompt profile: K=1..4 predict throughputs within the noise of their AL standard errors, so
    the summary names them instead of presenting the argmax as a winner; 64 long prompts separate
    them. The choice recorded in tuning.json is the argmax either way."""
    from trtspec.tuning.report import indistinguishable_lines
    from trtspec.tuning.tuning_schema import Tuning
    from trtspec.tuning.select import indistinguishable

    cost = example_cost_model("draft-target")
    noisy = tune_draft_target(chain_profile({"code": 0.6}, num_samples=3, T=24, max_k=6, seed=1), cost,
                              SelectConfig(concurrency_bands=[1]))["code"]
    band = noisy.bands[0]
    assert noisy.num_prompts == 3  # tuning.json records the prompts the standard errors are over
    assert band.tokens_per_s == max(s.tokens_per_s for s in band.sweep)  # still the argmax
    ks = indistinguishable(band, noisy.accept_length_se_by_k)
    assert ks and band.draft_len not in ks and 0 not in ks  # K=0 (SE 0) is far below: distinguishable
    for k in ks:  # by hand: |difference| <= 1.96 * sqrt(SE_k^2 + SE_K*^2), SE of tok/s = tok/s * SE(AL) / AL
        p, c = band.sweep[k], band.sweep[band.draft_len]
        se = [q.tokens_per_s * noisy.accept_length_se_by_k[str(q.draft_len)] / q.acceptance_length for q in (p, c)]
        assert abs(p.tokens_per_s - c.tokens_per_s) <= 1.96 * np.hypot(*se)
    assert indistinguishable(band, {k: v / 100 for k, v in noisy.accept_length_se_by_k.items()}) == []
    # no standard errors (a tuning.json from before them): nothing is told apart from the choice
    assert indistinguishable(band, None) == [k for k in range(7) if k != band.draft_len]
    clean = tune_draft_target(chain_profile({"code": 0.6}, num_samples=64, T=512, max_k=6, seed=1), cost,
                              SelectConfig(concurrency_bands=[1]))["code"]
    assert indistinguishable(clean.bands[0], clean.accept_length_se_by_k) == []
    tuning = Tuning.model_construct(mode="draft-target", workloads={"code": noisy})
    lines = indistinguishable_lines(tuning)
    assert lines == [f"code c=1: K={band.draft_len} is not distinguishable from " + ", ".join(f"K={k}" for k in ks)
                     + f" (95%, AL standard errors over 3 prompts; predicted {band.tokens_per_s:,.0f} tok/s is not "
                     "a clear winner)"]
    assert indistinguishable_lines(Tuning.model_construct(mode="draft-target", workloads={"code": clean})) == []


def _served_band(drafter, al, se, tps, base, **setting):
    from trtspec.tuning.tuning_schema import BandChoice

    return BandChoice(concurrency=1, speculate=True, drafter=drafter, acceptance_length=al, acceptance_length_se=se,
                      step_time_s=al / tps, draft_step_s=0.0, target_step_s=al / tps, tokens_per_s=tps,
                      baseline_step_time_s=1 / base, baseline_tokens_per_s=base, speedup=tps / base,
                      own_best_tokens_per_s=tps, sweep=[], **setting)


def test_an_ngram_or_tree_choice_within_its_al_noise_of_off_is_reported_as_not_distinguishable_from_off():
    """Bands without per-K standard errors (n-gram, another head, an EAGLE tree) are compared with off
    from their own AL's: the demo's chat band (n-gram K=1, AL 1.20 +- 0.145 over 4 prompts, 99.9 vs
    93.8 tok/s) is within the noise (SE of tok/s 12.0, 1.96 x 12.0 = 23.6 > 6.1); its edit band (AL
    4.00 +- 0.13, 239 vs 92 tok/s) is not; nor is the chat band measured on 100x the prompts."""
    from trtspec.tuning.report import indistinguishable_lines
    from trtspec.tuning.tuning_schema import Tuning, WorkloadTuning
    from trtspec.tuning.select import indistinguishable, prompts_to_separate_from_off

    chat = _served_band("ngram", 1.2039, 0.1446, 99.92, 93.80, draft_len=1, max_matching_ngram_size=3)
    edit = _served_band("ngram", 4.00, 0.13, 239.3, 92.0, draft_len=4, max_matching_ngram_size=2)
    assert indistinguishable(chat, None) == [0] and indistinguishable(edit, None) == []
    assert indistinguishable(chat.model_copy(update={"acceptance_length_se": 0.01}), None) == []
    assert indistinguishable(chat.model_copy(update={"acceptance_length_se": None}), None) == [0]  # unknown: not clear
    tree = _served_band(None, 1.3, 0.2, 105.0, 100.0, eagle_choices=[[0], [0, 0]], profile="p0")
    assert indistinguishable(tree, None) == [0]
    wt = WorkloadTuning.model_construct(num_samples=4, bands=[chat], accept_length_se_by_k=None)
    (line,) = indistinguishable_lines(Tuning.model_construct(mode="eagle3", workloads={"chat": wt}))
    assert line.startswith("chat c=1: ngram K=1 n=3 is not distinguishable from off (K=0) (95%, AL standard "
                           "errors over 4 prompts; predicted 100 tok/s")
    # how many prompts would tell it from off, if AL and spread hold: 4 * (1.96 * 12.0 / 6.12)^2 = 59.1
    assert line.endswith("; ~60 prompts would separate it from off at this AL)")
    assert prompts_to_separate_from_off(chat, 4) == 60 and prompts_to_separate_from_off(edit, 4) == 1
    # 2 sampled draws of each of the 4 prompts (profile.samples_per_prompt): the errors are over 4 prompts
    wt = WorkloadTuning.model_construct(num_samples=8, num_prompts=4, bands=[chat], accept_length_se_by_k=None)
    (drawn,) = indistinguishable_lines(Tuning.model_construct(mode="eagle3", workloads={"chat": wt}))
    assert drawn == line
    assert prompts_to_separate_from_off(chat.model_copy(update={"speculate": False}), 4) is None


def test_held_off_serves_off_where_the_choice_is_not_distinguishable_from_off():
    """tune.speculate_only_if_clear on the demo's bands (previous test): chat's n-gram K=1 (x1.07,
    inside its AL noise) becomes off at the baseline's step and tokens/s and records what it held
    back; edit's clear K=4, and a band already off, are returned unchanged."""
    from trtspec.tuning.report import setting_text
    from trtspec.tuning.select import held_off, indistinguishable

    chat = _served_band("ngram", 1.2039, 0.1446, 99.92, 93.80, draft_len=1, max_matching_ngram_size=3)
    edit = _served_band("ngram", 4.00, 0.13, 239.3, 92.0, draft_len=4, max_matching_ngram_size=2)
    off = held_off(chat, None)
    assert (off.speculate, off.draft_len, off.max_matching_ngram_size, off.acceptance_length) == (False, 0, None, 1.0)
    assert (off.tokens_per_s, off.step_time_s, off.speedup, off.draft_step_s) == (93.80, 1 / 93.80, 1.0, 0.0)
    assert off.drafter == "ngram" and off.held_off == chat and indistinguishable(off, None) == []
    assert setting_text(off) == "off (held ngram K=1 n=3 x1.07: not clear)"
    assert held_off(edit, None) is edit and held_off(off, None) is off


def test_a_choice_profiled_on_one_prompt_has_no_standard_error_and_is_not_clear():
    """One distinct prompt (here 2 sampled draws of it) gives an AL but no standard error (ratio_se:
    no spread between prompts to measure). That least evidence must not pass for a clear gain: the
    chosen K is not distinguishable from off or any K, tune.speculate_only_if_clear holds it off,
    and the table and notes say its standard error is unknown rather than print none or 0."""
    from trtspec.tuning.report import al_text, indistinguishable_lines
    from trtspec.tuning.select import held_off, indistinguishable, se_unknown
    from trtspec.tuning.tuning_schema import Tuning

    prof = chain_profile({"code": 0.6}, num_samples=2, T=64, max_k=4, seed=1)
    for s in prof.workloads["code"].samples:
        s.id = "code-0"
    w = tune_draft_target(prof, example_cost_model("draft-target"), SelectConfig(concurrency_bands=[1]))["code"]
    band = w.bands[0]
    assert w.num_prompts == 1 and band.speculate and band.speedup > 1.1  # the premise: a gain, over one prompt
    assert band.acceptance_length_se is None and set(w.accept_length_se_by_k.values()) == {None}
    assert se_unknown(band)
    assert indistinguishable(band, w.accept_length_se_by_k) == [k for k in range(5) if k != band.draft_len]
    off = held_off(band, w.accept_length_se_by_k)
    assert not off.speculate and off.draft_len == 0 and off.held_off.draft_len == band.draft_len

    def text(bands) -> list[str]:
        tuning = Tuning.model_construct(mode="draft-target", workloads={"code": w.model_copy(update={"bands": bands})})
        return indistinguishable_lines(tuning)
    assert text([band]) == [f"code c=1: K={band.draft_len} (x{band.speedup:.2f}) is not shown clear of off: its AL "
                            "has no standard error (over 1 prompt; a spread needs 2 or more)"]
    assert text([off]) == [f"code c=1: served off: K={band.draft_len} (x{band.speedup:.2f}, AL "
                           f"{band.acceptance_length:.2f} ±? over 1 prompt) is not shown clear of off: its AL has no "
                           "standard error (tune.speculate_only_if_clear)"]
    assert al_text(band) == f"{band.acceptance_length:.2f} ±?" and al_text(off) == "1.00"  # the table's AL column
    # an n-gram or tree choice without a standard error is not clear of off either
    ngram = _served_band("ngram", 4.00, None, 239.3, 92.0, draft_len=4, max_matching_ngram_size=2)
    assert indistinguishable(ngram, None) == [0] and not held_off(ngram, None).speculate


def test_other_heads_chains_in_a_merged_sweep_are_not_compared_with_the_general_heads_errors():
    """A drafter choice's sweep holds every head's chain (choose._merged, cheapest drafter first);
    a band served by the general head is compared with its own K's, not another head's."""
    from trtspec.tuning.tuning_schema import BandChoice, SweepPoint
    from trtspec.tuning.select import indistinguishable

    def points(tps: list[float], label=None):
        als = [1.0, 1.5, 1.8, 1.9]
        return [SweepPoint(draft_len=k, label=label, acceptance_length=als[k], step_time_s=als[k] / t, tokens_per_s=t)
                for k, t in enumerate(tps)]

    sweep = points([100.0, 300.0, 200.0, 199.0], "eagle3-chat") + points([100.0, 150.0, 152.0, 120.0])
    band = BandChoice(concurrency=1, speculate=True, draft_len=2, acceptance_length=1.8, acceptance_length_se=0.05,
                      step_time_s=1.8 / 152.0, draft_step_s=0.0, target_step_s=1.8 / 152.0, tokens_per_s=152.0,
                      baseline_step_time_s=0.01, baseline_tokens_per_s=100.0, speedup=1.52,
                      own_best_tokens_per_s=300.0, sweep=sweep)
    assert indistinguishable(band, {"1": 0.05, "2": 0.05, "3": 0.05}) == [1]  # 150 vs 152, not the head's 199
