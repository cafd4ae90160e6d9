"""The drafter choice (trtspec/tuning/choose.py): each workload x band gets the best of the offered
drafters' tuned settings, within a memory budget over the set of drafters served."""

from __future__ import annotations

import random

import pytest

from trtspec.errors import TrtspecError
from trtspec.tuning.choose import GIB, choose, drafter_memory, gpu_weight_bytes
from trtspec.tuning.cost import CostModel
from trtspec.tuning.gpus import gpu_preset
from trtspec.tuning.ngram_select import tune_ngram
from trtspec.tuning.schema import build_profile
from trtspec.tuning.tuning_schema import CostInfo, Tuning
from trtspec.tuning.select import SelectConfig, tune_draft_target
from trtspec.tuning.synthetic import example_cost_model, ngram_steps

BANDS = [1, 64]
MAX_K, SIZES = 4, [2]
CFG = SelectConfig(concurrency_bands=BANDS, context_tokens=512)
CONDITIONS = {"target": "t", "max_new_tokens": 120, "dtype": "bfloat16", "trtspec_version": "x"}


def runs(p: float, k: int, rng: random.Random, T: int = 120) -> list[int]:
    """match_lengths of a draft model agreeing with probability p at each position."""
    agree = [rng.random() < p for _ in range(T + k)]
    out = []
    for t in range(T):
        n = 0
        while n < k and agree[t + n]:
            n += 1
        out.append(n)
    return out


def tuning(mode: str, rates: dict[str, float], cost: CostModel, bands: list[int] = BANDS) -> Tuning:
    rng, cfg = random.Random(0), CFG.model_copy(update={"concurrency_bands": bands})
    if mode == "ngram":
        samples = {w: [{"id": f"s{i}", "prompt_len": 50, "output_ids": [1] * 120,
                        "ngram_steps": {"2": [ngram_steps(p, k, 2, 120, rng) for k in range(1, MAX_K + 1)]}}
                       for i in range(4)] for w, p in rates.items()}
        profile = build_profile("ngram", MAX_K, None, CONDITIONS, samples, ngram_sizes=SIZES)
        workloads = tune_ngram(profile, cost, cfg)
    else:
        samples = {w: [{"id": f"s{i}", "prompt_len": 50, "match_lengths": runs(p, MAX_K, rng)} for i in range(4)]
                   for w, p in rates.items()}
        profile = build_profile("draft-target", MAX_K, None, CONDITIONS, samples)
        workloads = tune_draft_target(profile, cost, cfg)
    return Tuning(mode=mode, profile={"path": f"{mode}.json", "sha256": "0"}, measurement_conditions=CONDITIONS,
                  trtspec_version="x", cost=CostInfo(source="analytic", gpu=cost.gpu, target=cost.target,
                                                      draft=cost.draft),
                  concurrency_bands=bands, max_draft_len=MAX_K, workloads=workloads)


@pytest.fixture(scope="module")
def offered():
    """A draft model good on chat and poor on edits; n-gram the other way round."""
    model = example_cost_model("draft-target")
    return {"model": tuning("draft-target", {"chat": 0.8, "edit": 0.2}, model),
            "ngram": tuning("ngram", {"chat": 0.05, "edit": 0.9}, model.model_copy(update={"draft": None}))}


def test_each_workload_gets_its_best_drafter_and_the_bands_say_which(offered):
    t = choose(offered)
    chat, edit = t.workloads["chat"].bands[0], t.workloads["edit"].bands[0]
    assert chat.speculate and chat.drafter is None and chat.max_matching_ngram_size is None  # the model drafter
    assert edit.speculate and edit.drafter == "ngram" and edit.max_matching_ngram_size == 2
    for w, bands in t.workloads.items():
        for b in bands.bands:
            alone = [next(x for x in o.workloads[w].bands if x.concurrency == b.concurrency) for o in offered.values()]
            assert b.tokens_per_s == max(max(a.tokens_per_s for a in alone), b.baseline_tokens_per_s)
            assert len(b.sweep) == sum(len(a.sweep) for a in alone)  # every offered point, for the plots
    assert t.mode == "draft-target" and t.choice.drafters["model"].served and t.choice.drafters["ngram"].served
    assert t.choice.drafters["ngram"].memory_gib == 0.0
    # Llama-3.2-1B FP8 on one GPU as builders.memory counts it: FP8 linears, bf16 embedding, lm_head, norms
    H, V = 2048, 128256
    draft = 16 * (H * 48 * 64 + H * H + 3 * H * 8192 + 2 * H * 2) + 2 * V * H * 2 + H * 2
    assert t.choice.drafters["model"].memory_gib == pytest.approx(draft / GIB)  # 1.886 GiB
    assert Tuning.model_validate_json(t.model_dump_json(by_alias=True)) == t  # round-trips through tuning.json


