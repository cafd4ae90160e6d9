"""Speculative decoding is lossless under greedy acceptance: draft-target and EAGLE must emit exactly
the target's greedy tokens, whatever the draft. The drafts here are chosen so that every code path
runs: the target itself (everything accepted, including the case where the draft never ran d_K), a
random model (almost everything rejected), and drafts that agree often but not always.

"Agree often" with random weights: the target's layers write only 10% of their usual output into
the residual stream, so it is close to a bigram model (next token ~ argmax lm_head . embed(token));
a pure-bigram draft (layers zeroed) or EAGLE head (fc picks the token embedding, layer outputs
zeroed) then predicts it well but not perfectly.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from safetensors.torch import load_file

from tiny_models import make_eagle_head, make_hf_model
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.errors import TrtspecError
from trtspec.runtime.batch import Request
from trtspec.runtime.draft_target import generate_draft_target
from trtspec.runtime.eagle import EagleProposer, eagle_tree
from trtspec.runtime.eagle2 import DynamicEagleProposer, generate_eagle
from trtspec.runtime.eagle_net import EagleNet
from trtspec.runtime.greedy import generate_greedy
from trtspec.runtime.model import Decoder, prefill
from trtspec.runtime.tree import chain, validate_choices

NEW = 48
H, I = 64, 96


def zero_layer_outputs(model, scale: float):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(scale)
    return model


def bigram_head(base_model) -> dict:
    return {"embed_tokens.weight": base_model.model.embed_tokens.weight.detach().clone(),
            "fc.weight": torch.cat([torch.eye(H), torch.zeros(H, H)], 1), "fc.bias": torch.zeros(H),
            "layers.0.self_attn.o_proj.weight": torch.zeros(H, H), "layers.0.mlp.down_proj.weight": torch.zeros(H, I)}


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    base = zero_layer_outputs(make_hf_model("llama", d / "hf", num_key_value_heads=1), 0.1)
    base.save_pretrained(d / "hf")
    zero_layer_outputs(copy.deepcopy(base), 0.0).save_pretrained(d / "bigram_hf")
    make_hf_model("llama", d / "random_hf", seed=7, num_key_value_heads=1, num_hidden_layers=1)
    make_eagle_head(d / "hf", d / "head", extra=bigram_head(base))
    make_eagle_head(d / "hf", d / "random_head", seed=3, num_layers=2)
    for name in ("hf", "bigram_hf", "random_hf"):
        convert_hf(d / name, d / f"{name}_ckpt", dtype="float32")
    convert_eagle(d / "hf", d / "head", d / "eagle1", dtype="float32", tp=1)
    convert_eagle(d / "hf", d / "head", d / "eagle2", dtype="float32", tp=2)
    convert_eagle(d / "hf", d / "random_head", d / "eagle_random", dtype="float32", tp=1, num_eagle_layers=3)
    target = Decoder(load_checkpoint(d / "hf_ckpt"))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (6, 13, 1)]
    greedy = [r.output_ids for r in generate_greedy(target, prompts, NEW)]
    return dict(dir=d, base=base, target=target, prompts=prompts, greedy=greedy,
                bigram=Decoder(load_checkpoint(d / "bigram_hf_ckpt")),
                random=Decoder(load_checkpoint(d / "random_hf_ckpt")))


def accepted_counts(results) -> set[int]:
    return {s.accepted for r in results for s in r.stats.steps}


@pytest.mark.parametrize("k", [1, 3, 6])
def test_target_as_its_own_draft_accepts_everything(m, k):
    out = generate_draft_target(m["target"], m["target"], m["prompts"], NEW, k)
    assert [r.output_ids for r in out] == m["greedy"]
    for r in out:  # every step accepts all K but the last, which counts only the tokens left (stats.py)
        assert [s.accepted for s in r.stats.steps[:-1]] == [k] * (r.stats.verify_steps - 1)
        assert r.stats.acceptance_length == (NEW - 1) / r.stats.verify_steps
        assert r.stats.conditional_rates() == [1.0] * k
        assert r.stats.target_calls == 1 + math.ceil((NEW - 1) / (k + 1))


@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("draft", ["bigram", "random"])
def test_draft_target_reproduces_greedy(m, draft, k):
    out = generate_draft_target(m["target"], m[draft], m["prompts"], NEW, k)
    assert [r.output_ids for r in out] == m["greedy"]
    for r in out:
        assert r.stats.target_calls == 1 + r.stats.verify_steps
        assert sum(s.accepted + 1 for s in r.stats.steps) >= NEW - 1  # truncation only cuts the last step
    al = [r.stats.acceptance_length for r in out]
    if draft == "bigram":  # rejection, partial and full acceptance all happened
        assert sum(al) / len(al) > 1.4
        assert {0, 1, k} <= accepted_counts(out)
    else:
        assert max(al) < 1.5


def test_a_draft_with_a_smaller_vocabulary_reads_the_targets_extra_ids_and_stays_exact(m):
    """Same tokenizer, vocabularies padded differently (Qwen2.5-0.5B drafting for 7B): the target's
    ids past the draft's vocabulary, in a prompt or emitted, reach the draft as an id it has."""
    small = m["dir"] / "small_vocab_hf"
    make_hf_model("llama", small, seed=5, num_key_value_heads=1, num_hidden_layers=1, vocab_size=960)
    convert_hf(small, m["dir"] / "small_vocab_ckpt", dtype="float32")
    draft = Decoder(load_checkpoint(m["dir"] / "small_vocab_ckpt"))
    prompts = m["prompts"] + [[5, 990, 7, 999]]
    assert draft.vocab_size < m["target"].vocab_size and any(t >= 960 for p in prompts for t in p)
    greedy = [r.output_ids for r in generate_greedy(m["target"], prompts, NEW)]
    out = generate_draft_target(m["target"], draft, prompts, NEW, 3)
    assert [r.output_ids for r in out] == greedy
    # the profiler reads them the same way: its replay at K=3 is the runtime's acceptance
    from trtspec.runtime.generate import Models
    from trtspec.tuning.acceptance import replay_chain
    from trtspec.tuning.profile_pass import chain_match_lengths

    lists = chain_match_lengths(Models(m["target"], draft), [p + g for p, g in zip(prompts, greedy)],
                                [len(p) for p in prompts], 3)
    for one, r in zip(lists, out):
        assert replay_chain([one], 3).acceptance_length == pytest.approx(r.stats.acceptance_length)
    from trtspec.options import Sampling
    from trtspec.tuning.sampled import rejection_agreement  # the sampled profile's draft pass reads them too

    seq = prompts[-1] + greedy[-1]
    agree = rejection_agreement(Models(m["target"], draft), seq, len(prompts[-1]), Sampling(temperature=0.8, seed=1))
    assert len(agree) == len(seq) - 1


