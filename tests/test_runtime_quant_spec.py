"""Speculative decoding stays lossless when every model runs quantized: an FP8 (+ FP8 KV) target
with an FP8 draft model, and an FP8 EagleForCausalLM whose drafter linears are FP8 too (its
lm_heads stay in the model dtype, its attention carries KV scales), as TRT-LLM's root-level
quantize() builds it (trtllm.md §4.6). The emitted tokens must be the quantized target's greedy
tokens, whatever the drafts propose.

The FP8 checkpoints here are made from converted float16 checkpoints by `fp8_checkpoint`: per-tensor
weight scales amax / 448, one fixed activation scale, KV scale 1.0 (what TRT-LLM's legacy converter
writes). They are valid FP8 checkpoints, not calibrated ones; losslessness does not depend on
calibration, and the numerics against ModelOpt are covered by test_runtime_quant.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tiny_models import make_eagle_head, make_hf_model
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.runtime.draft_target import generate_draft_target
from trtspec.runtime.eagle import generate_eagle
from trtspec.runtime.eagle_net import EagleNet
from trtspec.runtime.greedy import generate_greedy
from trtspec.runtime.model import Decoder

NEW = 40
H, I = 64, 96
LINEARS = ("attention.qkv", "attention.dense", "mlp.fc", "mlp.gate", "mlp.proj", "drafter.fc")


def fp8_checkpoint(src: Path, dst: Path, kv: bool = True, act_amax: float = 8.0) -> Path:
    """`src` (tp=1) with every linear but the lm_heads in FP8, KV scales on every attention."""
    tensors = load_file(str(src / "rank0.safetensors"))
    out = {}
    for name, t in tensors.items():
        linear = name.removesuffix(".weight")
        if not (name.endswith(".weight") and linear.endswith(LINEARS)):
            out[name] = t
            continue
        amax = t.float().abs().max()
        s = (amax / 448 if amax > 0 else torch.tensor(1.0)).reshape(1)
        out[name] = (t.float() / s).to(torch.float8_e4m3fn)
        out[linear + ".weights_scaling_factor"] = s
        out[linear + ".activation_scaling_factor"] = torch.tensor([act_amax / 448])
        if kv and linear.endswith("attention.qkv"):
            out[linear.removesuffix("qkv") + "kv_cache_scaling_factor"] = torch.tensor([1.0])
    dst.mkdir()
    save_file(out, str(dst / "rank0.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    q = {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8" if kv else None,
         "exclude_modules": ["lm_head", "*lm_head", "*vocab_embedding", "eagle_nets.*.lm_head"]}
    cfg["quantization"] = q
    if "eagle_net_config" in cfg:
        cfg["eagle_net_config"]["quantization"] = dict(q)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def bigram_head(base_model) -> dict:
    """An EAGLE head that predicts the near-bigram base well but not perfectly (test_runtime_spec.py)."""
    return {"embed_tokens.weight": base_model.model.embed_tokens.weight.detach().clone(),
            "fc.weight": torch.cat([torch.eye(H), torch.zeros(H, H)], 1), "fc.bias": torch.zeros(H),
            "layers.0.self_attn.o_proj.weight": torch.zeros(H, H), "layers.0.mlp.down_proj.weight": torch.zeros(H, I)}


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("quant_spec")
    base = make_hf_model("llama", d / "hf", num_key_value_heads=1)
    with torch.no_grad():  # layers write 10% of their output: close to a bigram model, drafts often agree
        for name, p in base.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(0.1)
    base.save_pretrained(d / "hf")
    draft = copy.deepcopy(base)
    with torch.no_grad():
        for name, p in draft.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(0.0)
    draft.save_pretrained(d / "draft_hf")
    make_eagle_head(d / "hf", d / "head", extra=bigram_head(base))
    convert_hf(d / "hf", d / "target16", dtype="float16")
    convert_hf(d / "draft_hf", d / "draft16", dtype="float16")
    convert_eagle(d / "hf", d / "head", d / "eagle16", dtype="float16", tp=1)
    target = Decoder(load_checkpoint(fp8_checkpoint(d / "target16", d / "target")))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 1001, (n,), generator=g).tolist() for n in (6, 13, 1)]
    return dict(dir=d, target=target, prompts=prompts,
                greedy=[r.output_ids for r in generate_greedy(target, prompts, NEW)],
                float_target=Decoder(load_checkpoint(d / "target16")),
                draft=Decoder(load_checkpoint(fp8_checkpoint(d / "draft16", d / "draft"))),
                eagle=EagleNet(load_checkpoint(fp8_checkpoint(d / "eagle16", d / "eagle"))))


def test_the_quantized_target_is_its_own_model(m):
    """Control: FP8 changes the greedy output of this target, so the tests below compare against
    the quantized model's tokens, not the float model's."""
    float_greedy = [r.output_ids for r in generate_greedy(m["float_target"], m["prompts"], NEW)]
    assert float_greedy != m["greedy"]
    w = m["target"].layers[0]
    assert w.qkv.act_quant == "fp8" and w.kv is not None and w.kv.kind == "FP8"


@pytest.mark.parametrize("k", [2, 4])
def test_fp8_draft_model_is_lossless(m, k):
    out = generate_draft_target(m["target"], m["draft"], m["prompts"], NEW, k)
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
    assert w.layers[0].kv is not None and w.lm_head.dtype == torch.float32
    float_net = EagleNet(load_checkpoint(m["dir"] / "eagle16"))
    tokens, feats = torch.tensor([[5, 9, 11]]), torch.randn(1, 3, H)
    a, _ = net.forward(tokens, feats, net.new_cache(1, 8))
    b, _ = float_net.forward(tokens, feats, float_net.new_cache(1, 8))
    assert 1e-3 < (a - b).abs().max() < 0.2 * b.abs().max()


@pytest.mark.parametrize("tree", [None, [[0], [0, 0], [1], [0, 0, 0]]])
def test_fp8_eagle_is_lossless(m, tree):
    """The EAGLE checkpoint's base is the same FP8 target: its greedy tokens come out exactly."""
    target = Decoder(load_checkpoint(m["dir"] / "eagle"))
    out = generate_eagle(target, m["eagle"], m["prompts"], NEW, tree)
    assert [r.output_ids for r in out] == m["greedy"]
    al = [r.stats.acceptance_length for r in out]
    assert sum(al) / len(al) > 1.3


def test_fp8_eagle2_dynamic_tree_is_lossless(m):
    target = Decoder(load_checkpoint(m["dir"] / "eagle"))
    out = generate_eagle(target, m["eagle"], m["prompts"], NEW, dynamic_top_k=3)
    assert [r.output_ids for r in out] == m["greedy"]
