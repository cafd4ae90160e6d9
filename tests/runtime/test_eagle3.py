"""EAGLE-3 in the runtime (trtspec/runtime/eagle3.py) against ModelOpt's own forward of the head.

The oracle: ModelOpt 0.47 builds the head (`mtsp.convert`, EAGLE-3 config, one layer, reduced
vocabulary) on a tiny HF Llama target and exports it (`export_speculative_decoding`); the runtime
loads the export and the target's TRT-LLM checkpoint. What ModelOpt's head reads
(HFEagleModel.pseudo_speculative_generate, replicated in `modelopt_chain` with the logits kept):
- the outputs of the target's decoder layers `eagle_aux_hidden_state_layer_ids` (forward hooks on
  the layers: the residual stream after each), concatenated in layer order, through `fc`;
- the target's embeddings of the input ids shifted left by one, the last one being the target's
  greedy next token: position j pairs (token j+1, captured state j);
- each further draft step appends (the drafted token, the head's pre-norm output at the last
  position) and reruns the whole sequence; the draft token is argmax + d2t[argmax].
Our proposer reaches the same drafts through its KV cache (catch-up, then one position per level).
Logits agree to ~1e-4: ModelOpt normalises the hidden half twice (upstream.modelopt), which with
unit weights changes it by the second norm's eps only.
"""

from __future__ import annotations

import pytest
import torch

from tiny_models import eagle3_dirs, make_hf_model
from trtspec.checkpoints.convert import convert_hf
from trtspec.errors import TrtspecError
from trtspec.runtime.batch import make_requests
from trtspec.runtime.eagle3 import Eagle3Proposer
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.runtime.model import prefill

pytestmark = pytest.mark.usefixtures("one_torch_thread")
V, DRAFT_V, NEW = 48, 40, 20


@pytest.fixture(scope="module")
def e3(tmp_path_factory):
    d = tmp_path_factory.mktemp("eagle3")
    oracle = eagle3_dirs(d, V, DRAFT_V)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (5, 9, 1, 7)]
    return dict(dir=d, oracle=oracle, prompts=prompts,
                models=load_models(d / "ckpt", tokenizer=False, eagle3_head=d / "head"),
                bigram=load_models(d / "ckpt", tokenizer=False, eagle3_head=d / "bigram_head"))


@torch.no_grad()
def modelopt_chain(model, ids: torch.Tensor, k: int):
    """ModelOpt's pseudo_speculative_generate with each step's logits kept: (target's next token,
    captured states [1, T, 3H], per-step logits [1, T + s, draft_vocab], draft tokens [1, k])."""
    import transformers as tf

    out = tf.LlamaForCausalLM.forward(model, input_ids=ids, output_hidden_states=True)
    base = out.logits[:, -1:].argmax(-1)
    aux = model.pop_and_gather_aux_hiddens()
    em = model.eagle_module
    em._maybe_init_rope()
    h, e_ids, steps, drafts = em.fc(aux), torch.cat([ids[:, 1:], base], -1), [], []
    for _ in range(k):
        mask = model._prepare_decoder_attention_mask(None, tuple(e_ids.shape), 0, h.device, h.dtype)
        _, pre, logits, _ = model._eagle_forward(h, model._base_model_embeddings(e_ids), mask, None)
        t = logits[:, -1:].argmax(-1)
        t = t + em.d2t[t]
        steps.append(logits)
        drafts.append(t)
        e_ids, h = torch.cat([e_ids, t], -1), torch.cat([h, pre[:, -1:]], 1)
    return int(base), aux, steps, torch.cat(drafts, -1)


