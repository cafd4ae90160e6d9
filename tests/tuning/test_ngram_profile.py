"""The n-gram profile is exact: AL(n, K) from one target pass per prompt equals n-gram speculative
decoding with that K and max_matching_ngram_size (runtime.generate_batch), for every K and several
sizes; and the profile file validates and rejects what it should."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from triton_fixtures import tiny_pair
from trtspec.errors import TrtspecError
from trtspec.options import Sampling
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.tuning.ngram_acceptance import summarize_ngram
from trtspec.tuning.ngram_profile import check_rule
from trtspec.tuning.profile import profile_prompts
from trtspec.tuning.schema import Profile, build_profile, check_aggregates

pytestmark = pytest.mark.usefixtures("one_torch_thread")
NEW, MAX_K, SIZES = 48, 5, [1, 2, 3]


@pytest.fixture(scope="module")
def target_and_prompts(tmp_path_factory):
    """The tiny near-bigram target (it falls into cycles: n-gram drafts get partly accepted), random
    prompts and copy-heavy ones (quoting what the target goes on to say)."""
    d = tiny_pair(tmp_path_factory.mktemp("ngram_profile"))
    models = load_models(d / "target", None, tokenizer=False)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (6, 2, 13)]
    greedy = generate_batch(models, prompts, 30, "greedy", ignore_eos=True)
    quoting = [p + r.output_ids[:24] + p[:3] for p, r in zip(prompts, greedy)]
    return models, [(f"p{i}", p) for i, p in enumerate(prompts + quoting)]


def counted(steps) -> list[list[int]]:
    """[accepted, offered] of each recorded step as the runtime counts it: offered min(a + 1, drafted),
    except the last step's (it ends the request: nothing past it is compared, runtime/stats.py)."""
    return [[a, a if i == len(steps) - 1 else min(a + 1, m)] for i, (a, m) in enumerate(steps)]


def test_profile_al_equals_ngram_decoding_for_every_k_and_size(target_and_prompts):
    models, prompts = target_and_prompts
    samples = profile_prompts(models, prompts, NEW, MAX_K, ignore_eos=True, ngram_sizes=SIZES)
    checked = 0
    for (_, prompt), sp in zip(prompts, samples):
        assert len(sp.output_ids) == NEW
        for n in SIZES:
            for k in range(1, MAX_K + 1):
                (run,) = generate_batch(models, [prompt], NEW, "ngram", draft_len=k, ngram_size=n, ignore_eos=True)
                assert run.output_ids == sp.output_ids
                steps = sp.ngram_steps[str(n)][k - 1]
                assert [[s.accepted, s.offered] for s in run.stats.steps] == counted(steps), (n, k)
                agg = summarize_ngram([sp.ngram_steps], [n], k)
                assert agg["accept_length_by_n_k"][str(n)][str(k)] == pytest.approx(run.stats.acceptance_length)
                checked += run.stats.accepted_draft_tokens
    assert checked > 100  # the drafts were accepted often enough for the comparison to mean something


def test_sampled_profile_equals_exact_match_ngram_decoding_for_its_seed(target_and_prompts):
    """At T > 0 under exact_match (keyed draws) the speculative output is the plain sampled one for
    the seed, so the replay over it is that run's acceptance exactly (tuning/sampled.py)."""
    models, prompts = target_and_prompts
    settings = [Sampling(temperature=0.15, seed=10 + i) for i in range(len(prompts))]
    samples = profile_prompts(models, prompts, NEW, 4, ignore_eos=True, settings=settings, ngram_sizes=[1, 2])
    accepted = 0
    for (_, prompt), sp, s in zip(prompts, samples, settings):
        assert sp.seed == s.seed
        for n, k in ((1, 2), (2, 4)):
            (run,) = generate_batch(models, [prompt], NEW, "ngram", draft_len=k, ngram_size=n, ignore_eos=True,
                                    sampling=s, accept="exact_match")
            assert run.output_ids == sp.output_ids
            assert [[x.accepted, x.offered] for x in run.stats.steps] == counted(sp.ngram_steps[str(n)][k - 1]), (n, k)
            accepted += run.stats.accepted_draft_tokens
    greedy = generate_batch(models, [p for _, p in prompts], NEW, "greedy", ignore_eos=True)
    assert any(g.output_ids != sp.output_ids for g, sp in zip(greedy, samples))  # really sampled
    assert accepted > 8  # 14 here: few at T > 0 on this tiny model, but the comparison is not vacuous