def test_a_budget_below_the_draft_model_leaves_n_gram_and_off(offered):
    model_gib = drafter_memory(offered["model"], separate_instances=False)
    t = choose(offered, memory_budget_gib=model_gib / 2)
    chat, edit = t.workloads["chat"].bands[0], t.workloads["edit"].bands[0]
    assert edit.drafter == "ngram" and edit.speculate
    assert chat.drafter in (None, "ngram") and (not chat.speculate or chat.drafter == "ngram")
    assert not t.choice.drafters["model"].served and t.choice.memory_gib == 0.0
    assert chat.own_best_tokens_per_s > chat.tokens_per_s  # what the budget costs the chat workload


def test_separate_instances_cost_a_target_each_and_the_score_grows_with_the_budget(offered):
    """llmapi: every setting served (drafter, K, n-gram size, at the smallest band: the one that
    flavor serves) is its own model instance holding the target and its drafter again, and workloads
    left off need a plain instance. Whatever the budget, the served set fits it and a larger budget
    never scores less; with no budget at all only one n-gram setting can be served, for every
    workload (one instance, no weights of its own)."""
    target = gpu_weight_bytes(offered["model"].cost.target) / GIB
    draft = drafter_memory(offered["model"], separate_instances=False)
    assert drafter_memory(offered["model"], True) == pytest.approx(target + draft)
    assert drafter_memory(offered["ngram"], True) == pytest.approx(target)
    scores = []
    for budget in (0.0, 1.01 * target, 1.01 * (draft + target), 2.01 * target + draft, None):
        t = choose(offered, memory_budget_gib=budget, separate_instances=True)
        served = {n for n, d in t.choice.drafters.items() if d.served}
        settings = {(b.drafter, b.draft_len, b.max_matching_ngram_size) for w in t.workloads.values()
                    for b in w.bands if b.concurrency == min(BANDS)}
        drafts = sum(draft for d, k, _ in settings if d is None and k)  # the model drafter's instances
        assert t.choice.memory_gib == pytest.approx(drafts + (len(settings) - 1) * target)
        assert budget is None or t.choice.memory_gib <= budget
        scores.append(t.choice.score)
        if budget == 0.0:
            assert served <= {"ngram"} and t.choice.memory_gib == 0.0
    assert scores == sorted(scores) and scores[-1] > scores[0]


def test_separate_instances_count_every_setting_the_llmapi_flavor_serves():
    """llmapi writes one model per (drafter, K, n-gram size) of its band (the smallest): two
    workloads on one drafter at different K are two instances, each with the target and the draft,
    and the budget holds what that repository loads."""
    from trtspec.triton_repo.llmapi import routing
    from trtspec.triton_repo.routing import draft_target_routes

    model = example_cost_model("draft-target")
    offered = {"model": tuning("draft-target", {"chat": 0.8, "edit": 0.2, "code": 0.4}, model),
               "ngram": tuning("ngram", {"chat": 0.05, "edit": 0.9, "code": 0.0}, model.model_copy(update={"draft": None}))}
    target = gpu_weight_bytes(offered["model"].cost.target) / GIB
    draft = drafter_memory(offered["model"], separate_instances=False)
    for budget in (None, 1.01 * target + draft, 2.01 * target + draft):
        t = choose(offered, memory_budget_gib=budget, separate_instances=True)
        table = routing(draft_target_routes(t))
        models = {e["model"] for e in table["workloads"].values()}
        gib = sum(draft for m in models if m != "tensorrt_llm_k0" and "_n" not in m) + (len(models) - 1) * target
        assert t.choice.memory_gib == pytest.approx(gib), (budget, sorted(models))
        assert budget is None or gib <= budget


