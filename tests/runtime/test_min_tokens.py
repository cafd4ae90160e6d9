"""min_tokens (TensorRT-LLM's minimum output length): the end ids' logits are masked while fewer
than min_tokens tokens were generated (trtspec/upstream/sampling.py, "min_tokens"), on the target's
logits at every verified position, before the accept rule reads them.

Oracle: transformers' greedy generate with `min_new_tokens` (MinNewTokensLengthLogitsProcessor, the
same rule: eos masked while new tokens < m) on the tiny target, with the eos set to the token its
greedy output emits at index 2, so that without min_tokens the request ends after three tokens.
Plain, draft-target (K = 1, 3), n-gram and EAGLE (tree, dynamic) decoding must all give the
oracle's tokens. At temperature > 0 the accept rules never emit an eos below min_tokens, and the
lossless ones emit the masked target's distribution (chi-square against the exact distribution).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from runtime.test_accept import PROMPT, fit
from tiny_models import hf_greedy
from triton_fixtures import TREE_A, small_vocab_pair, tiny_eagle, tiny_pair
from trtspec.errors import TrtspecError
from trtspec.options import Sampling
from trtspec.runtime.accept import accept_rule
from trtspec.runtime.decode import generate, verify_external
from trtspec.runtime.draft_target import DraftModelProposer
from trtspec.runtime.generate import generate_batch, load_models, stream_request
from trtspec.runtime.sampling import probs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NEW, M = 16, 9


def hf_min_new_tokens(model, prompt: list[int], eos: int, m: int) -> list[int]:
    """transformers' greedy output with eos `eos` and min_new_tokens m (the oracle)."""
    ids = torch.tensor([prompt])
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = model.generate(ids, do_sample=False, max_new_tokens=NEW, min_new_tokens=m, eos_token_id=eos,
                             attention_mask=torch.ones_like(ids))
    return out[0, len(prompt):].tolist()


def early_eos(model) -> tuple[list[int], int]:
    """A prompt and an eos id: the token the target's greedy output emits first at index 2."""
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        prompt = torch.randint(3, 1001, (6,), generator=g).tolist()
        greedy = hf_greedy(model, torch.tensor([prompt]), NEW)
        if greedy[2] not in greedy[:2] and greedy[2] in greedy[3:M]:  # the mask matters past index 2 too
            return prompt, greedy[2]
    raise AssertionError("no prompt whose greedy output repeats its third token")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    d = tmp_path_factory.mktemp("min_tokens")
    pair, eagle = tiny_pair(d), tiny_eagle(d)
    out = {}
    for name, hf, models in (("pair", d / "hf", load_models(pair / "target", pair / "draft", tokenizer=False)),
                             ("eagle", d / "ehf", load_models(eagle, tokenizer=False))):
        model = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
        prompt, eos = early_eos(model)
        oracles = {m: hf_min_new_tokens(model, prompt, eos, m) for m in (2, 3, M)}
        out[name] = (dataclasses.replace(models, eos_ids=(eos,)), prompt, eos, oracles)
    return out


MODES = {"greedy": ("pair", {"mode": "greedy"}),
         "draft-target K=1": ("pair", {"mode": "draft-target", "draft_len": 1}),
         "draft-target K=3": ("pair", {"mode": "draft-target", "draft_len": 3}),
         "ngram K=3": ("pair", {"mode": "ngram", "draft_len": 3}),
         "eagle tree": ("eagle", {"mode": "eagle", "eagle_choices": TREE_A}),
         "eagle-2": ("eagle", {"mode": "eagle", "eagle_dynamic_top_k": 2})}


@pytest.mark.parametrize("name", list(MODES))
def test_every_mode_gives_transformers_min_new_tokens_output(tiny, name):
    which, options = MODES[name]
    models, prompt, eos, oracles = tiny[which]
    oracle = oracles[M]
    assert eos not in oracle[:M] and len(oracle) > M  # the oracle decoded past the masked positions
    (plain,) = generate_batch(models, [prompt], NEW, **options)
    assert plain.output_ids[-1] == eos and len(plain.output_ids) == 3 and plain.finish_reason == "eos"
    (got,) = generate_batch(models, [prompt], NEW, min_tokens=M, **options)
    assert got.output_ids == oracle
    streamed = [t for row in stream_request(models, prompt, NEW, eos_ids=(eos,), min_tokens=M, **options)
                for t in row.tokens]
    assert streamed == oracle


