"""How a verification step is counted (trtspec/runtime/stats.py, counted_step): as TensorRT-LLM's
sampler counts a served request, which adds a step's tokens one at a time and stops at the first
that ends the request (end id or length), comparing nothing after it."""

from __future__ import annotations

from trtspec.runtime.stats import RequestStats, Step, counted_step


def test_a_step_that_does_not_end_the_request_is_counted_as_accepted():
    assert counted_step(Step(3, 4), None) == Step(3, 4)
    assert counted_step(Step(3, 4), 5) == Step(3, 4)  # 4 tokens emitted, 5 were left: it goes on


def test_the_step_that_ends_the_request_counts_what_it_emits_and_offers_nothing_more():
    assert counted_step(Step(3, 4), 4) == Step(3, 3)  # its bonus token is the last one
    assert counted_step(Step(3, 4), 2) == Step(1, 1)  # an end id (or the length) after 2 tokens
    assert counted_step(Step(0, 1), 1) == Step(0, 0)  # the target's own token ends it


def test_acceptance_length_is_emitted_tokens_per_step():
    # K = 4, max_new_tokens 10: the prefill emits 1, a full step 5, the last step only the 4 left
    s = RequestStats(max_positions=4, steps=[counted_step(Step(4, 4), None), counted_step(Step(4, 4), 4)])
    assert s.acceptance_length == 4.5 and s.accepted_draft_tokens == 7
    assert s.conditional_rates() == [1.0, 1.0, 1.0, 1.0] and s.marginal_rates() == [1.0, 1.0, 1.0, 0.5]
