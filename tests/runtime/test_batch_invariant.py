"""Batch-invariant verification makes greedy speculation bit-exact on FP8 checkpoints.

The fixture is a tiny FP8 checkpoint (hidden 128, 4 layers) on which the default mode does diverge:
the target verifying its own drafts in one [1, K+1] block rounds its GEMMs differently from the
one-token decodes of plain greedy (~1e-7), FP8 activation quantization turns that into different
FP8 codes a few layers later, and a near-tie argmax flips (README, "Speculation on FP8
checkpoints"). With batch_invariant=True every verify token is computed as a one-token decode of a
batch of one, so the output is plain greedy's and the target, drafting for itself, is accepted in
full: K + 1 tokens on every step but the last, which counts only the tokens left (runtime/stats.py).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from cli_helpers import run_cli
from tiny_models import make_hf_model
from trtspec.calib.quantize import CalibOptions, quantize_hf
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.runtime.generate import Models, generate_batch
from trtspec.runtime.greedy import generate_greedy
from trtspec.runtime.model import Decoder, forward_stepwise

NEW, K = 48, 3


def all_accepted(new: int, k: int) -> float:
    """The acceptance length of a draft that is always right: new - 1 tokens after the prefill's,
    in steps of k + 1 tokens (the last one shorter where they do not divide)."""
    return (new - 1) / math.ceil((new - 1) / (k + 1))


@pytest.fixture(scope="module")
def fp8(tmp_path_factory):
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("batch_invariant")
    make_hf_model("llama", d / "hf", hidden_size=128, intermediate_size=256, num_hidden_layers=4)
    g = torch.Generator().manual_seed(0)
    calib = CalibOptions(prompts=[torch.randint(3, 1001, (24,), generator=g).tolist() for _ in range(4)])
    quantize_hf(d / "hf", d / "fp8", fmt="fp8", calib=calib)
    target = Decoder(load_checkpoint(d / "fp8"))
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (5, 9, 17, 3, 12, 7, 4, 8)]
    alone = [generate_greedy(target, [p], NEW)[0].output_ids for p in prompts]  # plain greedy, batch of one
    return dict(target=target, models=Models(target=target, draft=target), prompts=prompts, greedy=alone)


def own_draft(fp8, batch_invariant: bool):
    return generate_batch(fp8["models"], fp8["prompts"], NEW, mode="draft-target", draft_len=K, ignore_eos=True,
                          batch_invariant=batch_invariant)


def test_default_verify_diverges_on_this_checkpoint(fp8):
    """Control: without the mode, the target as its own draft changes the output of at least one
    prompt, so the exactness below is the mode's doing."""
    out = own_draft(fp8, batch_invariant=False)
    assert [r.output_ids for r in out] != fp8["greedy"]
    assert min(r.stats.acceptance_length for r in out) < all_accepted(NEW, K)


def test_batch_invariant_speculation_is_plain_greedy(fp8):
    out = own_draft(fp8, batch_invariant=True)
    assert [r.output_ids for r in out] == fp8["greedy"]
    assert [r.stats.acceptance_length for r in out] == [all_accepted(NEW, K)] * len(out)


def test_batch_invariant_greedy_does_not_depend_on_the_batch(fp8):
    out = generate_batch(fp8["models"], fp8["prompts"], NEW, mode="greedy", batch_invariant=True)
    assert [r.output_ids for r in out] == fp8["greedy"]


def test_stepwise_block_is_a_sequence_of_one_token_decodes(fp8):
    """forward_stepwise of a block equals decoding its tokens one by one, bit for bit, while the
    one-block forward of the same tokens does not."""
    m, p = fp8["target"], fp8["prompts"][2]
    block = torch.tensor([fp8["greedy"][2][:K + 1]])
    caches = []
    for _ in range(3):
        c = m.new_cache(1, len(p) + K + 1)
        m.forward(torch.tensor([p]), c)
        c.advance(torch.arange(1), len(p))
        caches.append(c)
    one, _ = m.forward(block, caches[0])
    step, _ = forward_stepwise(m, block, caches[1])
    ref = []
    for t in range(K + 1):
        lg, _ = m.forward(block[:, t:t + 1], caches[2])
        caches[2].advance(torch.arange(1), 1)
        ref.append(lg[:, 0])
    assert torch.equal(step[0], torch.stack(ref, 1)[0])
    assert not torch.equal(one, step)


def test_cli_batch_invariant_flag(fp8, capsys):
    """`trtspec generate --batch-invariant` on a prompt the default mode changes."""
    default = own_draft(fp8, batch_invariant=False)
    i = next(i for i, r in enumerate(default) if r.output_ids != fp8["greedy"][i])
    ck = fp8["target"].path
    args = ["generate", "--ckpt", ck, "--draft-ckpt", ck, "--draft-len", K, "--prompt-ids",
            json.dumps(fp8["prompts"][i]), "--max-new-tokens", NEW, "--ignore-eos", "--json"]
    code, out, err = run_cli(capsys, *args, "--batch-invariant")
    assert code == 0, err
    result = json.loads(out)
    assert result["output_ids"] == fp8["greedy"][i] and result["acceptance_length"] == all_accepted(NEW, K)
    code, out, _ = run_cli(capsys, *args)
    assert json.loads(out)["output_ids"] != fp8["greedy"][i]


@pytest.mark.slow
def test_smollm2_fp8_batch_invariant_speculation(smollm2_hf, tmp_path, one_torch_thread):
    """The case issue 13 reported: SmolLM2 FP8 as its own draft at K=3 changes chat outputs by
    default (near-ties, README), and reproduces plain greedy exactly, every draft accepted, batch-invariant."""
    from trtspec.runtime.generate import encode, load_models

    quantize_hf(smollm2_hf, tmp_path / "fp8", fmt="fp8", calib=CalibOptions(calib="mt-bench", samples=4, seq_len=128))
    models = load_models(tmp_path / "fp8")
    models = Models(target=models.target, draft=models.target, tokenizer=models.tokenizer)
    texts = ["Write a short poem about the sea.", "Give three tips for a job interview.",
             "Describe a sunset in two sentences."]
    prompts = [encode(models.tokenizer, t, True, tmp_path / "fp8") for t in texts]
    new = 12
    greedy = [generate_greedy(models.target, [p], new)[0].output_ids for p in prompts]
    run = dict(mode="draft-target", draft_len=K, ignore_eos=True)
    default = generate_batch(models, prompts, new, **run)
    assert [r.output_ids for r in default] != greedy
    exact = generate_batch(models, prompts, new, batch_invariant=True, **run)
    assert [r.output_ids for r in exact] == greedy
    assert [r.stats.acceptance_length for r in exact] == [all_accepted(new, K)] * len(prompts)