@pytest.mark.parametrize("prompt", [[5, 7, 9, 11, 3, 20, 31], [40, 4, 17, 17, 8, 22, 6, 30, 12, 3, 9]])
def test_draft_logits_equal_modelopts_forward(e3, prompt, device):
    oracle, k = e3["oracle"], 4
    models = load_models(e3["dir"] / "ckpt", tokenizer=False, eagle3_head=e3["dir"] / "head", device=device)
    target, net, H = models.target, models.eagle3, models.target.spec.hidden_size
    base, aux, steps, drafts = modelopt_chain(oracle, torch.tensor([prompt]), k)
    assert torch.equal(drafts, oracle.pseudo_speculative_generate(torch.tensor([prompt]), k)[1])  # the replica is ModelOpt's
    rows, T = torch.arange(1), len(prompt)
    logits, hidden, _ = prefill(target, target.new_cache(1, 64), rows, [prompt])
    assert int(logits.argmax()) == base
    assert hidden.device.type == device
    assert torch.allclose(hidden[0, :T, H:].cpu(), aux[0], atol=1e-5)  # captured layers 1, 3, 4
    # every position of the catch-up (pairs (token j+1, state j)), mapped back through d2t
    ours, _ = net.forward(torch.tensor([prompt[1:] + [base]]), hidden[:, :T, H:], net.new_cache(1, 64))
    ours, ids = ours.cpu(), net.target_ids.cpu()
    assert torch.allclose(ours[0][:, ids], steps[0][0], atol=1e-3, rtol=1e-4)
    outside = torch.ones(V, dtype=torch.bool)
    outside[ids] = False
    assert bool(torch.isinf(ours[0][:, outside]).all())  # the head cannot draft other target ids
    # the chain: K levels of the proposer (KV cache) against K full reruns
    (r,) = make_requests([prompt], NEW, (), V, k)
    r.emit([base])
    proposer = Eagle3Proposer(net, k, V)
    proposer.start([r], rows, hidden)
    proposal = proposer.propose([r], rows)
    assert torch.equal(proposal.tokens.cpu(), drafts)
    for s in range(k):
        assert torch.allclose(proposal.logits[0, s, ids].cpu(), steps[s][0, -1], atol=1e-3, rtol=1e-4)


def test_logits_later_equal_the_forwards_own(e3):
    """with_logits=False (the batched profile pass: no full-vocabulary float32 logits at every position
    of a batch) and `logits` of the positions needed later give the forward's logits (to float32
    rounding: the GEMM's row count differs) and its argmax."""
    models, prompt = e3["models"], e3["prompts"][1]
    target, net, H = models.target, models.eagle3, models.target.spec.hidden_size
    _, hidden, _ = prefill(target, target.new_cache(1, 64), torch.arange(1), [prompt])
    args = (torch.tensor([prompt[1:] + [0]]), hidden[:, :len(prompt), H:])
    full, out = net.forward(*args, net.new_cache(1, 64))
    none, out2 = net.forward(*args, net.new_cache(1, 64), with_logits=False)
    assert none is None and torch.equal(out, out2)
    picked = torch.tensor([0, 3, len(prompt) - 1])
    later = net.logits(out2[0, picked])
    assert torch.allclose(later, full[0, picked], atol=1e-5, rtol=1e-5)
    assert torch.equal(torch.isinf(later), torch.isinf(full[0, picked]))
    assert torch.equal(later.argmax(-1), full[0, picked].argmax(-1))


def test_modelopt_trains_another_first_layer_norm_than_trtllm_serves(e3):
    """Why the oracle head keeps input_layernorm at ones (upstream.modelopt): ModelOpt's forward
    normalises the hidden half with input_layernorm too. With other weights the two differ."""
    em = e3["oracle"].eagle_module
    layer, x = em.layers[0], torch.randn(1, 3, em.config.hidden_size)
    with torch.no_grad():
        served = layer.hidden_norm(x)
        trained = layer.hidden_norm(layer.input_layernorm(x))
        assert torch.allclose(served, trained, atol=1e-4)  # ones: the same to rms-norm eps
        saved = layer.input_layernorm.weight.clone()
        layer.input_layernorm.weight.mul_(torch.linspace(0.5, 1.5, len(saved)))
        trained = layer.hidden_norm(layer.input_layernorm(x))
        layer.input_layernorm.weight.copy_(saved)
    assert (served - trained).abs().max() > 1e-2