def test_the_step_producing_index_min_tokens_minus_one_is_masked(tiny):
    """min_tokens 3 masks index 2 (where the eos came); min_tokens 2 does not, as in transformers."""
    models, prompt, eos, oracles = tiny["pair"]
    for m in (2, 3):
        (got,) = generate_batch(models, [prompt], NEW, "greedy", min_tokens=m)
        assert got.output_ids == oracles[m]
    assert oracles[2][2] == eos and oracles[3][2] != eos


def test_min_tokens_past_the_length_runs_the_request_to_its_length(tiny):
    models, prompt, eos, _ = tiny["pair"]
    (got,) = generate_batch(models, [prompt], NEW, "draft-target", draft_len=3, min_tokens=NEW + 5)
    assert len(got.output_ids) == NEW and eos not in got.output_ids and got.finish_reason == "length"


def test_external_draft_verification_masks_from_the_first_output_index(tiny):
    """draft_tokens_external: the step emitting output indices 0.. masks them (min_tokens counts
    generated tokens only, not the prompt + draft it is handed)."""
    models, prompt, eos, oracles = tiny["pair"]
    oracle = oracles[M]
    step = verify_external(models.target, prompt, oracle[:2], NEW, (eos,), min_tokens=M)
    assert step.tokens == oracle[:3] and not step.done
    unmasked = verify_external(models.target, prompt, oracle[:2], NEW, (eos,))
    assert unmasked.tokens[-1] == eos and unmasked.done


def test_negative_min_tokens_is_refused(tiny):
    models, prompt, _, _ = tiny["pair"]
    with pytest.raises(TrtspecError, match=r"^min_tokens: expected >= 0, got -1$"):
        generate_batch(models, [prompt], NEW, "greedy", min_tokens=-1)


# ---- temperature > 0 ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The 12-token pair of test_accept, with eos the token the target most likes after PROMPT."""
    d = small_vocab_pair(tmp_path_factory.mktemp("small"))
    models = load_models(d / "target", d / "draft", tokenizer=False)
    logits, _ = models.target.forward(torch.tensor([PROMPT]), models.target.new_cache(1, len(PROMPT)))
    return models, int(logits[0, -1].argmax())


RULES = ["exact_match", "exact_match_resample", "rejection_sampling", "typical_acceptance"]


@pytest.mark.parametrize("rule", RULES)
def test_no_rule_emits_an_eos_below_min_tokens(small, rule):
    models, eos = small
    s = Sampling(temperature=1.0, seed=3)
    proposer = DraftModelProposer(models.draft, 3, models.target.vocab_size,
                                  sampling=s if rule == "rejection_sampling" else None)
    runs = generate(models.target, [PROMPT] * 200, 8, (eos,), proposer, accept_rule(rule, s), seed=3, min_tokens=5)
    assert all(eos not in r.output_ids[:5] and len(r.output_ids) >= 5 for r in runs)
    assert any(eos in r.output_ids[5:] for r in runs)  # allowed again from index 5
    free = generate(models.target, [PROMPT] * 200, 8, (eos,), proposer, accept_rule(rule, s), seed=3)
    assert sum(len(r.output_ids) < 5 for r in free) > 20  # without min_tokens the eos ends runs early


@pytest.mark.parametrize("rule", ["exact_match", "rejection_sampling"])
def test_lossless_rules_sample_the_masked_target(small, rule):
    """min_tokens 2: x1 and x2 follow the target with the eos masked, x3 the unmasked target."""
    models, eos = small
    s = Sampling(temperature=0.9)
    p1 = probs(models.target.forward(torch.tensor([PROMPT]), models.target.new_cache(1, 3))[0][0, -1], s)
    assert p1[eos] > 0.1  # the mask moves the distribution measurably
    proposer = DraftModelProposer(models.draft, 2, models.target.vocab_size,
                                  sampling=s if rule == "rejection_sampling" else None)
    runs = generate(models.target, [PROMPT] * 4000, 3, (eos,), proposer, accept_rule(rule, s), seed=20_000,
                    min_tokens=2)
    outputs = [r.output_ids for r in runs]
    p12, p3 = fit(models, outputs, s, eos=eos, min_tokens=2)
    assert p12 > 1e-3 and p3 > 1e-3, (p12, p3)
    assert fit(models, outputs, s)[0] < 1e-6  # the unmasked target does not fit
