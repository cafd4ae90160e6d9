"""N-gram tuning: K and max_matching_ngram_size per workload x band, the drafter free on the GPU."""

from __future__ import annotations

import pytest

from trtspec.tuning.cost import CostModel
from trtspec.tuning.ngram_select import tune_ngram
from trtspec.tuning.select import SelectConfig
from trtspec.tuning.synthetic import example_cost_model, ngram_profile

BANDS = [1, 16, 256]
SIZES, MAX_K = [1, 3], 6


def profile(rates: dict[str, float]):
    return ngram_profile(rates, SIZES, max_k=MAX_K)


def target_only() -> CostModel:
    return example_cost_model("draft-target").model_copy(update={"draft": None})


def test_copy_heavy_turns_ngram_on_and_chat_like_turns_it_off_when_the_verify_costs():
    """Rates far apart, so every outcome asserted has a wide margin: edit's drafts land 9 times in
    10 (AL ~4.9 at K 6: > 2x at concurrency 1, and still ~10% ahead of off at 256 with K 1), chat's 1
    in 20 (AL ~1.05: not worth a verify of K + 1 tokens once it is compute-bound at 256). Size 3
    beats size 1 wherever K > 1: the synthetic size 1 drafts K - 1 tokens (synthetic.py). At K = 1
    both draft one token at the same rate, so which of them wins there is noise (with the last step
    counted as it is emitted, every sample emits T - 1 tokens and the two often tie exactly); that
    band asserts only that n-gram drafting is on."""
    p = profile({"edit": 0.9, "chat": 0.05})
    tuned = tune_ngram(p, target_only(), SelectConfig(concurrency_bands=BANDS))
    edit, chat = tuned["edit"], tuned["chat"]
    assert all(b.speculate and b.drafter == "ngram" for b in edit.bands)
    assert all(b.max_matching_ngram_size == 3 for b in edit.bands if b.draft_len > 1)
    ks = [b.draft_len for b in edit.bands]
    assert ks[0] == MAX_K and ks == sorted(ks, reverse=True), ks  # shorter as the verify becomes compute-bound
    assert edit.bands[0].speedup > 2.0
    off = chat.bands[-1]  # at 256 sequences the K + 1 token verify is compute-bound and drafts rarely land
    assert (off.speculate, off.draft_len, off.max_matching_ngram_size, off.acceptance_length) == (False, 0, None, 1.0)
    for b in edit.bands + chat.bands:
        assert b.draft_step_s == 0.0  # a host-side lookup
        assert b.tokens_per_s == max(s.tokens_per_s for s in b.sweep)
        assert {(s.draft_len, s.max_matching_ngram_size) for s in b.sweep} == {(0, None)} | {
            (k, n) for k in range(1, MAX_K + 1) for n in SIZES}
    assert edit.accept_length_by_n_k == p.workloads["edit"].accept_length_by_n_k


def test_the_step_is_the_verify_of_k_plus_one_tokens():
    cost = target_only()
    for k in (1, 4):
        st = cost.draft_target_step(16, k, 600.0, host_draft=True)
        assert st.draft_s == 0.0 and st.target_s == pytest.approx(
            example_cost_model("draft-target").draft_target_step(16, k, 600.0).target_s)
