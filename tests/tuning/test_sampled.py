"""Profiles at temperature T > 0 (trtspec.tuning.sampled): the replay of a sampled profile is, for
the same seeds, exactly what speculative decoding under exact_match does (per sample: output,
verify steps, accepted counts), for every K on the tiny draft-target pair and for two EAGLE trees;
with other seeds the runtime's mean AL lies within 2 standard errors of the prediction.
"""

from __future__ import annotations

import pytest
import torch

from triton_fixtures import TREE_A, TREE_B, tiny_eagle, tiny_pair
from trtspec.errors import TrtspecError
from trtspec.options import Sampling
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.tuning.acceptance import acceptance_length_se, chain_accepted, replay_chain, replay_tree
from trtspec.tuning.profile import profile_prompts
from trtspec.tuning.sampled import decode_settings, estimator, with_overrides

NEW, MAX_K, SEED = 24, 5, 1000
pytestmark = pytest.mark.usefixtures("one_torch_thread")
SHARPEN = 8.0  # peaked tiny models: at T = 0.7 the draft is right often, not always
T07 = Sampling(temperature=0.7, seed=SEED)


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("sampled_pair"), sharpen=SHARPEN)


@pytest.fixture(scope="module")
def pair(pair_dir):
    return load_models(pair_dir)


@pytest.fixture(scope="module")
def eagle_dir(tmp_path_factory):
    return tiny_eagle(tmp_path_factory.mktemp("sampled_eagle"), sharpen=SHARPEN)


@pytest.fixture(scope="module")
def eagle(eagle_dir):
    return load_models(eagle_dir)


def prompts(n: int, seed: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 1000, (int(k),), generator=g).tolist() for k in torch.randint(2, 9, (n,), generator=g)]


def profile(models, ps, sampling: Sampling, max_k: int = MAX_K):
    """Sample j draws with sampling.seed + j, as generate_batch seeds row j of one batch."""
    settings = [sampling.model_copy(update={"seed": sampling.seed + j}) for j in range(len(ps))]
    return profile_prompts(models, [(str(j), p) for j, p in enumerate(ps)], NEW, max_k, ignore_eos=True,
                           settings=settings)


def check_same(rep, stats) -> None:
    assert rep.steps == stats.verify_steps
    assert rep.tokens == sum(s.accepted + 1 for s in stats.steps)
    assert rep.accepted_at == stats.accepted_at() and rep.reached == stats.reached()


def test_chain_prediction_is_exact_per_seed(pair):
    ps = prompts(4)
    profiled = profile(pair, ps, T07)
    greedy = profile(pair, ps, Sampling())
    assert [p.output_ids for p in profiled] != [g.output_ids for g in greedy]  # really sampled
    assert [p.seed for p in profiled] == [SEED + j for j in range(4)] and greedy[0].seed is None
    seen = set()
    for k in range(1, MAX_K + 1):
        results = generate_batch(pair, ps, NEW, mode="draft-target", draft_len=k, sampling=T07,
                                 accept="exact_match", ignore_eos=True)
        for sp, r in zip(profiled, results):
            assert r.output_ids == sp.output_ids  # keyed draws: the speculative output is the sampled one
            rep = replay_chain([sp.match_lengths], k)
            check_same(rep, r.stats)
            seen.add(rep.steps)
    assert len(seen) > 4  # acceptance varies with K and prompt: the comparison is not vacuous


@pytest.mark.parametrize("tree", [TREE_A, TREE_B], ids=["TREE_A", "TREE_B"])
def test_tree_prediction_is_exact_per_seed(eagle, tree):
    ps = prompts(3, seed=5)
    profiled = profile(eagle, ps, T07, max_k=4)
    results = generate_batch(eagle, ps, NEW, mode="eagle", eagle_choices=tree, sampling=T07,
                             accept="exact_match", ignore_eos=True)
    for sp, r in zip(profiled, results):
        assert r.output_ids == sp.output_ids
        check_same(replay_tree([sp.rank_paths], tree), r.stats)
    assert replay_tree([sp.rank_paths for sp in profiled], tree).acceptance_length > 1.2