def test_truncated_output_counts_only_the_tokens_it_emits(m):
    """max_new_tokens 10, K = 4: the prefill emits 1 token, the first step 5, the last step the 4
    left: TensorRT-LLM stops the request at its length and counts 3 accepted drafts there, not 4."""
    out = generate_draft_target(m["target"], m["target"], m["prompts"], 10, 4)
    assert [r.output_ids for r in out] == [g[:10] for g in m["greedy"]]
    for r in out:
        assert [(s.accepted, s.offered) for s in r.stats.steps] == [(4, 4), (3, 3)]
        assert r.stats.acceptance_length == 4.5


def emitted_per_step(r) -> bool:
    """The steps count exactly the tokens emitted after the prefill's, and the last step (it ends
    the request) offers nothing past them."""
    last = r.stats.steps[-1]
    return sum(s.accepted + 1 for s in r.stats.steps) == len(r.output_ids) - 1 and last.offered == last.accepted


def test_eos_stops_every_loop_at_the_same_token(m):
    p, g = m["prompts"][0], m["greedy"][0]
    eos = g[9]
    want = g[:g.index(eos) + 1]
    assert generate_greedy(m["target"], [p], NEW, [eos])[0].output_ids == want
    r = generate_draft_target(m["target"], m["bigram"], [p], NEW, 3, [eos])[0]
    assert r.output_ids == want and emitted_per_step(r)
    net = EagleNet(load_checkpoint(m["dir"] / "eagle1"))
    r = generate_eagle(m["target"], net, [p], NEW, eos_ids=[eos])[0]
    assert r.output_ids == want and r.finish_reason == "eos" and emitted_per_step(r)


