"""Mistral's sliding window (Mistral-7B-v0.1: each query attends the last 4096 positions) against
transformers, which applies it (masking_utils.sliding_window_overlay): a window of 6 over prompts
of 20 tokens, so most keys of the late queries are outside it. Logits to 1e-4, greedy tokens
exactly, and speculative decoding (a chain block, ragged rows) still reproduces those tokens."""

from __future__ import annotations

import pytest
import torch

from tiny_models import hf_greedy, make_hf_model
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.spec import spec_from_hf
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.errors import TrtspecError
from trtspec.runtime.decode import generate
from trtspec.runtime.draft_target import generate_draft_target
from trtspec.runtime.greedy import generate_greedy
from trtspec.runtime.model import Decoder
from trtspec.runtime.ngram import NGramProposer

WINDOW, NEW = 6, 24


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    d = tmp_path_factory.mktemp("swa")
    model = make_hf_model("mistral", d / "hf", sliding_window=WINDOW)
    convert_hf(d / "hf", d / "ckpt", dtype="float32")
    return d, model


def test_the_window_survives_conversion(mistral):
    d, model = mistral
    assert model.config.sliding_window == WINDOW
    assert spec_from_hf(d / "hf").sliding_window == WINDOW
    assert load_checkpoint(d / "ckpt").spec.sliding_window == WINDOW  # kept in the TRT-LLM config.json


def test_logits_and_greedy_match_transformers_with_a_window(mistral, device):
    d, model = mistral
    model = model.to(device)
    dec = Decoder(load_checkpoint(d / "ckpt"), device=device)
    torch.manual_seed(0)
    prompt = torch.randint(3, 1001, (1, 20)).to(device)
    with torch.no_grad():
        ref = model(prompt).logits
    ours, _ = dec.forward(prompt, dec.new_cache(1, 24))
    assert (ours - ref).abs().max().item() < 1e-4

    # the window is observable: full attention gives other logits past the window
    full = Decoder(load_checkpoint(d / "ckpt"), device=device)
    object.__setattr__(full.spec, "sliding_window", None)
    wide, _ = full.forward(prompt, full.new_cache(1, 24))
    assert (wide[0, :WINDOW] - ref[0, :WINDOW]).abs().max().item() < 1e-4
    assert (wide[0, WINDOW:] - ref[0, WINDOW:]).abs().max().item() > 1e-2

    expected = hf_greedy(model, prompt, NEW)
    assert generate_greedy(dec, [prompt[0].tolist()], NEW)[0].output_ids == expected


@pytest.mark.parametrize("k", [1, 4])
def test_speculative_decoding_keeps_the_windowed_greedy_tokens(mistral, k):
    d, _ = mistral
    target = Decoder(load_checkpoint(d / "ckpt"))
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (3, 17)]
    greedy = [r.output_ids for r in generate_greedy(target, prompts, NEW)]
    out = generate_draft_target(target, target, prompts, NEW, k)
    assert [r.output_ids for r in out] == greedy
    # every draft accepted (the last step counts only what is left: runtime/stats.py)
    assert all(s.accepted == k for r in out for s in r.stats.steps[:-1])
    assert all(r.stats.conditional_rates() == [1.0] * k for r in out)


def test_a_draft_as_deep_as_the_window_is_refused_and_a_wide_chain_is_not(mistral):
    """Tree nodes sit at slots at or after their positions: the mask is exact while the draft is
    shallower than the window. A chain given its positions explicitly (as the decoding loop gives
    them) may be as wide as it likes; a draft tree reaching the window is refused."""
    d, _ = mistral
    target = Decoder(load_checkpoint(d / "ckpt"))
    ids = torch.tensor([list(range(3, 3 + 14))])
    cache = target.new_cache(1, 32)
    target.forward(torch.tensor([[5, 6, 7, 8, 9, 10]]), cache)
    cache.advance(torch.tensor([0]), 6)
    wide, _ = target.forward(ids, cache)  # default positions
    explicit, _ = target.forward(ids, cache, pos_offsets=torch.arange(14))
    assert torch.equal(wide, explicit)
    # a tree: root, then WINDOW children one level deeper each (a chain of depth WINDOW) beside a sibling
    depth = torch.cat([torch.arange(WINDOW + 1), torch.tensor([1])])
    n = len(depth)
    tree = torch.zeros(n, n, dtype=torch.bool)
    for i in range(WINDOW + 1):
        tree[i, :i + 1] = True
    tree[n - 1, 0] = tree[n - 1, n - 1] = True
    with pytest.raises(TrtspecError, match=f"sliding_window {WINDOW}: a draft tree {WINDOW + 1} positions deep"):
        target.forward(torch.tensor([list(range(3, 3 + n))]), cache, block_mask=tree, pos_offsets=depth)
    shallow = depth.clamp(max=WINDOW - 1)[:WINDOW]
    target.forward(torch.tensor([list(range(3, 3 + WINDOW))]), cache, block_mask=tree[:WINDOW, :WINDOW],
                   pos_offsets=shallow)


def test_qwen_per_layer_windows_are_refused(tmp_path):
    """transformers slides Qwen layers from max_window_layers on: refused, unless none slides."""
    make_hf_model("qwen2", tmp_path / "slides", use_sliding_window=True, sliding_window=8, max_window_layers=1)
    with pytest.raises(TrtspecError, match="field 'use_sliding_window' is true and layers from max_window_layers"):
        spec_from_hf(tmp_path / "slides")
    model = make_hf_model("qwen2", tmp_path / "none", use_sliding_window=True, sliding_window=8, max_window_layers=2)
    assert model.config.layer_types == ["full_attention"] * 2
    assert spec_from_hf(tmp_path / "none").sliding_window is None


def test_ngram_drafts_as_long_as_the_window_in_a_ragged_batch_keep_the_windowed_greedy_tokens(mistral):
    """N-gram drafts differ in length per row, so a batch's block is each row's chain padded with
    dead nodes. The padding sits at its slots' positions, so a block of K >= window is a chain to
    the window check (decoded exactly), not a tree as deep as the padding (which was refused)."""
    d, _ = mistral
    target = Decoder(load_checkpoint(d / "ckpt"))
    g = torch.Generator().manual_seed(2)
    loop = torch.randint(3, 1001, (4,), generator=g).tolist()
    prompts = [loop * 5, torch.randint(3, 1001, (9,), generator=g).tolist()]  # long drafts beside short ones
    greedy = [r.output_ids for r in generate_greedy(target, prompts, NEW)]
    out = generate(target, prompts, NEW, (), NGramProposer(WINDOW + 2))
    assert [r.output_ids for r in out] == greedy
    assert any(s.accepted for r in out for s in r.stats.steps)  # the drafts were verified, some kept