def measured(models, ps, rounds: int = 4, at: Sampling = T07, **decode) -> tuple[float, float]:
    """The runtime's pooled AL over `rounds` decodes of the prompts with fresh seeds, and its standard
    error (ratio_se, requests clustered by prompt)."""
    from trtspec.tuning.acceptance import ratio_se

    counts, clusters = [], []
    for r in range(rounds):
        sampling = at.model_copy(update={"seed": 77_000 + 1000 * r})
        for j, res in enumerate(generate_batch(models, ps, NEW, sampling=sampling, ignore_eos=True, **decode)):
            counts.append((sum(s.accepted + 1 for s in res.stats.steps), res.stats.verify_steps))
            clusters.append(j)
    return sum(y for y, _ in counts) / sum(x for _, x in counts), ratio_se(counts, clusters)


def agrees(predicted: float, se: float, got: tuple[float, float]) -> bool:
    """Within 2 combined standard errors (the prediction's and the measurement's, independent draws)."""
    return se > 0 and abs(got[0] - predicted) <= 2 * (se ** 2 + got[1] ** 2) ** 0.5


def test_prediction_holds_for_other_seeds_within_two_standard_errors(pair):
    """Profile with one set of seeds, decode with others: the runtime's pooled AL for each K agrees
    with the prediction within 2 standard errors (delta method over prompts, acceptance.ratio_se)."""
    ps = prompts(12, seed=7)
    profiled = profile(pair, ps, T07)
    for k in range(1, MAX_K + 1):
        predicted = replay_chain([sp.match_lengths for sp in profiled], k).acceptance_length
        se = acceptance_length_se([chain_accepted(sp.match_lengths, k) for sp in profiled])
        got = measured(pair, ps, mode="draft-target", draft_len=k, accept="exact_match")
        assert agrees(predicted, se, got), (k, predicted, se, got)


@pytest.mark.parametrize("tree", [TREE_A, TREE_B], ids=["TREE_A", "TREE_B"])
def test_tree_prediction_holds_for_other_seeds_within_two_standard_errors(eagle, tree):
    from trtspec.tuning.acceptance import tree_se

    ps = prompts(24, seed=9)
    profiled = profile(eagle, ps, T07, max_k=4)
    predicted = replay_tree([sp.rank_paths for sp in profiled], tree).acceptance_length
    se = tree_se([sp.rank_paths for sp in profiled], tree)
    got = measured(eagle, ps, mode="eagle", eagle_choices=tree, accept="exact_match")
    assert agrees(predicted, se, got), (predicted, se, got)


def test_exact_match_resample_is_predicted_approximately(pair):
    """exact_match_resample (the engine flow without draft logits) accepts with the same probability
    per position but resamples at a miss, so its states drift from plain sampling; the exact_match
    profile is its approximate prediction (sampled.py). Measured over other seeds it agrees within 2
    combined standard errors on this pair, for every K."""
    ps = prompts(16, seed=7)
    profiled = profile(pair, ps, T07)
    for k in range(1, MAX_K + 1):
        predicted = replay_chain([sp.match_lengths for sp in profiled], k).acceptance_length
        se = acceptance_length_se([chain_accepted(sp.match_lengths, k) for sp in profiled])
        got = measured(pair, ps, mode="draft-target", draft_len=k, accept="exact_match_resample")
        assert agrees(predicted, se, got), (k, predicted, se, got)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_rejection_sampling_is_predicted_without_bias(pair, temperature):
    """rejection_sampling with a sampled draft: kept indicators Bernoulli(min(1, q/p)) drawn given the
    sampled output (sampled.rejection_agreement), equal in law to the rule's: the runtime's AL over
    other seeds agrees within 2 combined SE for every K."""
    at = Sampling(temperature=temperature, seed=SEED)
    ps = prompts(16, seed=7)
    settings = [at.model_copy(update={"seed": SEED + j}) for j in range(len(ps))]
    profiled = profile_prompts(pair, [(str(j), p) for j, p in enumerate(ps)], NEW, MAX_K, ignore_eos=True,
                               settings=settings, accept_rule="rejection_sampling")
    assert profiled[0].match_lengths != profile(pair, ps[:1], at)[0].match_lengths  # not the exact-match lists
    for k in range(1, MAX_K + 1):
        predicted = replay_chain([sp.match_lengths for sp in profiled], k).acceptance_length
        se = acceptance_length_se([chain_accepted(sp.match_lengths, k) for sp in profiled])
        got = measured(pair, ps, at=at, mode="draft-target", draft_len=k, accept="rejection_sampling")
        assert agrees(predicted, se, got), (k, predicted, se, got)


