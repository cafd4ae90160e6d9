"""eagle_choices validation (TRT-LLM's rules, one error per rule), tree structure and masks, greedy
acceptance on hand-made logits, and the acceptance metrics."""

from __future__ import annotations

import pytest
import torch

from trtspec.upstream import trtllm
from trtspec.errors import TrtspecError
from trtspec.runtime.accept import accept_greedy
from trtspec.runtime.speculative import Proposal
from trtspec.runtime.stats import RequestStats, Step
from trtspec.runtime.tree import build, chain, validate_choices


def test_default_tree_is_valid_for_the_default_limits():
    t = validate_choices(trtllm.MC_SIM_7B_63, 4, 63, 10)
    assert t.size == 63 and t.max_depth == 4
    assert len(t.level(1)) == 10 and sum(1 for n in t.level(1) if t.children[n]) == 10


def test_choices_are_deduplicated_and_sorted():
    t = validate_choices([[1, 0], [1], [0], [0], [0, 1], [0, 0]], 2, 10, 10)
    assert t.paths == ((0,), (1,), (0, 0), (0, 1), (1, 0))
    assert t.parent == (-1, 0, 0, 1, 1, 2) and t.depth == (0, 1, 1, 2, 2, 2)
    assert t.rank == (-1, 0, 1, 0, 1, 0) and t.children[1] == (3, 4)


@pytest.mark.parametrize("choices, limits, message", [
    ([[0], [0, 0, 1]], (4, 63, 10), r"prefix \[0, 0\] is not"),
    ([[0], [0, 0], [0, 0, 0]], (2, 63, 10), "depth 3 exceeds num_eagle_layers=2"),
    ([[i] for i in range(5)], (4, 4, 10), "5 nodes exceed max_draft_len=4"),
    ([[0], [1], [2], [0, 0], [1, 0], [2, 0]], (4, 63, 2), "3 non-leaf nodes at depth 1 exceed max_non_leaves_per_layer=2"),
    ([], (4, 63, 10), "non-empty list"),
    ([[0], [-1]], (4, 63, 10), "non-negative"),
    ([[0], []], (4, 63, 10), "non-negative"),
    ("[[0]]", (4, 63, 10), "non-empty list"),
])
def test_validation_errors_name_the_rule(choices, limits, message):
    with pytest.raises(TrtspecError, match=message):
        validate_choices(choices, *limits)


def test_shallower_trees_and_limits_at_the_boundary_are_accepted():
    assert validate_choices([[0], [1]], 4, 2, 1).max_depth == 1  # TRT-LLM would demand depth 4
    assert validate_choices([[0], [1], [0, 0], [1, 0]], 2, 4, 2).size == 4


def test_tree_mask_is_ancestor_or_self():
    t = build([[0], [1], [0, 0], [1, 0], [0, 0, 0]])
    m = t.mask
    # block: 0 root, 1 [0], 2 [1], 3 [0,0], 4 [1,0], 5 [0,0,0]
    assert m[5].tolist() == [True, True, False, True, False, True]
    assert m[4].tolist() == [True, False, True, False, True, False]
    assert m[:, 0].all() and m.diagonal().all() and not m.triu(1).any()
    assert t.positions.tolist() == [0, 1, 1, 2, 2, 3]
    assert chain(3).paths == ((0,), (0, 0), (0, 0, 0))


def onehot(ids: list[int], V: int = 10) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(ids), V).float()[None]


def test_greedy_acceptance_walks_the_tree():
    t = build([[0], [1], [0, 0], [1, 0], [1, 1]])  # block: root, [0], [1], [0,0], [1,0], [1,1]
    tokens = torch.tensor([[4, 5, 6, 7, 8]])
    # target: after root -> 5 (node [1]), after [1] -> 8 (node [1,1]), after [1,1] -> 3 (bonus)
    logits = onehot([5, 0, 8, 0, 0, 3])
    (a,) = accept_greedy(Proposal(t, tokens, None), logits)
    assert a.path == [0, 2, 5] and a.tokens == [5, 8, 3] and a.offered == 2  # [1,1] is a leaf
    (a,) = accept_greedy(Proposal(t, tokens, None), onehot([9, 0, 0, 0, 0, 0]))
    assert a.path == [0] and a.tokens == [9] and a.offered == 1
    (a,) = accept_greedy(Proposal(t, tokens, None), onehot([4, 1, 0, 0, 0, 0]))
    assert a.path == [0, 1] and a.tokens == [4, 1] and a.offered == 2  # [0] has a child, rejected


def test_acceptance_metrics():
    s = RequestStats(max_positions=3, target_calls=5,
                     steps=[Step(3, 3), Step(0, 1), Step(1, 2), Step(2, 3)])
    assert s.acceptance_length == (4 + 1 + 2 + 3) / 4
    assert s.reached() == [4, 3, 2] and s.accepted_at() == [3, 2, 1]
    assert s.conditional_rates() == [3 / 4, 2 / 3, 1 / 2]
    assert s.marginal_rates() == [3 / 4, 2 / 4, 1 / 4]
    assert RequestStats().acceptance_length is None
    assert RequestStats(max_positions=2).conditional_rates() == [None, None]


def test_top_ids_and_rank_of_order_ties_by_lower_id_whatever_k():
    """torch.topk's order among equal logits depends on k; the drafter's picks (top_ids) and the
    profiler's ranks (rank_of) follow one rule instead: best first, equal logits by lower id."""
    from trtspec.runtime.tree import rank_of, top_ids

    logits = torch.tensor([[0.5, 2.0, 1.0, 2.0, 2.0, -1.0]])
    for k in range(1, 6):
        assert top_ids(logits, k)[0].tolist() == [1, 3, 4, 2, 0][:k]
    ranks = [int(rank_of(logits, torch.tensor([t]))) for t in range(6)]
    assert ranks == [4, 0, 3, 1, 2, 5]
    g = torch.Generator().manual_seed(0)  # tie-heavy rows against a full stable sort, every k
    for _ in range(100):
        rows = torch.randint(0, 4, (3, 2, 9), generator=g).float()
        k = int(torch.randint(1, 10, (1,), generator=g))
        want = torch.sort(rows, dim=-1, descending=True, stable=True).indices[..., :k]
        assert torch.equal(top_ids(rows, k), want)


def test_top_ids_and_rank_of_rank_nan_logits_last():
    """A NaN logit (an overflowed half-precision row) ranks below every number, in both functions,
    and a row of NaNs still gives k valid ids; before, top_ids indexed past the vocabulary."""
    from trtspec.runtime.tree import rank_of, top_ids

    nan = float("nan")
    logits = torch.tensor([[nan, 2.0, nan, 1.0, -5.0], [nan] * 5])
    assert top_ids(logits, 4).tolist() == [[1, 3, 4, 0], [0, 1, 2, 3]]
    assert [int(rank_of(logits[:1], torch.tensor([t]))) for t in range(5)] == [3, 0, 4, 1, 2]
    assert [int(rank_of(logits[1:], torch.tensor([t]))) for t in range(5)] == [0, 1, 2, 3, 4]
