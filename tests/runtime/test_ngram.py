"""N-gram drafting (trtspec/runtime/ngram.py) with TensorRT-LLM's NGramPoolManager semantics."""

from __future__ import annotations

import pytest
import torch

from triton_fixtures import tiny_pair
from trtspec.errors import TrtspecError
from trtspec.options import Sampling
from trtspec.runtime.accept import accept_greedy
from trtspec.runtime.batch import make_requests
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.runtime.ngram import NGramProposer, padded_chain
from trtspec.runtime.ngram_pool import NGramPool, drop_shorter
from trtspec.runtime.speculative import Proposal

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def draft(seq, new=50, **kw):
    """The draft an NGramProposer makes for one request whose prompt is `seq`."""
    p = NGramProposer(**{"k": 3, "max_matching_ngram_size": 2, **kw})
    (r,) = make_requests([seq], new, (), 1000)
    p.start([r], torch.arange(1), None)
    return p.draft(0, r)


def test_the_longest_pattern_ending_the_sequence_gives_its_match():
    assert draft([1, 2, 3, 4, 1, 2]) == [3, 4, 1]  # (1, 2) was followed by 3 4 1
    assert draft([7, 1, 9, 8, 5, 1]) == [9, 8, 5]  # only the 1-gram (1,) matches
    assert draft([1, 2, 3]) == []  # nothing seen before: no draft (a plain step)


def test_oldest_or_newest_match_and_the_length_rule():
    seq = [5, 6, 7, 0, 5, 6, 8, 0, 5, 6]
    assert draft(seq) == [7, 0, 5]  # oldest of the equally long matches of (5, 6)
    assert draft(seq, use_oldest=False) == [8, 0, 5]
    # (4,) was followed by 9 4, then by 9 3: both kept (same length), the oldest drafted
    assert draft([4, 9, 4, 9, 3, 1, 4], k=2, max_matching_ngram_size=1) == [9, 4]
    assert draft([4, 9, 4, 9, 3, 1, 4], k=2, max_matching_ngram_size=1, use_oldest=False) == [9, 3]


def test_shorter_matches_are_dropped_as_upstreams_loop_drops_them():
    """Upstream removes the shorter matches from the OrderedSet it iterates, which skips the match
    after each removed one (ordered-set 4.1.0, what TensorRT-LLM installs). Here (0,) keeps
    [(0,1,0), (1,0,0), (0,0), (0,)] after the first scan; the rescan's (0,0,1) removes (0,0), skips
    (0,), so (0,) stays and the later (0,) match is not appended again: the newest is (0,0,1)."""
    pool = NGramPool(3, 1, keep_all=True, use_oldest=False)
    seq = [0, 0, 1, 0, 0, 0, 1, 0, 0]
    assert pool.draft(0, seq[:6], 100) == [0]
    assert pool.draft(0, seq, 100) == [0, 0, 1]  # the plain filter drafted [0]
    assert drop_shorter([(1,), (2,), (3, 3), (4,), (5,)], 2) == [(2,), (3, 3), (5,)]


def test_drafts_never_run_past_the_last_position_the_request_can_emit():
    seq = [1, 2, 3, 4, 1, 2]
    assert draft(seq, new=3) == [3, 4]  # prompt + 3 new: room for 2 drafts before the last token
    assert draft(seq, new=1) == []


def test_a_public_pool_is_shared_across_requests_and_a_private_one_is_not():
    shared = NGramProposer(3, 2)
    reqs = make_requests([[10, 11, 12, 13], [5, 10, 11]], 20, (), 1000)
    shared.start(reqs, torch.arange(2), None)
    assert shared.draft(0, reqs[0]) == [] and shared.draft(1, reqs[1]) == [12, 13]  # learnt from request 0
    private = NGramProposer(3, 2, public_pool=False)
    private.start(reqs, torch.arange(2), None)
    assert private.draft(0, reqs[0]) == [] and private.draft(1, reqs[1]) == []


def test_dead_padding_nodes_are_never_accepted():
    tree = padded_chain(1, 3)  # one real draft, two dead nodes
    logits = torch.full((1, 4, 20), -5.0)
    logits[0, 0, 7] = logits[0, 1, 9] = 5.0  # root wants 7, node 1 wants 9
    (a,) = accept_greedy(Proposal([tree], torch.tensor([[7, 7, 9]]), None), logits)
    assert a.path == [0, 1] and a.tokens == [7, 9] and a.offered == 1


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tiny_pair(tmp_path_factory.mktemp("ngram"))
    return load_models(d / "target", None, tokenizer=False)  # n-gram drafting needs no draft model


def test_ngram_speculation_is_the_targets_output_and_accepts_on_repetitive_text(pair):
    """The tiny near-bigram target falls into cycles, which n-gram drafting catches."""
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (5, 9, 1)]
    greedy = generate_batch(pair, prompts, 60, "greedy", ignore_eos=True)
    ngram = generate_batch(pair, prompts, 60, "ngram", draft_len=3, ignore_eos=True)
    assert [r.output_ids for r in ngram] == [r.output_ids for r in greedy]
    assert all(r.stats.acceptance_length > 1.1 for r in ngram), [r.stats.acceptance_length for r in ngram]
    # copy-heavy: the prompt quotes what the target goes on to say, so the drafts are mostly right
    quoting = [p + r.output_ids[:40] + p for p, r in zip(prompts, greedy)]
    copied = generate_batch(pair, quoting, 40, "ngram", draft_len=3, ignore_eos=True)
    assert [r.output_ids for r in copied] == [r.output_ids for r in generate_batch(pair, quoting, 40, "greedy",
                                                                                   ignore_eos=True)]
    def mean_al(results):
        return sum(r.stats.acceptance_length for r in results) / len(results)
    assert mean_al(copied) > mean_al(ngram) + 0.25, (mean_al(copied), mean_al(ngram))  # 1.64 vs 1.28 here
    s = Sampling(temperature=0.3, seed=2)
    sampled = generate_batch(pair, prompts, 40, "greedy", ignore_eos=True, sampling=s)
    assert [r.output_ids for r in generate_batch(pair, prompts, 40, "ngram", draft_len=3, ignore_eos=True,
                                                  sampling=s)] == [r.output_ids for r in sampled]


def test_bad_settings_name_the_field():
    with pytest.raises(TrtspecError, match=r"^ngram.max_draft_len: expected >= 1"):
        NGramProposer(0)
    with pytest.raises(TrtspecError, match=r"^ngram.max_matching_ngram_size: expected >= 1"):
        NGramProposer(2, 0)
