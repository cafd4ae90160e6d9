"""Speculative decoding stays lossless when every model runs quantized, on checkpoints written by
`trtspec quantize` (trtspec.calib): an FP8 + FP8-KV target with an FP8 + FP8-KV draft model, and an
FP8 + FP8-KV EagleForCausalLM whose drafter linears are FP8 too (its lm_heads stay in the model
dtype, its attention carries KV scales), as TRT-LLM's root-level quantize() builds it (trtllm.md
§4.6). The emitted tokens must be the quantized target's greedy tokens, whatever the drafts propose.
The numerics themselves are checked against ModelOpt in test_runtime_quant.py.

Exactness here holds because this tiny model has no near-ties that the verify block's different
GEMM rounding can flip through FP8 activation quantization; on SmolLM2 FP8 it does flip some, and
only batch-invariant verification is exact in general (test_batch_invariant.py, README).
"""

from __future__ import annotations

import copy

import pytest
import torch

from tiny_models import make_eagle_head, make_hf_model, save_tiny_tokenizer, scale_layer_outputs
from trtspec.calib.quantize import CalibOptions, quantize_eagle, quantize_pair
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.runtime.eagle2 import generate_eagle
from trtspec.runtime.eagle_net import EagleNet
from trtspec.runtime.generate import Models, generate_batch, load_models
from trtspec.runtime.greedy import generate_greedy
from trtspec.runtime.model import Decoder

NEW = 40
H, I = 64, 96


def bigram_head(base_model) -> dict:
    """An EAGLE head that predicts the near-bigram base well but not perfectly (test_runtime_spec.py)."""
    return {"embed_tokens.weight": base_model.model.embed_tokens.weight.detach().clone(),
            "fc.weight": torch.cat([torch.eye(H), torch.zeros(H, H)], 1), "fc.bias": torch.zeros(H),
            "layers.0.self_attn.o_proj.weight": torch.zeros(H, H), "layers.0.mlp.down_proj.weight": torch.zeros(H, I)}


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("quant_spec")
    base = scale_layer_outputs(make_hf_model("llama", d / "hf", num_key_value_heads=1), 0.1)
    base.save_pretrained(d / "hf")
    scale_layer_outputs(copy.deepcopy(base), 0.0).save_pretrained(d / "draft_hf")
    for name in ("hf", "draft_hf"):  # a pair must share its tokenizer
        save_tiny_tokenizer(d / name)
    make_eagle_head(d / "hf", d / "head", extra=bigram_head(base))
    g = torch.Generator().manual_seed(0)
    calib = CalibOptions(prompts=[torch.randint(3, 1001, (24,), generator=g).tolist() for _ in range(4)])
    quantize_pair(d / "hf", d / "draft_hf", d / "pair", fmt="fp8", kv_cache="fp8", calib=calib, dtype="float16")
    quantize_eagle(d / "hf", d / "head", d / "eagle", fmt="fp8", kv_cache="fp8", calib=calib, dtype="float16",
                   num_eagle_layers=4)
    convert_hf(d / "hf", d / "float_target", dtype="float16")
    pair = load_models(d / "pair")
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (6, 13, 1)]
    eagle_base = Decoder(load_checkpoint(d / "eagle"))
    return dict(dir=d, pair=pair, target=pair.target, prompts=prompts,
                greedy=[r.output_ids for r in generate_greedy(pair.target, prompts, NEW)],
                eagle_base=eagle_base, eagle=EagleNet(load_checkpoint(d / "eagle")),
                eagle_greedy=[r.output_ids for r in generate_greedy(eagle_base, prompts, NEW)],
                float_target=Decoder(load_checkpoint(d / "float_target")))


def test_the_quantized_target_is_its_own_model(m):
    """Control: FP8 changes the greedy output of this target, so the tests below compare against
    the quantized model's tokens, not the float model's."""
    float_greedy = [r.output_ids for r in generate_greedy(m["float_target"], m["prompts"], NEW)]
    assert float_greedy != m["greedy"]
    for dec in (m["target"], m["pair"].draft, m["eagle_base"]):
        w = dec.layers[0]
        assert w.qkv.act_quant == "fp8" and w.kv is not None and w.kv.kind == "FP8"


