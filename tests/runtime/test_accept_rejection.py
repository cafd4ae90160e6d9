"""Rejection sampling (trtspec/runtime/accept.py) on synthetic distributions, called directly: the
edge cases a model rarely produces, checked in law by chi-square against the target's own p.

One verify step of a K = 2 chain per seeded row: the draft samples d_1 ~ q_1, d_2 ~ q_2 with the
keyed DRAFT draws (as DraftModelProposer does), the rule keeps or rejects. Lossless means: the
first emitted token follows p_1; given d_1 kept, the next follows p_2; given both kept, the bonus
token follows p_3 (Leviathan et al. 2023). The textbook bug (resample from p, not the residual)
fails the same check (power).
"""

from __future__ import annotations

import pytest
import torch

from tests.runtime.test_accept import ResampleFromTarget, chi_square_p
from trtspec.options import Sampling
from trtspec.runtime.accept import Key, RejectionSampling
from trtspec.runtime.sampling import DRAFT, draw, probs, uniform
from trtspec.runtime.speculative import Proposal
from trtspec.runtime.tree import chain

N = 4000  # seeded rows per check
# A right rule passes each of its three chi-square p-values above PASS (false failure < 3e-7 per
# check were its draws reshuffled); the textbook bug lands below 1e-100 on the first token here.
PASS = 1e-7
NEG = float("-inf")
TARGET_LOGITS = torch.tensor([[2.0, 1.0, 0.5, 0.0, -0.5, -1.0],
                              [0.0, 1.5, 1.5, 0.3, -1.0, 0.8],
                              [1.0, 0.0, 2.0, 0.5, 0.5, -2.0]], dtype=torch.float64)
# Draft logits ranked otherwise, so under top-k the draft proposes tokens the target gives p = 0.
DRAFT_LOGITS = torch.tensor([[0.0, 2.0, -1.0, 1.5, 0.5, 1.0],
                             [1.2, 0.0, 1.0, -0.5, 1.8, 0.0]], dtype=torch.float64)


def verify(rule, target_logits: torch.Tensor, draft_logits: torch.Tensor, s: Sampling, seed: int = 0):
    """N rows of one verify step: (emitted tokens per row, kept drafts per row)."""
    q = probs(draft_logits, s)
    drafts = torch.tensor([[draw(q[i], uniform(seed + r, i, DRAFT)) for i in range(2)] for r in range(N)])
    proposal = Proposal(chain(2), drafts, draft_logits.expand(N, -1, -1), sampled=True)
    out = rule(proposal, target_logits.expand(N, -1, -1), [Key(seed + r, 0) for r in range(N)])
    return [a.tokens for a in out], [len(a.path) - 1 for a in out]


def fits(tokens: list[list[int]], kept: list[int], target_logits: torch.Tensor, s: Sampling) -> list[float]:
    """Chi-square p-values: the first token against p_1, the second (d_1 kept) against p_2, the
    bonus (both kept) against p_3."""
    p = probs(target_logits, s)
    out = []
    for depth in range(3):
        x = torch.tensor([t[depth] for t, k in zip(tokens, kept) if k >= depth], dtype=torch.long)
        out.append(chi_square_p(torch.bincount(x, minlength=p.shape[-1]), p[depth]) if len(x) > 50 else 1.0)
    return out


SETTINGS = [Sampling(temperature=1.0), Sampling(temperature=0.7, top_k=3), Sampling(temperature=1.3, top_p=0.7)]


@pytest.mark.parametrize("s", SETTINGS, ids=lambda s: s.label())
def test_rejection_sampling_emits_the_target_distribution(s):
    tokens, kept = verify(RejectionSampling(s), TARGET_LOGITS, DRAFT_LOGITS, s)
    assert min(fits(tokens, kept, TARGET_LOGITS, s)) > PASS
    assert sum(k == 2 for k in kept) > 100  # the bonus position is reached and checked too


def test_the_textbook_bug_fails_the_same_check():
    s = SETTINGS[0]
    tokens, kept = verify(ResampleFromTarget(s), TARGET_LOGITS, DRAFT_LOGITS, s)
    assert min(fits(tokens, kept, TARGET_LOGITS, s)) < 1e-12


def test_a_draft_token_the_target_filters_out_is_never_kept():
    """top_k 3 on both: the draft's top 3 differ from the target's, so some drafts have p = 0; an
    eos at -inf (min_tokens) likewise."""
    s = SETTINGS[1]
    target = TARGET_LOGITS.clone()
    target[:, 0] = NEG  # the target's best token masked: the draft still proposes it
    draft = DRAFT_LOGITS.clone()
    draft[:, 0] = 3.0
    tokens, kept = verify(RejectionSampling(s), target, draft, s)
    p = probs(target, s)
    for t, k in zip(tokens, kept):
        assert all(p[i, t[i]] > 0 for i in range(k + 1))  # nothing the target cannot emit
    assert min(fits(tokens, kept, target, s)) > PASS


def test_a_draft_equal_to_the_target_is_always_kept():
    """q = p: min(1, p/q) = 1, nothing is rejected and the residual (all zero) is never read."""
    s = SETTINGS[2]
    tokens, kept = verify(RejectionSampling(s), TARGET_LOGITS, TARGET_LOGITS[:2], s)
    assert set(kept) == {2} and min(fits(tokens, kept, TARGET_LOGITS, s)) > PASS