def test_separate_instances_serve_and_score_the_smallest_band_only():
    """The llmapi flavor serves one band, the smallest (one instance per setting there), so a drafter
    that wins only at a larger band is not served there: `served` and the score say what that
    repository serves, and its routes draft only with what `served` names. (Every band is served
    with shared instances: n-gram wins at 1, the draft model at 512, both served.)

    The premise, n-gram best at 1 and the draft model best at 512, comes from the cost model, not
    from noise: at one sequence the verify is memory-bound and costs about one target forward
    whatever K, so the draft model's K forwards are its whole overhead and free n-gram drafts
    (rate 0.5: AL ~2.0 at K 4) beat its AL ~3.7 (rate 0.87); at 512 sequences the verify is
    compute-bound, both settle at K 1, and the draft's one forward is small beside the target's,
    so its higher AL (~1.9 vs ~1.5) wins. At bands [1, 64] that window was 0.902-0.905 in the
    model's rate; at [1, 512] it is about 0.79-0.90, and 0.87 leaves each winner more than 5% ahead
    (asserted: a cost-model change that moves it fails here, not in the assertions after it)."""
    from trtspec.triton_repo.llmapi import routing
    from trtspec.triton_repo.routing import draft_target_routes

    model, bands = example_cost_model("draft-target"), [1, 512]
    offered = {"model": tuning("draft-target", {"chat": 0.87}, model, bands),
               "ngram": tuning("ngram", {"chat": 0.5}, model.model_copy(update={"draft": None}), bands)}
    (m1, m512), (n1, n512) = ([b.tokens_per_s for b in offered[d].workloads["chat"].bands] for d in ("model", "ngram"))
    off = offered["model"].workloads["chat"].bands[1].baseline_tokens_per_s
    assert n1 > 1.05 * m1 and m512 > 1.05 * max(n512, off), (n1 / m1, m512 / max(n512, off))  # the premise
    shared = choose(offered)
    assert [b.drafter for b in shared.workloads["chat"].bands] == ["ngram", None]  # None: the model drafter
    assert all(d.served for d in shared.choice.drafters.values())

    t = choose(offered, separate_instances=True)
    served = {n for n, d in t.choice.drafters.items() if d.served}
    table = routing(draft_target_routes(t))
    routed = {"ngram" if "max_matching_ngram_size" in e else "model"
              for e in [*table["workloads"].values(), table["default"]] if e["num_draft_tokens"]}
    assert served == routed == {"ngram"}
    at1 = t.workloads["chat"].bands[0]
    assert t.choice.score == pytest.approx(t.workloads["chat"].num_tokens * at1.tokens_per_s)
    assert all(b.drafter in ("ngram", None) and (b.drafter == "ngram") == b.speculate
               for b in t.workloads["chat"].bands)  # no band names a drafter the set does not hold


def test_offers_that_cannot_be_compared_are_refused(offered):
    other = offered["ngram"].model_copy(update={"concurrency_bands": [1]})
    with pytest.raises(TrtspecError, match=r"tune.profile: '\w+' has concurrency bands"):
        choose({"model": offered["model"], "ngram": other})
    slow = tuning("ngram", {"chat": 0.05, "edit": 0.9}, example_cost_model("draft-target", gpu="h200")
                  .model_copy(update={"draft": None}))
    with pytest.raises(TrtspecError, match="different baselines"):
        choose({"model": offered["model"], "ngram": slow})
    with pytest.raises(TrtspecError, match="at most one model drafter"):
        choose({"a": offered["model"], "b": offered["model"]})


def test_the_default_route_drafts_only_with_served_drafters_or_not_at_all():
    """An unknown workload's route (routing._best_shared) is the best token-weighted setting of what
    the choice serves, off included: each drafter's sweep has its own K = 0 point (counted once), and
    a drafter the budget left out is not drafted with. Brute force: off and every served setting."""
    from trtspec.triton_repo.routing import draft_target_routes

    model = example_cost_model("draft-target")
    useless = {"chat": 0.0, "edit": 0.0}
    cases = [({"model": tuning("draft-target", useless, model)}, None),  # nothing wins: all off
             ({"model": tuning("draft-target", {"chat": 0.9, "edit": 0.9}, model)}, 0.5)]  # the model left out
    for offered, budget in cases:
        offered["ngram"] = tuning("ngram", useless, model.model_copy(update={"draft": None}))
        gib = None if budget is None else budget * drafter_memory(offered["model"], False)
        t = choose(offered, memory_budget_gib=gib)
        assert not any(d.served for d in t.choice.drafters.values())
        assert all(not b.speculate for w in t.workloads.values() for b in w.bands)
        default = draft_target_routes(t)["default"]["bands"]
        assert default == [{"concurrency": c, "num_draft_tokens": 0} for c in BANDS], default


# ---- end to end on real models: profile each drafter, tune, choose (the CLI) ---------------------------