@pytest.mark.parametrize("head", ["models", "bigram"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_greedy_speculation_emits_the_targets_greedy_tokens(e3, head, k):
    models = e3[head]
    greedy = generate_batch(models, e3["prompts"], NEW, mode="greedy", ignore_eos=True)
    spec = generate_batch(models, e3["prompts"], NEW, mode="eagle3", draft_len=k, ignore_eos=True)
    assert [r.output_ids for r in spec] == [r.output_ids for r in greedy]
    if head == "bigram" and k >= 3:  # a head that drafts well is accepted several tokens deep
        assert max(r.stats.acceptance_length for r in spec) > 2.5


def test_eagle3_mode_is_checked(e3, tmp_path):
    plain = load_models(e3["dir"] / "ckpt", tokenizer=False)
    with pytest.raises(TrtspecError, match="EAGLE-3 head"):
        generate_batch(plain, e3["prompts"], 4, mode="eagle3")
    with pytest.raises(TrtspecError, match="draft_len"):
        generate_batch(e3["models"], e3["prompts"], 4, mode="eagle3", draft_len=0)
    assert generate_batch(e3["models"], e3["prompts"][:1], 4)[0].stats.acceptance_length is not None  # auto: eagle3
    make_hf_model("llama", tmp_path / "small", num_hidden_layers=4, vocab_size=V)  # has no layer 4
    convert_hf(tmp_path / "small", tmp_path / "small_ckpt", dtype="float32")
    with pytest.raises(TrtspecError, match="eagle_aux_hidden_state_layer_ids"):
        load_models(tmp_path / "small_ckpt", tokenizer=False, eagle3_head=e3["dir"] / "head")


def test_trtspec_generate_with_an_eagle3_head(e3, capsys):
    import json

    from cli_helpers import run_cli

    prompt = e3["prompts"][1]
    code, out, err = run_cli(capsys, "generate", "--ckpt", e3["dir"] / "ckpt", "--eagle3-head", e3["dir"] / "bigram_head",
                             "--draft-len", "3", "--prompt-ids", json.dumps(prompt), "--max-new-tokens", NEW,
                             "--ignore-eos", "--json")
    assert code == 0, err
    result = json.loads(out)
    greedy = generate_batch(e3["bigram"], [prompt], NEW, mode="greedy", ignore_eos=True)[0]
    assert result["output_ids"] == greedy.output_ids and result["acceptance_length"] > 1


def test_batch_invariant_mode_carries_the_captured_layers_too(e3):
    models = e3["bigram"]
    greedy = generate_batch(models, e3["prompts"], NEW, mode="greedy", ignore_eos=True)
    spec = generate_batch(models, e3["prompts"], NEW, mode="eagle3", draft_len=2, ignore_eos=True, batch_invariant=True)
    assert [r.output_ids for r in spec] == [r.output_ids for r in greedy]
    fast = generate_batch(models, e3["prompts"], NEW, mode="eagle3", draft_len=2, ignore_eos=True)
    assert [r.stats.acceptance_length for r in spec] == [r.stats.acceptance_length for r in fast]


def test_sampled_exact_match_emits_the_targets_sampled_tokens(e3):
    """At T > 0 the head still drafts argmax; exact_match (TensorRT-LLM's allow_advanced_sampling
    route) keeps a draft iff it equals the target's keyed sample, so the output is plain sampling's."""
    from trtspec.options import Sampling

    models, s = e3["bigram"], Sampling(temperature=0.8, seed=5)
    plain = generate_batch(models, e3["prompts"], NEW, mode="greedy", ignore_eos=True, sampling=s)
    spec = generate_batch(models, e3["prompts"], NEW, mode="eagle3", draft_len=3, ignore_eos=True, sampling=s,
                          accept="exact_match")
    assert [r.output_ids for r in spec] == [r.output_ids for r in plain]
    greedy = generate_batch(models, e3["prompts"], NEW, mode="greedy", ignore_eos=True)
    assert [r.output_ids for r in plain] != [r.output_ids for r in greedy]  # it did sample