def test_profile_stage_records_the_rule_it_predicts(pair_dir, tmp_path):
    """greedy (EAGLE through Triton ignores T) -> the greedy outputs, no seeds, rule and requested T
    recorded; exact_match_resample -> sampled outputs, estimator 'approximate'; a workload's own
    temperature overrides the stage's."""
    import json

    from trtspec.tuning.options import ProfileOptions
    from trtspec.tuning.profile import profile_workloads

    log = tmp_path / "traffic.jsonl"
    log.write_text("\n".join(json.dumps({"prompt": " ".join(f"t{i + j}" for j in range(6))}) for i in range(3, 6)))
    common = dict(max_k=3, max_new_tokens=10)
    greedy = profile_workloads(pair_dir, [f"logs={log}"], ProfileOptions(**common, samples_per_prompt=2))
    assert greedy.workloads["logs"].num_samples == 3  # greedy outputs have no draws: decoded once
    as_greedy = profile_workloads(pair_dir, [f"logs={log}"], ProfileOptions(**common, temperature=0.7,
                                                                            accept_rule="greedy"))
    c = as_greedy.measurement_conditions
    assert (c.temperature, c.accept_rule, c.estimator) == (0.7, "greedy", "exact")
    g, a = greedy.workloads["logs"].samples, as_greedy.workloads["logs"].samples
    assert [s.output_ids for s in a] == [s.output_ids for s in g] and all(s.seed is None for s in a)
    resample = profile_workloads(pair_dir, [f"logs={log}"],
                                 ProfileOptions(**common, accept_rule="exact_match_resample"),
                                 sampling={"logs": {"temperature": 1.0}})
    w = resample.workloads["logs"]
    assert resample.measurement_conditions.estimator == "approximate" and w.sampling.temperature == 1.0
    assert [s.seed for s in w.samples] == [0, 1, 2] and [s.output_ids for s in w.samples] != [s.output_ids for s in g]
    assert resample.measurement_conditions.workloads["logs"]["sampling"] == {"temperature": 1.0}


def test_rejection_sampling_needs_a_chain_draft(eagle_dir):
    from trtspec.tuning.options import ProfileOptions
    from trtspec.tuning.profile import profile_workloads

    options = ProfileOptions(max_k=2, samples=1, max_new_tokens=4, temperature=0.7, accept_rule="rejection_sampling")
    with pytest.raises(TrtspecError, match=r"^profile\.accept_rule: rejection_sampling needs a chain draft"):
        profile_workloads(eagle_dir, ["chat=mt-bench"], options)


def test_rules_and_their_estimators():
    assert estimator("exact_match", T07) == "exact"
    assert estimator("greedy", T07) == "exact" and decode_settings("greedy", T07).greedy
    assert estimator("exact_match_resample", T07) == "approximate"
    assert estimator("rejection_sampling", T07) == "unbiased"
    assert estimator("typical_acceptance", Sampling()) == "exact"  # every rule is greedy at T = 0
    with pytest.raises(TrtspecError, match=r"^profile\.accept_rule: typical_acceptance at T=0.7 has no one-pass"):
        estimator("typical_acceptance", T07)
    with pytest.raises(TrtspecError, match=r"^profile\.accept_rule: 'nope'"):
        estimator("nope", T07)
    s = with_overrides(T07, {"top_p": 0.9, "category": "x"})
    assert (s.temperature, s.top_p, s.seed) == (0.7, 0.9, SEED)
    with pytest.raises(Exception, match="top_p"):
        with_overrides(T07, {"top_p": 1.5})


