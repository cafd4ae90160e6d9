"""Synthetic profiles (trtspec/tuning/synthetic.py) record what the profiler would."""

from __future__ import annotations

import random

from trtspec.tuning.synthetic import ngram_steps


def test_synthetic_ngram_steps_count_the_last_step_as_the_profiler_does():
    """An always-right draft of 4 over a 5-token output: the one step after the prefill's token emits
    the 4 tokens left, so it counts 3 accepted drafts, not 4 (runtime/stats.py counted_step, as
    ngram_profile.py records a real output); every sample's steps emit T - 1 tokens."""
    assert ngram_steps(1.0, 4, 2, 5, random.Random(0)) == [[3, 4]]
    rng = random.Random(1)
    for alpha in (0.3, 0.9, 1.0):
        for T in (1, 2, 7, 40):
            assert sum(a + 1 for a, _ in ngram_steps(alpha, 4, 2, T, rng)) == max(T - 1, 0), (alpha, T)