@pytest.mark.usefixtures("one_torch_thread")
def test_profiles_of_two_drafters_choose_n_gram_for_edits_and_the_draft_model_for_chat(tmp_path, capsys):
    """Profiled and tuned through the CLI on real tiny models (triton_fixtures.choice_pair): the draft
    model is right on both workloads but costs a step; n-gram drafts are free and right only where
    the answer repeats the prompt. The choice gives each workload its drafter at concurrency 1."""
    import json

    from cli_helpers import run_cli
    from triton_fixtures import choice_pair
    from trtspec.tuning.tuning_schema import load_tuning

    pair, prompts = choice_pair(tmp_path)
    specs = []
    for name, texts in prompts.items():
        f = tmp_path / f"{name}.jsonl"
        f.write_text("".join(json.dumps({"prompt": t, "id": f"{name}{i}"}) + "\n" for i, t in enumerate(texts)))
        specs.append(f"{name}={f}")
    common = ["--workloads", ",".join(specs), "--max-k", "4", "--max-new-tokens", "20"]
    for out, extra in (("model.json", []), ("ngram.json", ["--ngram-sizes", "2,3"])):
        code, _, err = run_cli(capsys, "profile", "--ckpt", str(pair), *common, *extra, "--out", str(tmp_path / out))
        assert code == 0, err
    code, stdout, err = run_cli(capsys, "tune", "--profile", str(tmp_path / "model.json"), "--profile",
                                str(tmp_path / "ngram.json"), "--cost", "cpu", "--concurrency-bands", "1,8",
                                "--out", str(tmp_path / "tuning.json"), "--no-plots")
    assert code == 0, err
    t = load_tuning(tmp_path / "tuning.json")
    chat, edit = t.workloads["chat"].bands[0], t.workloads["edit"].bands[0]
    assert edit.speculate and edit.drafter == "ngram", edit
    assert chat.speculate and chat.drafter is None and chat.draft_len > 0, chat
    alone = {m: load_tuning(tmp_path / f"tuning-{m}.json") for m in ("draft-target", "ngram")}
    assert edit.tokens_per_s == alone["ngram"].workloads["edit"].bands[0].tokens_per_s
    assert chat.tokens_per_s == alone["draft-target"].workloads["chat"].bands[0].tokens_per_s
    assert t.choice.drafters["draft-target"].served and t.choice.drafters["ngram"].served


def test_a_chosen_setting_is_never_reported_indistinguishable_from_itself(offered):
    """The choice's sweep holds every drafter's points, each with its own K = 0: the tuner's
    'not distinguishable' lines compare the model drafter's other K, and an n-gram choice with off."""
    from trtspec.tuning.report import summary_table
    from trtspec.tuning.select import indistinguishable

    model = example_cost_model("draft-target")
    t = choose({"model": tuning("draft-target", {"chat": 0.8, "rare": 0.0}, model),
                "ngram": tuning("ngram", {"chat": 0.05, "rare": 0.0}, model.model_copy(update={"draft": None}))})
    off = [b for w in t.workloads.values() for b in w.bands if not b.speculate]
    assert off  # drafts that seldom land: off, whose sweep holds both drafters' K = 0
    assert summary_table(t).title.startswith(f"trtspec tune ({' + '.join(t.choice.drafters)}, ")  # both offered
    for w in t.workloads.values():
        for b in w.bands:
            assert b.draft_len not in indistinguishable(b, w.accept_length_se_by_k)


def test_the_plots_draw_one_series_per_drafter_setting(offered, tmp_path):
    """The comparison is visible: per band the model drafter's K and n-gram's K (per matching size)
    are separate series, each from the same K = 0 point, and every sweep point is in one."""
    from trtspec.tuning.report import chain_series, write_plots

    t = choose(offered)
    for w in t.workloads.values():
        for b in w.bands:
            series = chain_series(b, t.mode)
            assert set(series) == {"draft model", "n-gram n=2"}
            assert all(pts[0].draft_len == 0 and [p.draft_len for p in pts] == list(range(MAX_K + 1))
                       for pts in series.values())
            assert sum(len(pts) - 1 for pts in series.values()) == sum(p.draft_len > 0 for p in b.sweep)
    paths = write_plots(t, tmp_path)
    assert [p.name for p in paths] == ["chat.png", "edit.png"] and all(p.stat().st_size > 10_000 for p in paths)