def test_best_draft_length_falls_with_temperature():
    """Synthetic profiles with i.i.d. per-position acceptance a (synthetic.py: E[AL(K)] =
    (1 - a^(K+1)) / (1 - a)): a = 0.9 stands for a low temperature, 0.6 for a high one. Under the
    same cost model the closed form's best K is clearly smaller at 0.6, and the tuner, reading each
    profile at its temperature, picks a near-optimal K for each: smaller at the higher temperature."""
    from trtspec.tuning.select import SelectConfig, tune_draft_target
    from trtspec.tuning.synthetic import chain_profile, example_cost_model

    cost, cfg, ctx = example_cost_model("draft-target"), SelectConfig(concurrency_bands=[1, 16]), 256 + 200
    settings = {0.0: (0.9, Sampling()), 1.0: (0.6, Sampling(temperature=1.0, seed=4))}
    chosen = {}
    for temp, (a, s) in settings.items():
        p = chain_profile({"chat": a}, num_samples=32, T=400, max_k=8, seed=1, temperature=temp,
                          sampling=s.model_dump(), accept_rule="exact_match", estimator="exact")
        w = tune_draft_target(p, cost, cfg.model_copy(update={"context_tokens": ctx}))["chat"]
        assert w.sampling == s and w.accept_rule == "exact_match"
        assert all(b.acceptance_length_se is not None for b in w.bands)
        for b in w.bands:
            tps = [b.concurrency * (1 - a ** (k + 1)) / (1 - a) / cost.draft_target_step(b.concurrency, k, ctx).total_s
                   for k in range(9)]
            assert tps[b.draft_len] >= 0.99 * max(tps)  # the tuner's K is (near-)optimal in expectation
            chosen[temp, b.concurrency] = (b.draft_len, tps)
    for band in (1, 16):
        (k_cold, _), (k_hot, tps_hot) = chosen[0.0, band], chosen[1.0, band]
        assert k_hot < k_cold
        assert tps_hot[k_cold] < 0.9 * max(tps_hot)  # the cold K would cost > 10 % at the high temperature


