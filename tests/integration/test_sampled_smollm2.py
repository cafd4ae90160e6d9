"""On SmolLM2-135M-Instruct with a derived draft (its first DRAFT_LAYERS layers, as in
test_tuning_smollm2.py): acceptance falls with temperature, and at T = 0.7 the sampled profile's
prediction is what exact-match speculative decoding does, per seed, for every K.

Profiles at T = 0, 0.7 and 1.0 over the shortest MT-Bench and HumanEval prompts, SEEDS sampled
outputs per prompt (trtspec.tuning.sampled: one sampled decode + one draft pass each); AL(K) with its
standard error over prompts (acceptance.ratio_se). The figures are printed (run with -s) and the
drop from T = 0 to T = 1 must exceed 2 combined standard errors at K = MAX_K.

Slow: the cached SmolLM2, one torch thread.
"""

from __future__ import annotations

import pytest

from triton_fixtures import smollm2_pair_and_short_prompts
from trtspec.options import Sampling
from trtspec.runtime.generate import generate_batch
from trtspec.tuning.acceptance import acceptance_length_se, chain_accepted, replay_chain
from trtspec.tuning.profile import profile_prompts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
NEW, MAX_K, DRAFT_LAYERS, PER_SET, SEEDS = 24, 4, 24, 4, 2
TEMPERATURES = (0.0, 0.7, 1.0)


@pytest.fixture(scope="module")
def setup(smollm2_hf, tmp_path_factory):
    d = tmp_path_factory.mktemp("smol_sampled")
    return smollm2_pair_and_short_prompts(smollm2_hf, d, DRAFT_LAYERS, PER_SET)


def profile_at(models, prompts, temperature: float, seed: int = 0):
    """SEEDS samples per prompt at T > 0 (one at T = 0: greedy has no draws), sample j seeded seed + j
    (what trtspec profile --samples-per-prompt does)."""
    s = Sampling(temperature=temperature, seed=seed)
    reps = prompts * (SEEDS if temperature > 0 else 1)
    return profile_prompts(models, reps, NEW, MAX_K, ignore_eos=True,
                           settings=[s.model_copy(update={"seed": seed + j}) for j in range(len(reps))])


def test_acceptance_falls_with_temperature(setup):
    models, prompts = setup
    table = {}
    for t in TEMPERATURES:
        profiled = profile_at(models, prompts, t)
        ids = [sp.id for sp in profiled]
        for k in range(1, MAX_K + 1):
            lists = [chain_accepted(sp.match_lengths, k) for sp in profiled]
            al = replay_chain([sp.match_lengths for sp in profiled], k).acceptance_length
            table[t, k] = (al, acceptance_length_se(lists, ids))
    for t in TEMPERATURES:
        row = (f"K={k} {table[t, k][0]:.3f}±{table[t, k][1]:.3f}" for k in range(1, MAX_K + 1))
        print(f"T={t:g}: " + ", ".join(row))
    (cold, se_cold), (hot, se_hot) = table[0.0, MAX_K], table[1.0, MAX_K]
    assert cold - hot > 2 * (se_cold ** 2 + se_hot ** 2) ** 0.5, table
    assert table[0.7, MAX_K][0] < cold


def test_prediction_at_t07_is_exact_per_seed_for_every_k(setup):
    models, prompts = setup
    prompts = prompts[:1] + prompts[PER_SET:PER_SET + 1]  # one prompt per workload: K decodes each
    profiled = profile_at(models, prompts, 0.7, seed=11)[:len(prompts)]
    accepted = set()
    for k in range(1, MAX_K + 1):
        results = generate_batch(models, [p for _, p in prompts], NEW, mode="draft-target", draft_len=k,
                                 sampling=Sampling(temperature=0.7, seed=11), accept="exact_match", ignore_eos=True)
        for sp, r in zip(profiled, results):
            assert r.output_ids == sp.output_ids, (sp.id, k)
            rep = replay_chain([sp.match_lengths], k)
            assert rep.steps == r.stats.verify_steps and rep.accepted_at == r.stats.accepted_at(), (sp.id, k)
            accepted.add(rep.tokens - rep.steps)
    assert max(accepted) > 0  # the draft is accepted somewhere: the comparison is not vacuous
