"""Accept rules at temperature > 0 (trtspec/runtime/accept.py): lossless in distribution, checked
against the exact distribution of plain sampling from the target.

On a 12-token vocabulary the distribution of the first three sampled tokens is computed exactly
(every prefix through the target, 1 + 12 + 144 forwards). Thousands of seeded speculative runs are
then compared with it by a chi-square test: the joint of (x1, x2) and the marginal of x3, the
positions the first verify step decides (K = 2). A rule with the textbook rejection-sampling bug
(resample from p instead of norm(max(0, p - q))) fails the same test, and typical acceptance,
which is lossy by design, is shown to move the distribution.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chi2

from triton_fixtures import TREE_A, small_vocab_pair, tiny_eagle, tiny_pair
from trtspec.errors import TrtspecError
from trtspec.options import Sampling
from trtspec.runtime import accept as accept_module
from trtspec.runtime.accept import (ExactMatch, ExactMatchResample, Key, RejectionSampling, TypicalAcceptance,
                                    accept_greedy, accept_rule)
from trtspec.runtime.decode import generate
from trtspec.runtime.draft_target import DraftModelProposer
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.runtime.sampling import RESIDUAL, TARGET, draw, probs, uniform
from trtspec.runtime.speculative import Proposal
from trtspec.runtime.tree import chain

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT = [1, 5, 3]
N = 4000  # seeded runs per check
SETTINGS = [Sampling(temperature=0.7), Sampling(temperature=1.2, top_p=0.8), Sampling(temperature=1.0, top_k=5)]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = small_vocab_pair(tmp_path_factory.mktemp("small"))
    return load_models(d / "target", d / "draft", tokenizer=False)


@torch.inference_mode()
def exact_distribution(target, sampling: Sampling, eos: int | None = None,
                       min_tokens: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(P(x1, x2) [V, V], P(x3) [V]) of plain sampling from the target after PROMPT; with the
    logit of `eos` at -inf for output indices below min_tokens (test_min_tokens.py)."""
    V = target.vocab_size

    def next_probs(prefixes: torch.Tensor) -> torch.Tensor:
        seqs = torch.cat([torch.tensor(PROMPT).expand(len(prefixes), -1), prefixes], 1)
        logits, _ = target.forward(seqs, target.new_cache(len(seqs), seqs.shape[1]))
        logits = logits[:, -1].clone()
        if prefixes.shape[1] < min_tokens:
            logits[:, eos] = float("-inf")
        return probs(logits, sampling)

    p1 = next_probs(torch.zeros(1, 0, dtype=torch.long))[0]
    p2 = next_probs(torch.arange(V)[:, None])  # [x1, x2]
    joint12 = p1[:, None] * p2
    pairs = torch.cartesian_prod(torch.arange(V), torch.arange(V))  # row i = (x1, x2), x1-major
    p3 = next_probs(pairs)
    return joint12, (joint12.reshape(-1, 1) * p3).sum(0)