def test_profile_stops_at_the_eos_as_ngram_decoding_counts_it(target_and_prompts):
    """An end id at an output index whose token a step accepted as a draft, with more drafts
    accepted after it: the runtime and the replay both count that step only up to the end id."""
    models, prompts = target_and_prompts
    prompt = prompts[4][1]  # copy-heavy: runs of accepted drafts
    (free,) = generate_batch(models, [prompt], NEW, "ngram", draft_len=4, ngram_size=2, ignore_eos=True)
    out, inside, t = free.output_ids, [], 1
    for s in free.stats.steps:  # a step from state t emits output indices t .. t + accepted
        inside += [j for j in range(t, t + s.accepted) if out.index(out[j]) == j]
        t += s.accepted + 1
    assert inside  # such end ids exist, so the check below is not vacuous
    for j in inside[:3]:
        m = dataclasses.replace(models, eos_ids=(out[j],))
        (sp,) = profile_prompts(m, [("p", prompt)], NEW, 4, ngram_sizes=[2])
        (run,) = generate_batch(m, [prompt], NEW, "ngram", draft_len=4, ngram_size=2)
        assert run.output_ids == sp.output_ids == out[:j + 1]
        steps = sp.ngram_steps["2"][3]
        assert [[s.accepted, s.offered] for s in run.stats.steps] == counted(steps)
        assert sum(a + 1 for a, _ in steps) == j  # the tokens after the prefill's, the end id included
        agg = summarize_ngram([sp.ngram_steps], [2], 4)
        assert agg["accept_length_by_n_k"]["2"]["4"] == pytest.approx(run.stats.acceptance_length)


def test_a_last_step_counted_past_the_end_of_the_output_is_refused():
    """Every sample's steps emit exactly its output after the prefill's token (the last one counts
    only what it emits, the eos included). A step list of the earlier count, whose last step ran one
    token past an eos, replayed consistently with its own aggregates and so passed every check: AL
    1.25 where the output allows 1.0. It is refused, naming the step list."""
    conditions = {"target": "t", "max_new_tokens": 5, "dtype": "float32", "trtspec_version": "x",
                  "ngram_pool": "per-request"}

    def sample(steps):
        return {"w": [{"id": "a", "output_ids": [5, 6, 7, 8, 2], "ngram_steps": {"3": [steps]}}]}

    ok = build_profile("ngram", 1, None, conditions, sample([[0, 1]] * 4), ngram_sizes=[3])
    assert ok.workloads["w"].accept_length_by_k == {"1": 1.0}
    with pytest.raises(ValueError, match=r"samples\.0\.ngram_steps\.3\.0: the steps emit 5 tokens; expected 4"):
        build_profile("ngram", 1, None, conditions, sample([[0, 1]] * 3 + [[1, 1]]), ngram_sizes=[3])


def test_profile_file_validates_and_checks_its_aggregates(target_and_prompts):
    models, prompts = target_and_prompts
    samples = profile_prompts(models, prompts[:2], 12, 3, ignore_eos=True, ngram_sizes=[1, 2])
    recs = [{"id": s.id, "prompt_len": s.prompt_len, "output_ids": s.output_ids, "ngram_steps": s.ngram_steps}
            for s in samples]
    conditions = {"target": "t", "max_new_tokens": 12, "dtype": "float32", "trtspec_version": "x",
                  "ngram_pool": "per-request"}
    prof = build_profile("ngram", 3, None, conditions, {"w": recs}, ngram_sizes=[1, 2])
    w = prof.workloads["w"]
    assert w.accept_length_by_k == w.accept_length_by_n_k["2"]  # the primary size is upstream's default
    assert w.num_tokens == 24 and prof.measurement_conditions.model_extra["ngram_pool"] == "per-request"
    again = Profile.model_validate_json(prof.model_dump_json(by_alias=True))
    check_aggregates(again)
    data = again.model_dump(by_alias=True)
    data["workloads"]["w"]["accept_length_by_n_k"]["1"]["3"] += 0.5
    with pytest.raises(TrtspecError, match=r"workloads\.w\.accept_length_by_n_k\.1\.3"):
        check_aggregates(Profile.model_validate(data))
    recs[0]["ngram_steps"]["1"][0].append([2, 1])
    with pytest.raises(ValueError, match=r"ngram_steps\.1\.0: \[2, 1\] is not \[accepted, drafted\]"):
        build_profile("ngram", 3, None, conditions, {"w": recs}, ngram_sizes=[1, 2])


def test_only_exact_match_rules_apply():
    check_rule("exact_match")
    with pytest.raises(TrtspecError, match=r"^profile.accept_rule: rejection_sampling does not apply to n-gram"):
        check_rule("rejection_sampling")
