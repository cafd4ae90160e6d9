"""The replay math (trtspec.tuning.acceptance) reproduces the real runtime exactly: AL and the
per-position conditional/marginal rates of trtspec/runtime/stats.py, per request and pooled, for
every draft length and for several EAGLE trees (TRT-LLM's default mc_sim_7b_63 included).

Match lengths are computed here from one teacher-forced draft forward, independently of the
profiler; EAGLE rank paths come from the profiler (trtspec.tuning.profile). Models: a tiny Llama
whose layers write only 10% into the residual stream (close to a bigram model), a bigram draft and
a bigram-ish EAGLE head, so acceptance is partial (tests/runtime/test_speculative.py has the idea).
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from tiny_models import make_eagle_head, make_hf_model
from trtspec.upstream import trtllm
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.runtime.stats import RequestStats
from trtspec.tuning.acceptance import replay_chain, replay_tree

NEW, MAX_K, EXTRA = 40, 6, 8  # profile NEW + EXTRA tokens so the last runs are not cut
H, I = 64, 96
TREES = {
    "chain4": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]],
    "wide": [[0], [1], [2], [3], [0, 0], [1, 0], [0, 1], [0, 0, 0], [0, 0, 0, 0]],
    "default": trtllm.MC_SIM_7B_63,
}


def scale_layer_outputs(model, scale):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(scale)
    return model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: thread start-up dominates each op; one thread is several times faster."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    base = scale_layer_outputs(make_hf_model("llama", d / "hf", seed=5), 0.1)
    base.save_pretrained(d / "hf")
    scale_layer_outputs(copy.deepcopy(base), 0.0).save_pretrained(d / "bigram")
    head = {"embed_tokens.weight": base.model.embed_tokens.weight.detach().clone(),
            "fc.weight": torch.cat([torch.eye(H), torch.zeros(H, H)], 1), "fc.bias": torch.zeros(H),
            "layers.0.self_attn.o_proj.weight": torch.zeros(H, H), "layers.0.mlp.down_proj.weight": torch.zeros(H, I)}
    make_eagle_head(d / "hf", d / "head", extra=head)
    convert_hf(d / "hf", d / "target", dtype="float32")
    convert_hf(d / "bigram", d / "draft", dtype="float32")
    convert_eagle(d / "hf", d / "head", d / "eagle", dtype="float32", num_eagle_layers=4)
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (4, 9, 2)]
    return d, prompts


@torch.inference_mode()
def teacher_forced_match_lengths(models, prompt: list[int], new: int) -> tuple[list[int], list[int]]:
    """(greedy output, match_lengths[t] for t < new): one draft forward over prompt + output."""
    out = generate_batch(models, [prompt], new + EXTRA, mode="greedy", ignore_eos=True)[0].output_ids
    seq = prompt + out
    logits, _ = models.draft.forward(torch.tensor([seq]), models.draft.new_cache(1, len(seq)))
    vocab = min(models.draft.vocab_size, models.target.vocab_size)  # the proposer's restriction
    guess = logits[0, :, :vocab].argmax(-1).tolist()
    P = len(prompt)
    m = []
    for t in range(new):  # state t: the draft at index P - 1 + t + j predicts seq[P + t + j]
        n = 0
        while n < MAX_K and P + t + n < len(seq) and guess[P - 1 + t + n] == seq[P + t + n]:
            n += 1
        m.append(n)
    return out, m


def pooled(stats: list[RequestStats]):
    steps = [s for r in stats for s in r.steps]
    return sum(s.accepted + 1 for s in steps) / len(steps)


def test_chain_replay_equals_runtime(ckpts):
    d, prompts = ckpts
    models = load_models(d / "target", d / "draft")
    profiled = [teacher_forced_match_lengths(models, p, NEW) for p in prompts]
    seen = set()
    for k in range(1, MAX_K + 1):
        results = generate_batch(models, prompts, NEW, mode="draft-target", draft_len=k, ignore_eos=True)
        for (out, m), r in zip(profiled, results):
            assert r.output_ids == out[:NEW]
            rep = replay_chain([m], k)
            assert rep.steps == r.stats.verify_steps
            assert rep.acceptance_length == pytest.approx(r.stats.acceptance_length, abs=1e-12)
            assert rep.accepted_at == r.stats.accepted_at() and rep.reached == r.stats.reached()
            seen.add(round(rep.acceptance_length, 4))
        rep = replay_chain([m for _, m in profiled], k)
        assert rep.acceptance_length == pytest.approx(pooled([r.stats for r in results]), abs=1e-12)
        merged = RequestStats(max_positions=k, steps=[s for r in results for s in r.stats.steps])
        assert rep.conditional_rates() == pytest.approx(merged.conditional_rates(), abs=1e-12)
        assert rep.marginal_rates() == pytest.approx(merged.marginal_rates(), abs=1e-12)
    assert len(seen) > 4 and max(seen) > 1.5  # partial, varied acceptance: the check is not vacuous


def tie_logits_in_pairs(models):
    """The drafter's lm_head rows in identical pairs: tokens 2m and 2m + 1 always tie (bf16 logits
    tie often), so the tree's ranks depend on how ties are ordered (runtime.tree.top_ids)."""
    with torch.no_grad():
        for net in models.eagle.nets:
            w = net.lm_head
            w[1::2] = w[0:w.shape[0] - 1:2].clone()


