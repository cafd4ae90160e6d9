"""The PyTorch runtime's decoder against transformers, the oracle we did not write: every family,
TP 1 and 2 (one kv head at TP 2, so the checkpoint carries duplicated kv heads that the reader must
drop), prompt logits to 1e-4 and 64 greedy tokens exactly. Plus the KV-cache rules (ragged batches,
commit of a kept subset) the speculative loops rely on."""

from __future__ import annotations

import json

import pytest
import torch

from tiny_models import FAMILIES, hf_greedy, make_hf_model
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.errors import TrtspecError
from trtspec.runtime import rope
from trtspec.runtime.greedy import generate_greedy
from trtspec.runtime.kv_cache import KVCache
from trtspec.runtime.model import Decoder, prefill

NEW = 64


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_greedy_match_transformers(tmp_path, family, tp, device):
    model = make_hf_model(family, tmp_path / "hf", num_key_value_heads=1 if tp == 2 else 2).to(device)
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float32", tp=tp)
    dec = Decoder(load_checkpoint(tmp_path / "ckpt"), device=device)
    torch.manual_seed(0)
    prompt = torch.randint(3, 1001, (1, 11)).to(device)

    with torch.no_grad():
        ref = model(prompt).logits
    ours, hidden = dec.forward(prompt, dec.new_cache(1, 16))
    assert ours.device == ref.device and hidden.device == ref.device
    assert ours.shape == ref.shape and hidden.shape == (1, 11, 64)
    assert ref.std() > 0.1  # logits that carry signal, so a 1e-4 bound is meaningful
    assert (ours - ref).abs().max().item() < 1e-4

    expected = hf_greedy(model, prompt, NEW)
    assert len(set(expected)) >= 3  # not a constant output
    got = generate_greedy(dec, [prompt[0].tolist()], NEW)[0]
    assert got.output_ids == expected
    assert got.stats.target_calls == NEW and got.finish_reason == "length"
    assert got.stats.acceptance_length is None


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_bf16_logits_match_transformers_in_bf16(tmp_path, family, device):
    """In bfloat16 (the GPU default) rounding dominates: the runtime must be as close to
    transformers' bf16 forward as that forward is to its own float32 one (x2), and compute in bf16."""
    model = make_hf_model(family, tmp_path / "hf").to(device)
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float32")
    prompt = torch.randint(3, 1001, (1, 24), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        ref32 = model(prompt).logits
        ref = model.to(torch.bfloat16)(prompt).logits.float()
    dec = Decoder(load_checkpoint(tmp_path / "ckpt"), torch.bfloat16, device=device)
    ours, hidden = dec.forward(prompt, dec.new_cache(1, 32))
    assert hidden.dtype == torch.bfloat16 and dec.layers[0].qkv.weight.dtype == torch.bfloat16
    rounding = (ref32 - ref).abs().max().item()
    assert 0 < rounding < 0.1 * ref.std().item()  # bf16 visibly rounds, and not wildly
    assert (ours - ref).abs().max().item() <= 2 * rounding
    assert (ours.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9


def test_llama3_rope_scaling_is_observable(tmp_path):
    """Negative control for the test above: positions past original_max_position_embeddings (32 in
    the tiny Llama) make llama3 scaling matter, so unscaled frequencies must give other tokens."""
    model = make_hf_model("llama", tmp_path / "hf")
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float32")
    dec = Decoder(load_checkpoint(tmp_path / "ckpt"))
    prompt = torch.randint(3, 1001, (1, 40), generator=torch.Generator().manual_seed(1))
    expected = hf_greedy(model, prompt, 24)
    assert generate_greedy(dec, [prompt[0].tolist()], 24)[0].output_ids == expected
    dec.freq = rope.inv_freq(dec.spec.head_size, dec.spec.rope_theta, None)
    assert generate_greedy(dec, [prompt[0].tolist()], 24)[0].output_ids != expected


def test_rope_types():
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}
    base = rope.inv_freq(16, 10000.0, None)
    assert torch.equal(rope.inv_freq(16, 10000.0, {"type": "default"}), base)
    assert torch.allclose(rope.inv_freq(16, 10000.0, {"type": "linear", "factor": 4.0}), base / 4)
    l3 = rope.inv_freq(16, 10000.0, scaling)
    assert l3[0] == base[0] and torch.allclose(l3[-1], base[-1] / 8) and not torch.equal(l3, base)
    with pytest.raises(TrtspecError, match="'yarn'"):
        rope.inv_freq(16, 10000.0, {"rope_type": "yarn", "factor": 4.0})


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    make_hf_model("llama", d / "hf")
    convert_hf(d / "hf", d / "ckpt", dtype="float32")
    return Decoder(load_checkpoint(d / "ckpt")), d / "ckpt"


def test_ragged_batch_equals_single_prompts(llama):
    dec, _ = llama
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (7, 1, 19)]
    batch = generate_greedy(dec, prompts, 40)
    for p, r in zip(prompts, batch):
        assert r.prompt_ids == p
        assert r.output_ids == generate_greedy(dec, [p], 40)[0].output_ids
    assert len({tuple(r.output_ids) for r in batch}) == 3


