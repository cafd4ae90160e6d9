"""The one decoding loop (trtspec/runtime/decode.py) as a step iterator.

- One request streamed (`stream_request`, what the cpu-flavor Triton models send) is exactly
  `generate_batch`'s tokens and metrics, step for step, for greedy, draft-target, EAGLE-1 and EAGLE-2.
- A ragged batch yields, per target forward, one RowStep per running request, and those steps add
  up to `generate_batch`'s results.
- Each RowStep hands back the logits the accept rule read (target and draft), and the accept rule
  is a parameter of the loop.
"""

from __future__ import annotations

import pytest
import torch

from triton_fixtures import TREE_A, tiny_eagle, tiny_pair
from trtspec.runtime.decode import decode, generate
from trtspec.runtime.draft_target import DraftModelProposer
from trtspec.runtime.generate import generate_batch, load_models, proposer_for, stream_request
from trtspec.runtime.speculative import Acceptance
from trtspec.runtime.stats import Step

NEW = 30
MODES = {"greedy": ("pair", {}), "draft-target": ("pair", {"draft_len": 3}),
         "eagle": ("eagle", {"eagle_choices": TREE_A}), "eagle2": ("eagle", {"eagle_dynamic_top_k": 2})}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    d = tmp_path_factory.mktemp("decode")
    pair, eagle = tiny_pair(d), tiny_eagle(d)
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (7, 1, 12)]
    return {"pair": load_models(pair / "target", pair / "draft", tokenizer=False),
            "eagle": load_models(eagle, tokenizer=False), "prompts": prompts}


def _mode(name: str) -> str:
    return "eagle" if name.startswith("eagle") else name


@pytest.mark.parametrize("name", list(MODES))
def test_one_streamed_request_is_generate_batch_step_for_step(m, name):
    which, options = MODES[name]
    models = m[which]
    for prompt in m["prompts"]:
        pieces = list(stream_request(models, prompt, NEW, _mode(name), eos_ids=(), **options))
        ref = generate_batch(models, [prompt], NEW, _mode(name), ignore_eos=True, **options)[0]
        assert [t for p in pieces for t in p.tokens] == ref.output_ids
        assert [p.done for p in pieces] == [False] * (len(pieces) - 1) + [True]
        assert pieces[-1].finish_reason == ref.finish_reason == "length"
        assert len(pieces) == ref.stats.target_calls  # one piece per target forward, prefill included
        assert pieces[0].step is None  # the prefill verifies nothing
        steps = [p.step for p in pieces[1:]]
        assert steps == ([None] * len(steps) if name == "greedy" else ref.stats.steps)
    if name != "greedy":
        assert pieces[-1].stats.acceptance_length > 1.0  # the tiny drafts agree sometimes


@pytest.mark.parametrize("name", list(MODES))
def test_a_ragged_batch_steps_the_running_rows(m, name):
    which, options = MODES[name]
    models, prompts = m[which], m["prompts"]
    proposer = proposer_for(models, _mode(name), **options)
    outputs, running = [[] for _ in prompts], set(range(len(prompts)))
    for rows in decode(models.target, prompts, NEW, (), proposer):
        assert [r.index for r in rows] == sorted(running)
        for r in rows:
            outputs[r.index] += r.tokens
            if r.done:
                running.discard(r.index)
    assert not running
    assert outputs == [r.output_ids for r in generate_batch(models, prompts, NEW, _mode(name), ignore_eos=True,
                                                            **options)]


def test_row_steps_carry_the_logits_the_accept_rule_read(m):
    models, k = m["pair"], 3
    vocab = models.target.vocab_size
    seen = 0
    for rows in decode(models.target, m["prompts"], NEW, (), DraftModelProposer(models.draft, k, vocab)):
        for r in rows:
            if r.step is None:  # the prefill: the root alone
                assert r.logits.shape == (1, vocab) and r.draft_logits is None
                assert r.tokens == [int(r.logits[0].argmax())]
                continue
            assert r.logits.shape == (k + 1, vocab) and r.draft_logits.shape == (k, vocab)
            a = r.step.accepted
            drafts = r.draft_logits.argmax(-1).tolist()  # the draft model proposes its argmax
            want = r.logits.argmax(-1).tolist()  # the target's token after the root and each draft
            assert drafts[:a] == want[:a]
            if not r.done:  # nothing cut: the accepted drafts, then the target's bonus token
                assert a == k or drafts[a] != want[a]
                assert r.tokens == drafts[:a] + [want[a]]
                seen += 1
            else:  # the last step counts only what it emitted (runtime/stats.py)
                assert len(r.tokens) == a + 1 and r.step.offered == a
    assert seen > 5


def accept_nothing(proposal, target_logits, keys=None):
    """A rule that keeps no draft token: only the target's own next token."""
    return [Acceptance([0], [int(t)], 1) for t in target_logits[:, 0].argmax(-1)]


def test_the_accept_rule_is_a_parameter(m):
    models, k = m["pair"], 3
    prompts = m["prompts"]
    greedy = generate_batch(models, prompts, NEW, "greedy", ignore_eos=True)
    rejecting = generate(models.target, prompts, NEW, (), DraftModelProposer(models.draft, k, models.target.vocab_size),
                         accept=accept_nothing)
    assert [r.output_ids for r in rejecting] == [r.output_ids for r in greedy]
    assert all(s.accepted == 0 and s.offered == 1 for r in rejecting for s in r.stats.steps[:-1])
    assert all(r.stats.steps[-1] == Step(0, 0) for r in rejecting)  # the end: nothing after it is compared
    assert all(r.stats.acceptance_length == 1.0 and r.stats.target_calls == NEW for r in rejecting)