@pytest.mark.parametrize("k", [2, 4])
def test_fp8_draft_model_is_lossless(m, k):
    out = generate_batch(m["pair"], m["prompts"], NEW, draft_len=k, ignore_eos=True)  # the pair: draft-target
    assert [r.output_ids for r in out] == m["greedy"]
    al = [r.stats.acceptance_length for r in out]
    assert 1.2 < sum(al) / len(al) < k + 1  # accepted often, rejected sometimes


def test_fp8_eagle_drafter_runs_quantized(m):
    net = m["eagle"]
    assert net.distinct_nets == 1  # identical clones, scales included, are loaded once
    w = net.nets[0]
    assert w.fc.act_quant == "fp8" and w.fc.bias is not None
    assert all(lin.act_quant == "fp8" for lin in (w.layers[0].qkv, w.layers[0].dense, w.layers[0].fc,
                                                   w.layers[0].gate, w.layers[0].proj))
    assert w.layers[0].kv is not None and w.layers[0].kv.kind == "FP8"
    assert w.lm_head.dtype == torch.float32  # excluded: eagle_nets.*.lm_head
    convert_eagle(m["dir"] / "hf", m["dir"] / "head", m["dir"] / "float_eagle", dtype="float16", tp=1)
    float_net = EagleNet(load_checkpoint(m["dir"] / "float_eagle"))
    tokens, feats = torch.tensor([[5, 9, 11]]), torch.randn(1, 3, H, generator=torch.Generator().manual_seed(0))
    a, _ = net.forward(tokens, feats, net.new_cache(1, 8))
    b, _ = float_net.forward(tokens, feats, float_net.new_cache(1, 8))
    assert 1e-3 < (a - b).abs().max() < 0.2 * b.abs().max()


@pytest.mark.parametrize("tree", [None, [[0], [0, 0], [1], [0, 0, 0]]])
def test_fp8_eagle_is_lossless(m, tree):
    """EAGLE emits exactly the greedy tokens of the checkpoint's own FP8 base."""
    out = generate_eagle(m["eagle_base"], m["eagle"], m["prompts"], NEW, tree)
    assert [r.output_ids for r in out] == m["eagle_greedy"]
    al = [r.stats.acceptance_length for r in out]
    assert sum(al) / len(al) > 1.3


@pytest.mark.parametrize("dynamic_top_k", [None, 3])
def test_fp8_eagle_batch_invariant_is_lossless(m, dynamic_top_k):
    """The batch-invariant mode (test_batch_invariant.py) verifies trees node by node too."""
    models = Models(target=m["eagle_base"], eagle=m["eagle"])
    out = generate_batch(models, m["prompts"], NEW, mode="eagle", eagle_dynamic_top_k=dynamic_top_k,
                         batch_invariant=True)
    assert [r.output_ids for r in out] == m["eagle_greedy"]
    assert sum(r.stats.acceptance_length for r in out) / len(out) > 1.3


def test_fp8_eagle2_dynamic_tree_is_lossless(m):
    out = generate_eagle(m["eagle_base"], m["eagle"], m["prompts"], NEW, dynamic_top_k=3)
    assert [r.output_ids for r in out] == m["eagle_greedy"]


def test_fp8_eagle_at_tp2_runs_like_tp1(m):
    """The same calibration written at tp=2 (one kv head, so qkv carries a duplicate per rank):
    merged back, base and drafter compute exactly what tp=1 computes."""
    d = m["dir"]
    g = torch.Generator().manual_seed(0)
    calib = CalibOptions(prompts=[torch.randint(3, 1001, (24,), generator=g).tolist() for _ in range(4)])
    quantize_eagle(d / "hf", d / "head", d / "eagle_tp2", fmt="fp8", kv_cache="fp8", calib=calib, dtype="float16",
                   num_eagle_layers=4, tp=2)
    ckpt = load_checkpoint(d / "eagle_tp2")
    assert ckpt.tp == 2
    base, net = Decoder(ckpt), EagleNet(ckpt)
    tokens = torch.tensor([m["prompts"][1]])
    a, ha = base.forward(tokens, base.new_cache(1, 16))
    b, hb = m["eagle_base"].forward(tokens, m["eagle_base"].new_cache(1, 16))
    assert torch.equal(a, b)
    a, _ = net.forward(tokens, ha, net.new_cache(1, 16))
    b, _ = m["eagle"].forward(tokens, hb, m["eagle"].new_cache(1, 16))
    assert torch.equal(a, b)
