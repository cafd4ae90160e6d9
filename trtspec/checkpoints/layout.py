"""The TRT-LLM tensor layout of a Llama-family decoder: names, full shapes, HF sources, TP rules.

One `TensorPlan` per TRT-LLM tensor says where its values come from (one or more HF tensors,
concatenated on dim 0, or zeros) and how it is split across ranks. The converter executes plans;
the validator and the runtime use `shard_for` to read rank files back. Reference: trtllm.md §2.4
(names; note the trap: TRT `mlp.fc` <- HF `gate_proj`, TRT `mlp.gate` <- HF `up_proj`) and §4.3
(`eagle_plans`: the EagleForCausalLM layout, see eagle.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from .scheme import PACKED_INT4_ALGOS
from .sharding import Shard
from .spec import DecoderSpec


@dataclass(frozen=True)
class Source:
    model: str  # which input: "base" or "head"
    name: str  # HF tensor name
    shape: tuple[int, ...]  # expected HF shape


@dataclass(frozen=True)
class TensorPlan:
    name: str
    shape: tuple[int, ...]  # full (unsplit, unpadded) shape
    shard: Shard
    sources: tuple[Source, ...] = ()  # empty: a zero tensor
    dtype: torch.dtype | None = None  # None: the checkpoint's model dtype (quantized tensors set it)


def layer_plans(spec: DecoderSpec, model: str, hf: str, trt: str, layer: int, tp_heads: Shard,
                input_norm: bool = True) -> list[TensorPlan]:
    """Plans for decoder layer `layer`: HF names under `hf`, TRT-LLM names under `trt`."""
    H, I, hd = spec.hidden_size, spec.intermediate_size, spec.head_size
    q_out, kv_out = spec.num_heads * hd, spec.num_kv_heads * hd
    h, t = f"{hf}layers.{layer}.", f"{trt}layers.{layer}."
    rep, col, row = Shard("replicate"), Shard("col"), Shard("row")

    def src(name: str, shape: tuple[int, ...]) -> Source:
        return Source(model, h + name, shape)

    plans = []
    if input_norm:
        plans.append(TensorPlan(t + "input_layernorm.weight", (H,), rep, (src("input_layernorm.weight", (H,)),)))
    plans.append(TensorPlan(t + "attention.qkv.weight", (spec.qkv_out, H), tp_heads, (
        src("self_attn.q_proj.weight", (q_out, H)), src("self_attn.k_proj.weight", (kv_out, H)),
        src("self_attn.v_proj.weight", (kv_out, H)))))
    if spec.attn_bias:
        plans.append(TensorPlan(t + "attention.qkv.bias", (spec.qkv_out,), tp_heads, (
            src("self_attn.q_proj.bias", (q_out,)), src("self_attn.k_proj.bias", (kv_out,)),
            src("self_attn.v_proj.bias", (kv_out,)))))
    if spec.qk_norm:
        plans.append(TensorPlan(t + "attention.q_layernorm.weight", (hd,), rep, (src("self_attn.q_norm.weight", (hd,)),)))
        plans.append(TensorPlan(t + "attention.k_layernorm.weight", (hd,), rep, (src("self_attn.k_norm.weight", (hd,)),)))
    plans += [
        TensorPlan(t + "attention.dense.weight", (H, q_out), row, (src("self_attn.o_proj.weight", (H, q_out)),)),
        TensorPlan(t + "post_layernorm.weight", (H,), rep, (src("post_attention_layernorm.weight", (H,)),)),
        TensorPlan(t + "mlp.fc.weight", (I, H), col, (src("mlp.gate_proj.weight", (I, H)),)),
        TensorPlan(t + "mlp.gate.weight", (I, H), col, (src("mlp.up_proj.weight", (I, H)),)),
        TensorPlan(t + "mlp.proj.weight", (H, I), row, (src("mlp.down_proj.weight", (H, I)),)),
    ]
    return plans


def qkv_shard(spec: DecoderSpec) -> Shard:
    return Shard("qkv", spec.num_heads, spec.num_kv_heads, spec.head_size)


def decoder_plans(spec: DecoderSpec, parallel_embedding: bool) -> list[TensorPlan]:
    """All tensors of a plain decoder checkpoint (HF names under `model.`)."""
    H, V = spec.hidden_size, spec.vocab_size
    embed = Source("base", "model.embed_tokens.weight", (V, H))
    lm_head = embed if spec.tie_word_embeddings else Source("base", "lm_head.weight", (V, H))
    plans = [TensorPlan("transformer.vocab_embedding.weight", (V, H),
                        Shard("vocab") if parallel_embedding else Shard("replicate"), (embed,))]
    for i in range(spec.num_layers):
        plans += layer_plans(spec, "base", "model.", "transformer.", i, qkv_shard(spec))
    plans.append(TensorPlan("transformer.ln_f.weight", (H,), Shard("replicate"),
                            (Source("base", "model.norm.weight", (H,)),)))
    plans.append(TensorPlan("lm_head.weight", (V, H), Shard("vocab"), (lm_head,)))
    return plans


_ROW = re.compile(r"(attention\.dense|mlp\.proj)\.weight$")
_COL = re.compile(r"(mlp\.fc|mlp\.gate|drafter\.fc)\.(weight|bias)$")
# Quantized checkpoints (checkpoints/quant.py): the scale tensors of linear X are named X.<suffix>.
_ROW_LINEAR = re.compile(r"(attention\.dense|mlp\.proj)\.[a-z_]+$")
_QKV_LINEAR = re.compile(r"attention\.qkv\.[a-z_]+$")


def quant_shard_for(name: str, spec: DecoderSpec, quant_algo: str) -> Shard | None:
    """TP rule of a quantized checkpoint's tensor, or None where the plain rule applies.

    ModelOpt's split rules (export/postprocess.py, verified against its tp=2 export):
    per-tensor scales ([1]) replicate; a column linear's per-channel or per-group weight scales
    split with its output rows; a row linear's per-channel scales ([out]) replicate and its
    per-group scales ([out, in/group]) split along the input dim like the weight; the prequant
    (smoothing) scale [in] replicates on column linears and splits on row linears, whose input
    is split. A packed int4 weight [out/2, in] splits like its weight with half the rows.
    """
    if name.endswith(("activation_scaling_factor", "kv_cache_scaling_factor")):
        return Shard("replicate")
    row, qkv = bool(_ROW_LINEAR.search(name)), bool(_QKV_LINEAR.search(name))
    if name.endswith("prequant_scaling_factor"):
        return Shard("col") if row else Shard("replicate")  # a 1-D [in]: "col" chunks dim 0
    if name.endswith("weights_scaling_factor"):
        if quant_algo == "FP8":
            return Shard("replicate")
        if row:
            return Shard("row") if quant_algo in PACKED_INT4_ALGOS else Shard("replicate")
        return qkv_shard(spec) if qkv else Shard("col")
    if qkv and name.endswith("qkv.weight") and quant_algo in PACKED_INT4_ALGOS:
        return Shard("qkv", spec.num_heads, spec.num_kv_heads, spec.head_size // 2)
    return None


def shard_for(name: str, spec: DecoderSpec, parallel_embedding: bool, quant_algo: str | None = None) -> Shard:
    """How tensor `name` of a decoder with `spec` is split across ranks (see sharding.py);
    `quant_algo` is the checkpoint's `quantization.quant_algo` (its scale tensors have rules too)."""
    if quant_algo:
        shard = quant_shard_for(name, spec, quant_algo)
        if shard is not None:
            return shard
    if name.endswith("attention.qkv.weight") or name.endswith("attention.qkv.bias"):
        return qkv_shard(spec)
    if name.endswith("lm_head.weight"):
        return Shard("vocab")
    if name.endswith("vocab_embedding.weight"):
        return Shard("vocab") if parallel_embedding else Shard("replicate")
    if _ROW.search(name):
        return Shard("row")
    if _COL.search(name):
        return Shard("col")
    return Shard("replicate")