@pytest.mark.parametrize("tree,tied", [(t, False) for t in TREES] + [("wide", True)])
def test_tree_replay_equals_runtime(ckpts, tree, tied):
    from trtspec.tuning.profile import profile_prompts

    d, prompts = ckpts
    models = load_models(d / "eagle")
    if tied:  # before one tie rule: the runtime's topk ordered ties by k, replay AL 1.5000 vs runtime 1.4625
        tie_logits_in_pairs(models)
    profiles = profile_prompts(models, [(str(i), p) for i, p in enumerate(prompts)], NEW + EXTRA, 4,
                               tree_top_k=10, ignore_eos=True)
    results = generate_batch(models, prompts, NEW, mode="eagle", eagle_choices=TREES[tree], ignore_eos=True)
    paths = [sp.rank_paths[:NEW] for sp in profiles]
    for p, r in zip(paths, results):
        rep = replay_tree([p], TREES[tree])
        assert rep.steps == r.stats.verify_steps
        assert rep.acceptance_length == pytest.approx(r.stats.acceptance_length, abs=1e-12)
        assert rep.accepted_at == r.stats.accepted_at() and rep.reached == r.stats.reached()
    rep = replay_tree(paths, TREES[tree])
    assert rep.acceptance_length == pytest.approx(pooled([r.stats for r in results]), abs=1e-12)
    assert rep.acceptance_length > 1.3


@pytest.mark.parametrize("mode", ["draft-target", "wide", "default"])
def test_replay_equals_runtime_when_an_eos_ends_the_output(ckpts, mode):
    """An end id wherever it falls, inside an accepted path included: the runtime counts each
    step's emitted tokens as TensorRT-LLM does, and the replay over the profile (which stops at the
    end id) predicts the same AL. Before, the runtime counted the drafts it accepted past the end
    id, which the profile never sees (prompt 1, a 14-node tree, end id at output index 3: AL 2.5
    measured, 2.0 replayed), and both counted a last step's tokens past the end."""
    from trtspec.tuning.profile import profile_prompts

    d, prompts = ckpts
    models = load_models(d / "target", d / "draft") if mode == "draft-target" else load_models(d / "eagle")
    greedy = generate_batch(models, [prompts[1]], NEW, mode="greedy", ignore_eos=True)[0].output_ids
    for j in range(2, 24):
        if greedy.index(greedy[j]) != j:
            continue
        m = dataclasses.replace(models, eos_ids=(greedy[j],))
        (sp,) = profile_prompts(m, [("p", prompts[1])], NEW, 4, tree_top_k=10)
        assert sp.output_ids == greedy[:j + 1]
        if mode == "draft-target":
            (r,) = generate_batch(m, [prompts[1]], NEW, mode="draft-target", draft_len=4)
            rep = replay_chain([sp.match_lengths], 4)
        else:
            (r,) = generate_batch(m, [prompts[1]], NEW, mode="eagle", eagle_choices=TREES[mode])
            rep = replay_tree([sp.rank_paths], TREES[mode])
        assert r.output_ids == greedy[:j + 1] and r.finish_reason == "eos"
        assert rep.acceptance_length == pytest.approx(r.stats.acceptance_length, abs=1e-12), j
        assert rep.steps == r.stats.verify_steps and rep.tokens == j  # every token after the prefill's
        assert rep.accepted_at == r.stats.accepted_at() and rep.reached == r.stats.reached(), j