def test_every_swept_setting_carries_its_profiles_standard_error(offered):
    """The tuning plots draw each AL with its 95% error bar: the sweep's standard errors are the
    profiles' own, per K for the model drafter and per (n, K) for n-gram drafting."""
    from trtspec.tuning.report import PREDICTED_TPS, tps_label

    t = choose(offered)
    for name, w in t.workloads.items():
        model_se = offered["model"].workloads[name].accept_length_se_by_k
        for b in w.bands:
            for p in b.sweep:
                if not p.draft_len:
                    assert p.acceptance_length_se == 0.0
                elif p.max_matching_ngram_size is None:
                    assert p.acceptance_length_se == pytest.approx(model_se[str(p.draft_len)])
                else:
                    assert p.acceptance_length_se > 0
        for alone in offered["ngram"].workloads[name].bands:  # n-gram's chosen point: the band's own SE
            chosen = next(p for p in alone.sweep if p.draft_len == alone.draft_len
                          and p.max_matching_ngram_size == alone.max_matching_ngram_size)
            assert chosen.acceptance_length_se == alone.acceptance_length_se
    assert tps_label(t) == PREDICTED_TPS  # an analytic GPU model: absolute tokens/s
    cpu = t.model_copy(update={"cost": t.cost.model_copy(update={"gpu": gpu_preset("cpu")})})
    assert "cpu placeholder, unfitted" in tps_label(cpu)


# ---- several EAGLE-3 heads of one target (a general head, heads per workload) ------------------------

@pytest.fixture(scope="module")
def heads():
    """A general head fair everywhere, a code head good on code only, n-gram good on edits."""
    model = example_cost_model("draft-target")
    head = lambda rates: tuning("draft-target", rates, model).model_copy(update={"mode": "eagle3"})
    return {"eagle3": head({"chat": 0.8, "code": 0.7, "edit": 0.3}),
            "eagle3-code": head({"chat": 0.1, "code": 0.95, "edit": 0.1}),
            "ngram": tuning("ngram", {"chat": 0.05, "code": 0.05, "edit": 0.95},
                            model.model_copy(update={"draft": None}))}


def test_each_workload_goes_to_its_best_head_and_every_served_head_counts_its_memory(heads):
    t = choose(heads)
    at1 = {w: wt.bands[0] for w, wt in t.workloads.items()}
    assert at1["chat"].speculate and at1["chat"].drafter is None  # the general head
    assert at1["code"].speculate and at1["code"].drafter == "eagle3-code"
    assert at1["edit"].drafter == "ngram"
    assert t.mode == "eagle3" and all(d.served for d in t.choice.drafters.values())
    head_gib = drafter_memory(heads["eagle3"], separate_instances=False)
    assert head_gib > 0 and t.choice.memory_gib == pytest.approx(2 * head_gib)  # both heads' weights
    assert Tuning.model_validate_json(t.model_dump_json(by_alias=True)) == t

    one = choose(heads, memory_budget_gib=1.5 * head_gib)  # room for one head only
    served = {n for n, d in one.choice.drafters.items() if d.served and d.mode == "eagle3"}
    assert len(served) == 1 and one.choice.memory_gib == pytest.approx(head_gib)
    assert served == {"eagle3"}  # a workload's own head comes with the general one (both loaded): no room
    routed = {b.drafter or "eagle3" for w in one.workloads.values() for b in w.bands
              if b.speculate and b.drafter != "ngram"}
    assert routed == served
    assert one.choice.score < t.choice.score


def test_model_drafters_of_different_kinds_are_still_refused(heads):
    model = tuning("draft-target", {"chat": 0.5, "code": 0.5, "edit": 0.5}, example_cost_model("draft-target"))
    with pytest.raises(TrtspecError, match="unless all are EAGLE-3 heads"):
        choose({"eagle3": heads["eagle3"], "model": model})


def test_llmapi_refuses_two_heads_whose_models_would_share_a_name():
    """Heads of workloads `qa-1` and `qa_1` at one K sanitize to one llmapi model name: one model,
    one head, and a workload drafted with the other's head. Refused, naming both settings."""
    from trtspec.triton_repo.llmapi import routing
    from trtspec.triton_repo.routing import draft_target_routes

    model = example_cost_model("draft-target")
    head = lambda rates: tuning("draft-target", rates, model).model_copy(update={"mode": "eagle3"})
    t = choose({"eagle3": head({"qa-1": 0.3, "qa_1": 0.3}), "eagle3-qa-1": head({"qa-1": 0.9, "qa_1": 0.1}),
                "eagle3-qa_1": head({"qa-1": 0.1, "qa_1": 0.9})})
    assert {w: wt.bands[0].drafter for w, wt in t.workloads.items()} == {"qa-1": "eagle3-qa-1", "qa_1": "eagle3-qa_1"}
    with pytest.raises(TrtspecError, match="get the same model name 'tensorrt_llm_k4_eagle3_qa_1'"):
        routing(draft_target_routes(t))
