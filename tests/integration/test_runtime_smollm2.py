"""The runtime on the real default model (SmolLM2-135M-Instruct: 30 layers, GQA 9/3, tied
embeddings): logits and greedy tokens against transformers, and lossless draft-target with the
6-layer truncated draft. Slow: builds/uses the cached default model."""

from __future__ import annotations

import pytest
import torch

from trtspec.checkpoints.convert import convert_hf
from trtspec.runtime.generate import generate_batch, load_models, run_generate

pytestmark = pytest.mark.slow
NEW = 32


@pytest.fixture(scope="module")
def setup(smollm2_hf, smollm2_draft_hf, tmp_path_factory):
    import transformers as tf

    d = tmp_path_factory.mktemp("smol_rt")
    convert_hf(smollm2_hf, d / "target", dtype="float32")
    convert_hf(smollm2_draft_hf, d / "draft", dtype="float32")
    hf = tf.AutoModelForCausalLM.from_pretrained(smollm2_hf, dtype=torch.float32).eval()
    models = load_models(d / "target", d / "draft")
    ids = list(models.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a short poem about the sea."}], add_generation_prompt=True, tokenize=True))
    return d, hf, models, ids


def test_logits_and_greedy_match_transformers(setup, device):
    d, hf, models, ids = setup
    if device != "cpu":  # the same float32 runtime on the GPU, against the CPU reference
        models = load_models(d / "target", d / "draft", device=device)
    prompt = torch.tensor([ids])
    with torch.no_grad():
        ref = hf(prompt).logits
        expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                               max_new_tokens=NEW, eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    ours, _ = models.target.forward(prompt, models.target.new_cache(1, len(ids)))
    assert ours.device.type == device
    assert (ours.cpu() - ref).abs().max().item() < 1e-4
    got = generate_batch(models, [ids], NEW, mode="greedy", ignore_eos=True)[0]
    assert got.output_ids == expected
    spec = generate_batch(models, [ids], NEW, mode="draft-target", draft_len=3, ignore_eos=True)[0]
    assert spec.output_ids == expected and spec.stats.acceptance_length >= 1.0


def test_run_generate_chat_text(setup):
    d, _, models, ids = setup
    out = run_generate(d / "target", prompt="Write a short poem about the sea.", chat=True, max_new_tokens=8)
    greedy = generate_batch(models, [ids], 8, mode="greedy")[0].output_ids
    assert out["output_ids"] == greedy and out["text"] == models.tokenizer.decode(greedy, skip_special_tokens=True)
    assert out["text"].strip()