def test_an_eos_inside_an_accepted_path_ends_the_count_there(m):
    """The target as its own draft (K = 4) accepts every draft; an eos at output index j inside
    the second step (indices 6..10) cuts it: TensorRT-LLM emits up to the eos and counts only the
    drafts before it, not the ones the target accepted past it."""
    p, g = m["prompts"][0], m["greedy"][0]
    j = next(j for j in (7, 8, 9) if g.index(g[j]) == j)
    r = generate_draft_target(m["target"], m["target"], [p], NEW, 4, [g[j]])[0]
    assert r.output_ids == g[:j + 1] and r.finish_reason == "eos"
    assert [(s.accepted, s.offered) for s in r.stats.steps] == [(4, 4), (j - 6, j - 6)]
    assert r.stats.acceptance_length == j / 2 and r.stats.accepted_draft_tokens == j - 2
    net = EagleNet(load_checkpoint(m["dir"] / "eagle1"))
    for eos in dict.fromkeys(g[2:24]):  # EAGLE trees: wherever the eos falls in a step's path
        r = generate_eagle(m["target"], net, [p], NEW, eos_ids=[eos])[0]
        assert r.output_ids == g[:g.index(eos) + 1] and emitted_per_step(r), eos


TREES = {
    "default": None,
    "chain4": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]],
    "wide": [[i] for i in range(8)] + [[0, 0], [1, 0]],
    "mixed": [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0, 0]],
}


@pytest.mark.parametrize("tree", list(TREES))
@pytest.mark.parametrize("tp", [1, 2])
def test_eagle_reproduces_greedy(m, tp, tree):
    ckpt = load_checkpoint(m["dir"] / f"eagle{tp}")
    target, net = Decoder(ckpt), EagleNet(ckpt)
    assert len(net.nets) == 4 and net.distinct_nets == 1  # identical clones loaded once
    out = generate_eagle(target, net, m["prompts"], NEW, TREES[tree])
    assert [r.output_ids for r in out] == m["greedy"]
    depth = eagle_tree(net, TREES[tree]).max_depth
    for r in out:
        assert r.stats.max_positions == depth and r.stats.target_calls == 1 + r.stats.verify_steps
        assert all(0 <= s.accepted <= depth and s.accepted <= s.offered <= s.accepted + 1 for s in r.stats.steps)
    counts = accepted_counts(out)
    assert sum(r.stats.acceptance_length for r in out) / len(out) > 1.4
    if depth > 1:
        assert len(counts) >= 3  # rejections at several depths, not only all-or-nothing


def test_eagle_with_a_random_head_reproduces_greedy(m):
    ckpt = load_checkpoint(m["dir"] / "eagle_random")
    net = EagleNet(ckpt)
    tree = [[0], [1], [2], [0, 0], [1, 0], [0, 0, 0]]
    out = generate_eagle(m["target"], net, m["prompts"], NEW, tree)
    assert [r.output_ids for r in out] == m["greedy"]
    assert max(r.stats.acceptance_length for r in out) < 1.5


def test_eagle_logits_later_equal_the_forwards_own(m):
    """EagleNet.forward(with_logits=False) + logits(hidden, level): the profile pass's lazy logits."""
    net = EagleNet(load_checkpoint(m["dir"] / "eagle_random"))
    g = torch.Generator().manual_seed(3)
    tokens, feats = torch.randint(0, 1001, (2, 6), generator=g), torch.randn(2, 6, H, generator=g)
    for level in (0, 1):
        full, hid = net.forward(tokens, feats, net.new_cache(2, 16), level=level)
        none, hid2 = net.forward(tokens, feats, net.new_cache(2, 16), level=level, with_logits=False)
        assert none is None and torch.equal(hid, hid2)
        assert torch.allclose(net.logits(hid2[:, 2:4], level), full[:, 2:4], atol=1e-5, rtol=1e-5)


