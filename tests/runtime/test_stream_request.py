"""What the cpu flavor's models stream (`runtime.generate.stream_request`, one request through the
runtime's decoding loop) is exactly what the runtime's batch generation produces: same tokens, same
acceptance statistics, for greedy, draft-target (K = 0, 1, 3, 5) and EAGLE; the pieces concatenate
to the whole output and the last one is `done`. Also `verify_external`, the stand-in for a
draft_tokens_external target step."""

from __future__ import annotations

import pytest
import torch

from triton_fixtures import TREE_A, tiny_eagle, tiny_pair
from trtspec.errors import TrtspecError
from trtspec.runtime.decode import verify_external
from trtspec.runtime.generate import generate_batch, load_models, stream_request

NEW = 40

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpu_engine")
    pair, eagle = tiny_pair(d), tiny_eagle(d)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (5, 11, 1)]
    return {"pair": load_models(pair / "target", pair / "draft", tokenizer=False),
            "eagle": load_models(eagle, tokenizer=False), "prompts": prompts}


def collect(pieces):
    pieces = list(pieces)
    assert pieces and pieces[-1].done and not any(p.done for p in pieces[:-1])
    return [t for p in pieces for t in p.tokens], pieces[-1]


@pytest.mark.parametrize("k", [0, 1, 3, 5])
def test_draft_target_stream_matches_runtime(m, k):
    models = m["pair"]
    eos = models.eos_ids
    for prompt in m["prompts"]:
        mode = "greedy" if k == 0 else "draft-target"
        got, last = collect(stream_request(models, prompt, NEW, mode, draft_len=k or None, eos_ids=eos))
        ref = generate_batch(models, [prompt], NEW, mode=mode, draft_len=k or None)[0]
        assert got == ref.output_ids
        assert last.finish_reason == ref.finish_reason
        assert [(s.accepted, s.offered) for s in last.stats.steps] == [(s.accepted, s.offered) for s in ref.stats.steps]
        assert last.stats.target_calls == ref.stats.target_calls
    if k:
        assert 1.0 < last.stats.acceptance_length <= k + 1  # the tiny pair agrees sometimes


def test_eagle_stream_matches_runtime(m):
    models = m["eagle"]
    for choices in (TREE_A, None):
        for prompt in m["prompts"]:
            got, last = collect(stream_request(models, prompt, NEW, "eagle", eagle_choices=choices,
                                               eos_ids=models.eos_ids))
            ref = generate_batch(models, [prompt], NEW, mode="eagle", eagle_choices=choices)[0]
            assert got == ref.output_ids
            assert last.stats.acceptance_length == ref.stats.acceptance_length


def test_greedy_stream_stops_at_eos_and_length(m):
    models = m["pair"]
    prompt = m["prompts"][0]
    ref = generate_batch(models, [prompt], 12, mode="greedy", ignore_eos=True)[0].output_ids
    got, last = collect(stream_request(models, prompt, 12, "greedy", eos_ids=()))
    assert got == ref and last.finish_reason == "length"
    got, last = collect(stream_request(models, prompt, 12, "greedy", eos_ids=(ref[3],)))
    assert got == ref[:4] and last.finish_reason == "eos"


def verify_draft(target, prompt, draft, max_new_tokens):
    step = verify_external(target, prompt, draft, max_new_tokens)
    return step.tokens, step.step.accepted


def test_verify_draft(m):
    target = m["pair"].target
    prompt = m["prompts"][1]
    ref = generate_batch(m["pair"], [prompt], 8, mode="greedy", ignore_eos=True)[0].output_ids
    tokens, accepted = verify_draft(target, prompt, ref[:3] + [(ref[3] + 1) % 1000 + 3], 8)
    assert (tokens, accepted) == (ref[:4], 3)  # 3 accepted, then the target's own 4th token
    tokens, accepted = verify_draft(target, prompt, ref[:5], 8)
    assert (tokens, accepted) == (ref[:6], 5)  # all accepted + bonus
    tokens, accepted = verify_draft(target, prompt, ref[:5], 2)
    assert (tokens, accepted) == (ref[:2], 1)  # cut at max_new_tokens: counts the 2 tokens it emits
    with pytest.raises(TrtspecError, match=r"^prompt \(input_ids\): empty; draft tokens are verified"):
        verify_draft(target, [], ref[:3], 8)  # nothing to check the first draft token against


def test_the_largest_uint64_seed_samples_repeatably(m):
    """A served seed is a uint64 (TensorRT-LLM's randomSeed): 2^64 - 1 draws the same tokens every
    time, through the stream the cpu flavor serves and the runtime's batch alike, and not seed 0's."""
    from trtspec.options import Sampling

    models, prompt = m["pair"], m["prompts"][0]
    top = Sampling(temperature=1.0, seed=2 ** 64 - 1)
    runs = [collect(stream_request(models, prompt, NEW, "draft-target", draft_len=3, eos_ids=(), sampling=top))[0]
            for _ in range(2)]
    ref = generate_batch(models, [prompt], NEW, mode="draft-target", draft_len=3, ignore_eos=True, sampling=top)[0]
    zero = generate_batch(models, [prompt], NEW, mode="draft-target", draft_len=3, ignore_eos=True,
                          sampling=top.model_copy(update={"seed": 0}))[0]
    assert runs[0] == runs[1] == ref.output_ids != zero.output_ids