def chi_square_p(counts: torch.Tensor, expected_probs: torch.Tensor) -> float:
    """Goodness of fit; cells expected below 5 are pooled into one."""
    counts, expected = counts.flatten().double(), expected_probs.flatten() * counts.sum()
    small = expected < 5
    obs = torch.cat([counts[~small], counts[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    return float(chi2.sf(stat, int(keep.sum()) - 1))


def fit(models, outputs: list[list[int]], sampling: Sampling, **mask) -> tuple[float, float]:
    """Chi-square p-values of (x1, x2) and x3; mask: exact_distribution's eos / min_tokens."""
    V = models.target.vocab_size
    joint12, p3 = exact_distribution(models.target, sampling, **mask)
    x = torch.tensor(outputs)
    c12 = torch.bincount(x[:, 0] * V + x[:, 1], minlength=V * V)
    return chi_square_p(c12, joint12), chi_square_p(torch.bincount(x[:, 2], minlength=V), p3)


def run(models, sampling: Sampling, proposer=None, rule=None, seed: int = 0) -> list[list[int]]:
    rule = rule or accept_rule("exact_match", sampling)
    results = generate(models.target, [PROMPT] * N, 3, (), proposer, rule, seed=seed)
    return [r.output_ids for r in results]


@pytest.mark.parametrize("sampling", SETTINGS, ids=lambda s: s.label())
def test_plain_sampling_matches_the_exact_distribution(small, sampling):
    p12, p3 = fit(small, run(small, sampling), sampling)
    assert p12 > 1e-3 and p3 > 1e-3


@pytest.mark.parametrize("sampling", SETTINGS, ids=lambda s: s.label())
@pytest.mark.parametrize("rule", ["exact_match", "rejection_sampling"])
def test_lossless_rules_reproduce_the_target_distribution(small, rule, sampling):
    draft_sampling = sampling if rule == "rejection_sampling" else None  # sampled draft + its distribution
    proposer = DraftModelProposer(small.draft, 2, small.target.vocab_size, sampling=draft_sampling)
    outputs = run(small, sampling, proposer, accept_rule(rule, sampling), seed=10_000)
    p12, p3 = fit(small, outputs, sampling)
    assert p12 > 1e-3 and p3 > 1e-3, (p12, p3)


def test_rejection_sampling_with_a_greedy_draft_is_lossless(small):
    """q is then the one-hot of the draft's choice: keep d with probability p(d)."""
    s = SETTINGS[0]
    outputs = run(small, s, DraftModelProposer(small.draft, 2, small.target.vocab_size), accept_rule("rejection_sampling", s))
    assert min(fit(small, outputs, s)) > 1e-3


class ResampleFromTarget(RejectionSampling):
    """The textbook bug: after a rejection, sample p itself instead of norm(max(0, p - q))."""

    def __call__(self, proposal, target_logits, keys):
        accepted = super().__call__(proposal, target_logits, keys)
        for b, (a, key) in enumerate(zip(accepted, keys)):
            tree = proposal.tree_for(b)
            last = a.path[-1]
            if tree.children[last]:  # stopped by a rejection: redraw its token from p
                p = probs(target_logits[b, last], self.sampling)
                a.tokens[-1] = draw(p, uniform(key.seed, key.position + tree.depth[last], RESIDUAL))
        return accepted


def test_a_broken_rejection_rule_fails_the_same_check(small):
    s = Sampling(temperature=1.0)
    proposer = DraftModelProposer(small.draft, 2, small.target.vocab_size, sampling=s)
    outputs = run(small, s, proposer, ResampleFromTarget(s), seed=10_000)
    assert min(fit(small, outputs, s)) < 1e-6


def x2_total_variation(small, outputs, s: Sampling) -> float:
    joint12, _ = exact_distribution(small.target, s)
    x2 = torch.bincount(torch.tensor(outputs)[:, 1], minlength=small.target.vocab_size).double() / len(outputs)
    return 0.5 * float((x2 - joint12.sum(0)).abs().sum())


@pytest.mark.parametrize("rule,temperature", [(TypicalAcceptance, 0.5), (ExactMatchResample, 1.5)])
def test_the_lossy_rules_move_the_distribution_measurably(small, rule, temperature):
    """typical_acceptance (EAGLE engines, greedy sampling off) and exact_match_resample (engine-flow
    draft-target without draft logits) fail the check the lossless rules pass; the total variation
    of x2's marginal is what the README quotes."""
    s = Sampling(temperature=temperature)
    outputs = run(small, s, DraftModelProposer(small.draft, 2, small.target.vocab_size), rule(s))
    assert min(fit(small, outputs, s)) < 1e-6
    lossless = run(small, s, DraftModelProposer(small.draft, 2, small.target.vocab_size), ExactMatch(s))
    print(f"{rule.name}: TV(x2) {x2_total_variation(small, outputs, s):.4f}, "
          f"exact_match {x2_total_variation(small, lossless, s):.4f}")
    assert x2_total_variation(small, outputs, s) > 2 * x2_total_variation(small, lossless, s)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    pair, eagle = tiny_pair(d), tiny_eagle(d)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (7, 1, 12)]
    return {"pair": load_models(pair / "target", pair / "draft", tokenizer=False),
            "eagle": load_models(eagle, tokenizer=False), "prompts": prompts}


SPEC = {"draft-target K=1": ("pair", {"mode": "draft-target", "draft_len": 1}),
        "draft-target K=3": ("pair", {"mode": "draft-target", "draft_len": 3}),
        "eagle tree": ("eagle", {"mode": "eagle", "eagle_choices": TREE_A}),
        "eagle-2": ("eagle", {"mode": "eagle", "eagle_dynamic_top_k": 2})}


@pytest.mark.parametrize("name", list(SPEC))
def test_exact_match_emits_the_plain_sampled_output_for_the_same_seed(tiny, name):
    """Keyed draws: the target's sample at each output position is the same whatever drafted it,
    so exact-match speculation is plain sampling token for token (and accepts some drafts)."""
    which, options = SPEC[name]
    models, s = tiny[which], Sampling(temperature=0.4, top_p=0.95, seed=7)
    plain = generate_batch(models, tiny["prompts"], 40, "greedy", ignore_eos=True, sampling=s)
    spec = generate_batch(models, tiny["prompts"], 40, ignore_eos=True, sampling=s, **options)
    assert [r.output_ids for r in spec] == [r.output_ids for r in plain]
    assert sum(st.accepted for r in spec for st in r.stats.steps) > 0
    greedy = generate_batch(models, tiny["prompts"], 40, "greedy", ignore_eos=True)
    assert [r.output_ids for r in plain] != [r.output_ids for r in greedy]


def test_same_seed_same_output_other_seed_other_output(tiny):
    models, s = tiny["pair"], Sampling(temperature=1.0, seed=5)
    one = generate_batch(models, tiny["prompts"], 30, draft_len=3, ignore_eos=True, sampling=s,
                         accept="rejection_sampling")
    again = generate_batch(models, tiny["prompts"], 30, draft_len=3, ignore_eos=True, sampling=s,
                           accept="rejection_sampling")
    other = generate_batch(models, tiny["prompts"], 30, draft_len=3, ignore_eos=True,
                           sampling=s.model_copy(update={"seed": 6}), accept="rejection_sampling")
    assert [r.output_ids for r in one] == [r.output_ids for r in again]
    assert [r.output_ids for r in one] != [r.output_ids for r in other]


def test_greedy_settings_give_the_greedy_rule_whatever_the_name():
    for name in ("greedy", "exact_match", "exact_match_resample", "rejection_sampling", "typical_acceptance"):
        assert accept_rule(name, Sampling()) is accept_greedy
        assert accept_rule(name, Sampling(temperature=0.9, top_k=1)) is accept_greedy


def test_rule_errors_name_the_field(tiny):
    with pytest.raises(TrtspecError, match=r"^accept_rule: 'lossy' is not one of"):
        accept_rule("lossy", Sampling(temperature=0.5))
    with pytest.raises(TrtspecError, match=r"^accept_rule: greedy cannot accept at T=0.5"):
        accept_rule("greedy", Sampling(temperature=0.5))
    with pytest.raises(TrtspecError, match=r"^rejection_sampling: needs a chain"):
        generate_batch(tiny["eagle"], tiny["prompts"], 5, eagle_choices=TREE_A,
                       sampling=Sampling(temperature=0.5), accept="rejection_sampling")


def engine_kernel_draw(p: torch.Tensor, top_p: float, u: float) -> int:
    """TensorRT-LLM's C++ top-p / top-k sampling kernels, as their source reads (upstream.sampling
    ENGINE_TOP_P_TRUNCATES): P' = u * top_p, the first token by descending probability whose
    inclusive cumulative probability reaches P'."""
    order = p.argsort(descending=True)
    return int(order[int(torch.searchsorted(p[order].cumsum(0), torch.tensor([u * top_p], dtype=p.dtype)))])


def test_exact_match_resample_tests_the_draft_against_the_engine_kernels_draw(monkeypatch):
    """The engine flow's sample s comes from the top-p kernel, which gives the boundary token only the
    mass that reaches top_p: p = (.5, .3, .2), top_p .6 accepts the argmax draft with probability
    .5 / .6, not .5 / .8 (renormalised). Every u on a fine grid gives the kernel's token."""
    logits = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64).log()
    s = Sampling(temperature=1.0, top_p=0.6)
    grid = [(i + 0.5) / 600 for i in range(600)]
    rule, proposal = ExactMatchResample(s), Proposal(chain(1), torch.tensor([[0]]), None)

    def kept(u: float) -> int:  # the target's draw at u (a miss's fresh draw at .5)
        monkeypatch.setattr(accept_module, "uniform", lambda seed, position, purpose: u if purpose == TARGET else 0.5)
        return len(rule(proposal, logits[None, None].expand(1, 2, 3), [Key(0, 0)])[0].path) - 1
    got = [kept(x) for x in grid]
    want = [int(engine_kernel_draw(logits.softmax(0), s.top_p, x) == 0) for x in grid]
    assert sum(got) / len(grid) == pytest.approx(0.5 / 0.6, abs=2e-3) and got == want


def test_exact_match_resample_draws_the_bonus_token_afresh_from_p(monkeypatch):
    """After a fully kept chain the engine marks step == numDraftTokens not accepted, so the bonus
    token is the multinomial resample of the masked, renormalised p (acceptDraftTokensKernel), not
    the kernels' truncated draw: p = (.5, .3, .2) at top_p .6 gives (.625, .375, 0), not (.833, .167, 0).
    A step with no draft emits the kernels' draw itself."""
    logits = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64).log()
    s = Sampling(temperature=1.0, top_p=0.6)
    rule = ExactMatchResample(s)
    grid = [(i + 0.5) / 600 for i in range(600)]

    def emitted(tree, drafted, x: float) -> list[int]:  # the first draft kept (u .1 -> token 0), else u = x
        monkeypatch.setattr(accept_module, "uniform",
                            lambda seed, position, purpose: 0.1 if (position, purpose) == (0, TARGET) else x)
        n = len(drafted)
        return rule(Proposal(tree, torch.tensor([drafted]), None), logits.expand(1, n + 1, 3), [Key(0, 0)])[0].tokens
    bonus = torch.bincount(torch.tensor([emitted(chain(1), [0], x)[-1] for x in grid]), minlength=3)
    assert bonus.tolist() == [375, 225, 0]  # .625 / .375 of the grid
    monkeypatch.setattr(accept_module, "uniform", lambda seed, position, purpose: 0.7)
    plain = rule(Proposal(chain(0), torch.zeros(1, 0, dtype=torch.long), None), logits[None, None], [Key(0, 0)])
    assert plain[0].tokens == [engine_kernel_draw(logits.softmax(0), s.top_p, 0.7)]


def test_typical_acceptance_masks_with_the_engines_entropy():
    """TensorRT-LLM masks p < min(eps, sqrt(eps) e^-H) with H = -sum p ln(p + 1e-6) (addBiasSoftMax's
    EPSILON for float logits): on this flat 128k vocabulary that H is 0.11 nats below the exact
    entropy, which raises the threshold by 11% and masks 4181 more tokens."""
    logits = torch.randn(128_000, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    s = Sampling(temperature=0.8)
    p = (logits / s.temperature).softmax(-1)
    threshold = min(0.09, 0.09 ** 0.5 * math.exp(float((p * (p + 1e-6).log()).sum())))
    kept = TypicalAcceptance(s).node_probs(logits) > 0
    assert torch.equal(kept, p >= threshold)