def test_default_tree_must_fit_the_checkpoint(m):
    net = EagleNet(load_checkpoint(m["dir"] / "eagle_random"))  # num_eagle_layers=3
    with pytest.raises(TrtspecError, match="depth 4 exceeds num_eagle_layers=3.*pass eagle_choices"):
        generate_eagle(m["target"], net, m["prompts"], 4)
    with pytest.raises(TrtspecError, match="max_non_leaves_per_layer=10"):
        generate_eagle(m["target"], net, m["prompts"], 4, [[i] for i in range(12)] + [[i, 0] for i in range(11)])


def test_drafter_matches_a_transformers_reference(m, device):
    """The drafter (2 layers, so layer 1's input norm is used) against transformers' LlamaModel with
    layer 0's input norm and the final norm removed, fed fc(cat(embed, feature)) as inputs_embeds."""
    import transformers as tf

    ckpt = load_checkpoint(m["dir"] / "eagle_random")
    net = EagleNet(ckpt, device=device)
    base_cfg = m["base"].config
    cfg = tf.LlamaConfig(hidden_size=H, intermediate_size=I, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=1, vocab_size=1001, rms_norm_eps=base_cfg.rms_norm_eps,
                         rope_theta=base_cfg.rope_theta, rope_scaling=base_cfg.rope_scaling,
                         max_position_embeddings=256)
    ref = tf.LlamaModel(cfg).eval()
    head = load_file(str(m["dir"] / "random_head" / "model.safetensors"))
    missing = ref.load_state_dict({k: v for k, v in head.items() if k.startswith("layers.")}, strict=False)
    assert set(missing.missing_keys) == {"embed_tokens.weight", "norm.weight", "layers.0.input_layernorm.weight"}
    ref.layers[0].input_layernorm = torch.nn.Identity()
    ref.norm = torch.nn.Identity()

    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(3, 1001, (1, 40), generator=g)
    feats = torch.randn(1, 40, H, generator=g)
    x = torch.nn.functional.linear(torch.cat([head["embed_tokens.weight"][tokens], feats], -1),
                                   head["fc.weight"], head["fc.bias"])
    with torch.no_grad():
        want_h = ref(inputs_embeds=x, position_ids=torch.arange(40)[None]).last_hidden_state
    want = want_h @ m["base"].lm_head.weight.T
    logits, hidden = net.forward(tokens, feats, net.new_cache(1, 48))
    assert hidden.device.type == device
    logits, hidden = logits.cpu(), hidden.cpu()
    assert (hidden - want_h).abs().max() < 1e-4
    assert (logits - want).abs().max() < 1e-4 and want.std() > 0.1


@pytest.mark.parametrize("dynamic", [None, 3])
def test_tree_drafting_matches_recomputing_every_path(m, dynamic):
    """Each drafted node token equals what the drafter gives when its root path is run as an
    ordinary sequence from scratch (pairs (node token, parent's drafter output)). Static tree
    (EAGLE-1) and dynamic per-row trees (EAGLE-2, top-3)."""
    ckpt = load_checkpoint(m["dir"] / "eagle_random")
    net, target = EagleNet(ckpt), m["target"]
    prompts = m["prompts"][:2]
    cache = target.new_cache(2, 64)
    logits, hidden, _ = prefill(target, cache, torch.arange(2), prompts)
    reqs = [Request(p, 8, output=[int(t)]) for p, t in zip(prompts, logits.argmax(-1))]
    if dynamic:
        net.max_draft_len = 12  # fewer than the 3 + 9 + 9 candidates: the best-scored subtree is kept
        proposer = DynamicEagleProposer(net, dynamic, target.vocab_size)
    else:
        tree = validate_choices([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 1, 0]], 3, 63, 10)
        proposer = EagleProposer(net, tree, target.vocab_size)
    proposer.start(reqs, torch.arange(2), hidden)
    proposal = proposer.propose(reqs, torch.arange(2))

    trees = [proposal.tree_for(b) for b in range(2)]
    if dynamic:
        assert all(t.size == 12 for t in trees) and trees[0].paths != trees[1].paths
    for b, r in enumerate(reqs):
        base_tokens = r.prompt[1:] + r.output
        base_feats = hidden[b, :len(r.prompt)]
        for n, path in enumerate(trees[b].paths, start=1):
            toks, feats = list(base_tokens), base_feats
            for rank in path:
                lg, hd = net.forward(torch.tensor([toks]), feats[None], net.new_cache(1, 64))
                tok = int(lg[0, -1].topk(rank + 1).indices[rank])
                toks, feats = toks + [tok], torch.cat([feats, hd[0, -1:]])
            assert int(proposal.tokens[b, n - 1]) == tok, (b, path)
    assert proposal.logits.shape == (2, trees[0].size, 1001)