def test_al_vs_temperature_plot(tmp_path):
    from trtspec.tuning.report import al_by_temperature, plot_al_vs_temperature
    from trtspec.tuning.synthetic import chain_profile

    profiles = [chain_profile({"chat": a, "code": a + 0.05}, num_samples=6, T=60, max_k=4, seed=2, temperature=t,
                              sampling=Sampling(temperature=t).model_dump(), accept_rule="exact_match")
                for t, a in ((1.0, 0.5), (0.0, 0.85), (0.7, 0.7))]
    got = al_by_temperature(profiles, k=3)
    assert [t for t, _, _ in got["chat"]] == [0.0, 0.7, 1.0]
    assert got["chat"][0][1] > got["chat"][1][1] > got["chat"][2][1] and all(se > 0 for _, _, se in got["code"])
    png = plot_al_vs_temperature(profiles, tmp_path / "al_vs_t.png", k=3)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_and_tune_commands_at_a_temperature(pair_dir, tmp_path, capsys):
    """trtspec profile --temperature/--top-p/--samples-per-prompt on a traffic log whose second record
    carries its own temperature -> a sampled profile.json (rule, estimator, seeds, standard errors)
    -> trtspec tune -> tuning.json with the workload's settings and the rule."""
    import json

    from cli_helpers import run_cli

    log = tmp_path / "traffic.jsonl"
    recs = [{"prompt": " ".join(f"t{i + j}" for j in range(6))} for i in range(3, 7)]
    recs[1]["temperature"] = 1.0
    log.write_text("\n".join(json.dumps(r) for r in recs))
    args = ["profile", "--ckpt", pair_dir, "--workloads", f"logs={log}", "--max-k", "3", "--max-new-tokens", "12",
            "--temperature", "0.7", "--top-p", "0.95", "--sampling-seed", "40", "--samples-per-prompt", "2",
            "--out", tmp_path / "profile.json"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "logs (T=0.7 top_p=0.95)" in out and "±" in out
    p = json.loads((tmp_path / "profile.json").read_text())
    cond, w = p["measurement_conditions"], p["workloads"]["logs"]
    assert cond["temperature"] == 0.7 and cond["accept_rule"] == "exact_match" and cond["estimator"] == "exact"
    assert cond["sampling"] == {"temperature": 0.7, "top_k": 0, "top_p": 0.95, "seed": 40}
    assert w["sampling"]["temperature"] == 0.7 and w["num_samples"] == 8  # 4 prompts x 2 seeds
    assert [s["seed"] for s in w["samples"]] == list(range(40, 48))
    assert [s.get("sampling", {}).get("temperature") for s in w["samples"][:4]] == [None, 1.0, None, None]
    assert w["samples"][1]["sampling"] == {"temperature": 1.0, "top_k": 0, "top_p": 0.95, "seed": 41}
    se = w["accept_length_se_by_k"]
    assert set(se) == {"1", "2", "3"} and all(v > 0 for v in se.values())
    code, out, err = run_cli(capsys, "tune", "--profile", tmp_path / "profile.json", "--cost", "h100",
                             "--concurrency-bands", "1", "--no-plots", "--out", tmp_path / "tuning.json")
    assert code == 0, err
    from trtspec.tuning.report import summary_table
    from trtspec.tuning.tuning_schema import load_tuning

    tuning = load_tuning(tmp_path / "tuning.json")
    band = tuning.workloads["logs"].bands[0]
    band.speculate, band.acceptance_length, band.acceptance_length_se = True, 1.5, 0.05  # as if speculating
    table = summary_table(tuning)  # what `trtspec tune` prints
    assert table.columns[0]._cells == ["logs (T=0.7 top_p=0.95)"] and table.columns[3]._cells == ["1.50 ±0.10"]
    assert "±: 95%" in table.caption  # said once, where the reader meets the ±
    t = json.loads((tmp_path / "tuning.json").read_text())["workloads"]["logs"]
    assert t["sampling"]["temperature"] == 0.7 and t["accept_rule"] == "exact_match"
    assert t["bands"][0]["acceptance_length_se"] is not None
    code, out, err = run_cli(capsys, *args[:-2], "--accept-rule", "typical_acceptance", "--out", tmp_path / "x.json")
    assert code != 0 and "--accept-rule: typical_acceptance at T=0.7" in err
    code, out, err = run_cli(capsys, *args[:-2], "--temperature", "-1", "--out", tmp_path / "x.json")
    assert code != 0 and "--temperature:" in err


def test_standard_error_is_calibrated(pair):
    """The delta-method SE (acceptance.ratio_se) describes how much the prediction moves: over 16
    seed sets on the same prompts the predictions' spread is of the size of the mean SE (the SE also
    covers the choice of prompts, so it may be somewhat larger, never much smaller)."""
    import statistics

    ps = prompts(12, seed=11)
    preds, ses = [], []
    for r in range(16):
        profiled = profile(pair, ps, T07.model_copy(update={"seed": 500_000 + 100 * r}), max_k=3)
        preds.append(replay_chain([sp.match_lengths for sp in profiled], 3).acceptance_length)
        ses.append(acceptance_length_se([chain_accepted(sp.match_lengths, 3) for sp in profiled]))
    spread, se = statistics.stdev(preds), statistics.mean(ses)
    assert 0.5 * se <= spread <= 1.5 * se, (spread, se)


def test_profiles_written_before_sampling_still_load_and_tune(tmp_path):
    """profile.json files without the fields added later (greedy, no sampling, rule or standard
    errors) load, pass the aggregate check and tune; their tuning records no settings."""
    import json

    from trtspec.tuning.schema import dump_json, load_profile
    from trtspec.tuning.select import SelectConfig, tune_draft_target
    from trtspec.tuning.synthetic import chain_profile, example_cost_model

    data = json.loads(dump_json(chain_profile({"chat": 0.7}, num_samples=3, T=40, max_k=4)))
    for w in data["workloads"].values():
        del w["accept_length_se_by_k"], w["sampling"]
    for key in ("sampling", "accept_rule", "estimator"):
        data["measurement_conditions"].pop(key, None)
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = load_profile(tmp_path / "old.json")
    w = tune_draft_target(old, example_cost_model("draft-target"), SelectConfig(concurrency_bands=[1]))["chat"]
    assert w.sampling is None and w.accept_rule is None and w.bands[0].acceptance_length_se is not None