def test_eos_stops_and_is_emitted(llama):
    dec, _ = llama
    prompt = list(range(10, 20))
    full = generate_greedy(dec, [prompt], 30)[0].output_ids
    eos = full[6]
    first = full.index(eos)
    r = generate_greedy(dec, [prompt, prompt[:4]], 30, eos_ids=[eos])
    assert r[0].output_ids == full[:first + 1] and r[0].finish_reason == "eos"
    assert r[1].output_ids == generate_greedy(dec, [prompt[:4]], 30, eos_ids=[eos])[0].output_ids


def test_commit_keeps_a_subset_of_the_block(llama):
    """Forward [root, a, b, c] with a 'tree' where b and c hang off root, keep root and c: the cache
    must then be exactly the cache of the sequence root, c (positions re-based, next logits equal)."""
    dec, _ = llama
    prompt, root, a, b, c = [5, 6, 7, 8], 9, 30, 31, 32
    tree_mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1]], dtype=torch.bool)
    depth = torch.tensor([0, 1, 1, 1])

    def tree_then_commit(kept):
        cache = dec.new_cache(1, 32)
        prefill(dec, cache, torch.tensor([0]), [prompt])
        dec.forward(torch.tensor([[root, a, b, c]]), cache, pos_offsets=depth, block_mask=tree_mask)
        cache.commit(0, kept)
        logits, _ = dec.forward(torch.tensor([[44]]), cache)
        return logits, int(cache.lens[0])

    ref_cache = dec.new_cache(1, 32)
    prefill(dec, ref_cache, torch.tensor([0]), [prompt + [root, c]])
    ref, _ = dec.forward(torch.tensor([[44]]), ref_cache)
    kept_c, n = tree_then_commit([0, 3])
    assert n == int(ref_cache.lens[0]) == 6
    assert (kept_c - ref).abs().max() < 1e-5
    kept_a, _ = tree_then_commit([0, 1])  # the slots of root, a were already in place
    assert (kept_a - ref).abs().max() > 1e-3


def test_cache_overflow_and_bad_prompts_are_clear_errors(llama):
    dec, _ = llama
    with pytest.raises(TrtspecError, match="KV cache full"):
        dec.forward(torch.tensor([[1, 2, 3]]), KVCache(2, 1, 2, 2, 16))
    with pytest.raises(TrtspecError, match="token id 5000"):
        generate_greedy(dec, [[1, 5000]], 4)
    with pytest.raises(TrtspecError, match="prompt 1 is empty"):
        generate_greedy(dec, [[1], []], 4)


def test_config_claiming_fp8_over_float_tensors_is_refused(llama, tmp_path):
    """A config.json that says FP8 over unquantized rank files: the bytes must not be read as FP8."""
    _, ckpt = llama
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["quantization"]["quant_algo"] = "FP8"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "rank0.safetensors").symlink_to(ckpt / "rank0.safetensors")
    with pytest.raises(TrtspecError, match="quant_algo='FP8'"):
        Decoder(load_checkpoint(tmp_path))