@pytest.mark.parametrize("top_k", [1, 3])
@pytest.mark.parametrize("tp", [1, 2])
def test_eagle2_dynamic_tree_reproduces_greedy(m, tp, top_k):
    ckpt = load_checkpoint(m["dir"] / f"eagle{tp}")
    target, net = Decoder(ckpt), EagleNet(ckpt)
    out = generate_eagle(target, net, m["prompts"], NEW, dynamic_top_k=top_k)
    assert [r.output_ids for r in out] == m["greedy"]
    assert sum(r.stats.acceptance_length for r in out) / len(out) > 1.4
    if top_k == 1:  # a top-1 dynamic tree is the chain of depth num_eagle_layers, step for step
        chain_out = generate_eagle(target, net, m["prompts"], NEW, [list(p) for p in chain(4).paths])
        assert [r.stats.steps for r in out] == [r.stats.steps for r in chain_out]


def test_eagle2_with_a_tree_capped_by_max_draft_len_runs_to_the_last_token(m, tmp_path):
    """max_draft_len caps the tree sent to the target (3 nodes here), not the drafter's levels: each
    of the 3 levels after the first still runs top_k = 3 nodes through the drafter, 9 slots past its
    committed pairs, which the drafter's cache must hold on the last step too (it was sized for the
    target's 3-node block, and the last steps failed with 'KV cache full')."""
    ckpt = load_checkpoint(convert_eagle(m["dir"] / "hf", m["dir"] / "head", tmp_path / "e", dtype="float32",
                                         max_draft_len=3))
    out = generate_eagle(m["target"], EagleNet(ckpt), m["prompts"], NEW, dynamic_top_k=3)
    assert [r.output_ids for r in out] == m["greedy"]


def test_eagle2_options_are_checked(m):
    net = EagleNet(load_checkpoint(m["dir"] / "eagle1"))
    with pytest.raises(TrtspecError, match="top_k=11 must be in"):
        generate_eagle(m["target"], net, m["prompts"], 4, dynamic_top_k=11)
    with pytest.raises(TrtspecError, match="mutually exclusive"):
        generate_eagle(m["target"], net, m["prompts"], 4, [[0]], dynamic_top_k=2)


@pytest.mark.parametrize("dynamic", [None, 2])
def test_target_cache_after_acceptance_equals_a_fresh_prefill(m, dynamic):
    """After every verification the target's committed cache holds exactly the emitted sequence
    (accepted path kept in order, rejected nodes dropped, depth positions): its keys and values equal
    those of a fresh forward over prompt + output (the root excluded). Greedy output alone can hide an
    off-by-one here."""
    from trtspec.runtime.decode import decode
    from trtspec.runtime.eagle2 import eagle_proposer

    ckpt = load_checkpoint(m["dir"] / "eagle1")
    target, caches = Decoder(ckpt), []
    new_cache = target.new_cache
    target.new_cache = lambda *a, **k: caches.append(new_cache(*a, **k)) or caches[-1]
    tree = None if dynamic else TREES["mixed"]
    proposer = eagle_proposer(EagleNet(ckpt), target.vocab_size, tree, dynamic)
    prompts, outs, accepted = m["prompts"][:2], [[], []], 0
    for rows in decode(target, prompts, 16, proposer=proposer):
        for r in rows:
            outs[r.index] += r.tokens
            accepted += r.step.accepted if r.step else 0
            if r.done:
                continue
            seq = prompts[r.index] + outs[r.index][:-1]
            assert int(caches[0].lens[r.index]) == len(seq)
            fresh = new_cache(1, len(seq))
            target.forward(torch.tensor([seq]), fresh)
            for mine, ref in ((caches[0].k, fresh.k), (caches[0].v, fresh.v)):
                for a, b in zip(mine, ref):
                    assert (a[r.index, :len(seq)] - b[0]).abs().max() < 1e-5
    assert accepted > 4  # paths longer than the root were kept
