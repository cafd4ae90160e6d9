"""On the real default model: the acceptance length of every draft length K = 1..MAX_K, replayed
from ONE profiling pass (trtspec.tuning.profile + trtspec.tuning.acceptance), equals the AL the
runtime measures when it decodes with that K, per request and pooled, exactly.

Setup: SmolLM2-135M-Instruct (30 layers) as the target and a same-tokenizer draft made of its first
DRAFT_LAYERS layers, converted as a pair (trtspec.checkpoints.pair). The 6-layer draft of the
`smollm2_draft_hf` fixture is almost never accepted (AL about 1.01 on these prompts), which would
make "replay == runtime" nearly vacuous; a 24-layer draft gives AL 1.3-1.9 per request, growing
with K. Prompts: the shortest MT-Bench and the shortest HumanEval prompt (42 and 78 tokens with the
chat template; on a CPU longer prompts make the prefill dominate the test's time), decoded as one
batch (per-request stats), NEW tokens each. eos is ignored in the profile and the runtime alike
(both count a last step only up to where the output ends, runtime/stats.py counted_step, so an eos
would not break the equality: tests/tuning/test_replay_runtime.py checks that on tiny models).

A second check: the target as its own draft accepts every draft: it replays to K + 1 tokens per step
but the last (which counts only the tokens it emits, runtime/stats.py), for every K.

Slow: the cached SmolLM2, about a minute on 2 shared cores, one torch thread (much faster than two
when other processes share the CPU).
"""

from __future__ import annotations

import pytest
import torch

from runtime.test_batch_invariant import all_accepted
from triton_fixtures import smollm2_pair_and_short_prompts
from trtspec.runtime.generate import Models, generate_batch
from trtspec.tuning.acceptance import replay_chain, summarize
from trtspec.tuning.profile import profile_prompts

pytestmark = pytest.mark.slow
NEW, MAX_K, DRAFT_LAYERS, PER_SET = 24, 4, 24, 1


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def setup(smollm2_hf, tmp_path_factory):
    d = tmp_path_factory.mktemp("smol_tune")
    return smollm2_pair_and_short_prompts(smollm2_hf, d, DRAFT_LAYERS, PER_SET)


def test_one_profile_replays_to_the_runtime_acceptance_for_every_k(setup):
    models, prompts = setup
    profiles = profile_prompts(models, prompts, NEW, MAX_K, ignore_eos=True)  # the one profiling pass
    ids = [p for _, p in prompts]
    lists = [sp.match_lengths for sp in profiles]
    by_k = summarize("draft-target", lists, MAX_K)["accept_length_by_k"]
    als = {}
    for k in range(1, MAX_K + 1):
        runtime = generate_batch(models, ids, NEW, mode="draft-target", draft_len=k, ignore_eos=True)
        for sp, r in zip(profiles, runtime):
            assert r.output_ids == sp.output_ids  # lossless, and the profile saw the same tokens
            rep = replay_chain([sp.match_lengths], k)
            assert rep.steps == r.stats.verify_steps, (sp.id, k)
            assert rep.acceptance_length == pytest.approx(r.stats.acceptance_length, abs=1e-12), (sp.id, k)
            assert rep.accepted_at == r.stats.accepted_at() and rep.reached == r.stats.reached(), (sp.id, k)
            als[sp.id, k] = rep.acceptance_length
        steps = [s for r in runtime for s in r.stats.steps]
        pooled = sum(s.accepted + 1 for s in steps) / len(steps)
        assert replay_chain(lists, k).acceptance_length == pytest.approx(pooled, abs=1e-12)
        assert by_k[str(k)] == pytest.approx(pooled, abs=1e-12)  # what profile.json stores
    # Not vacuous: the draft is accepted on both workloads, and a longer K accepts more somewhere.
    for w in ("mt-bench", "humaneval"):
        assert max(al for (sid, _), al in als.items() if sid.startswith(w)) > 1.2, w
    assert by_k[str(MAX_K)] > by_k["1"] > 1.2


def test_target_as_its_own_draft_replays_to_k_plus_one(setup):
    models, prompts = setup
    profiles = profile_prompts(Models(target=models.target, draft=models.target), prompts, NEW, MAX_K,
                               ignore_eos=True)
    for sp in profiles:
        assert len(sp.match_lengths) == NEW
        for k in range(1, MAX_K + 1):
            assert replay_chain([sp.match_lengths], k).acceptance_length == pytest.approx(all_accepted(NEW, k))
