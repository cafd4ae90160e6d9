"""drafts/head.py's vocabulary helpers: ModelOpt's d2t offsets and what they cover."""

from __future__ import annotations

import pytest
import torch

from trtspec.drafts.data import Example
from trtspec.drafts.head import frequent_vocab, vocab_coverage


def test_coverage_counts_held_out_tokens_the_draft_vocabulary_holds():
    d2t = frequent_vocab([[5, 5, 2, 7], [7, 9]], 3, 16)  # most frequent: 5, 7, then 2 (tied with 9: lower id)
    assert (d2t + torch.arange(3)).tolist() == [2, 5, 7]
    held = [Example("chat", [1], [2, 3, 5], True), Example("chat", [1], [7, 7], True),
            Example("code", [1], [9, 4], True)]
    assert vocab_coverage(d2t, held) == pytest.approx({"chat": 4 / 5, "code": 0.0})
    assert vocab_coverage(None, held) == {"chat": 1.0, "code": 1.0}  # the full vocabulary holds every token