def eagle_plans(base: DecoderSpec, head: DecoderSpec, num_eagle_layers: int,
                head_has_embedding: bool = True, head_has_fc_bias: bool = True) -> list[TensorPlan]:
    H, V = base.hidden_size, base.vocab_size
    embed = (Source("head", "embed_tokens.weight", (V, H)) if head_has_embedding
             else Source("base", "model.embed_tokens.weight", (V, H)))
    lm_head = Source("base", "model.embed_tokens.weight" if base.tie_word_embeddings else "lm_head.weight", (V, H))
    fc_bias = (Source("head", "fc.bias", (H,)),) if head_has_fc_bias else ()  # () = zeros
    plans = decoder_plans(base, parallel_embedding=False)
    for i in range(num_eagle_layers):
        p = f"eagle_nets.{i}."
        plans += [
            TensorPlan(p + "drafter.vocab_embedding.weight", (V, H), Shard("replicate"), (embed,)),
            TensorPlan(p + "drafter.fc.weight", (H, 2 * H), Shard("col"), (Source("head", "fc.weight", (H, 2 * H)),)),
            TensorPlan(p + "drafter.fc.bias", (H,), Shard("col"), fc_bias),
        ]
        for j in range(head.num_layers):
            plans += layer_plans(head, "head", "", p + "drafter.", j, qkv_shard(head), input_norm=j > 0)
        plans.append(TensorPlan(p + "lm_head.weight", (V, H), Shard("vocab"), (lm_head,)))
    return plans
