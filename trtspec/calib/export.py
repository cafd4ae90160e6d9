"""Calibrated quantizer state -> the quantized tensors of a TRT-LLM checkpoint (trtllm.md §3).

Plain torch, one TRT-LLM linear at a time. A TRT-LLM linear can fuse several HF linears
(attention.qkv = cat(q, k, v)), and TRT-LLM runs it as one GEMM with one input, so the exporter
first makes the fused parts agree, exactly as ModelOpt's export does (`preprocess_linear_fusion`):

- per-tensor scales (FP8) become the max over the parts: one weight scale and one activation
  scale for qkv. FP8 also unifies mlp.fc and mlp.gate (separate tensors, but trtllm-build fuses
  them into one GEMM with max scales; ModelOpt writes them equal already);
- smoothing factors (SQ, AWQ pre_quant_scale) become the mean over the parts, and each part's
  weight is re-smoothed to it, w' = w * s_own / s_mean (in float32), after which its per-channel
  or per-group amax is measured again on w'; the activation amax (SQ) is the max over the parts.

Then, with amax the calibrated max |value| (0 or NaN -> the format's max, i.e. scale 1):

    FP8:  wsf = amax_w / 448            weight = (w / wsf).to(float8_e4m3fn)    asf = amax_x / 448
    SQ:   wsf[c] = amax_w[c] / 127      weight = round(w / wsf[:, None]).clamp(-128, 127).to(int8)
          asf = amax_x / 127            prequant = s (the input is multiplied by it)
    AWQ:  wsf[c, g] = amax_w[c, g] / 7  q = round(w / wsf[c, i // group]).clamp(-8, 7)
          weight[r, i] = (q[2r, i] & 0xF) | (q[2r+1, i] << 4)   (int4 pairs along the output dim)
    KV:   kv_cache_scaling_factor = max(amax_k, amax_v) / 448 (FP8; never below 1.0, ModelOpt's
          floor) or / 127 (INT8)

Quantization happens on the full tensor; the writer then splits it per rank with the TP rules
of layout.shard_for, which is what ModelOpt's per-rank quantization amounts to (all of the above
is elementwise per row, per channel or per group, and groups never straddle a rank boundary).
"""

from __future__ import annotations

import torch

from ..upstream.modelopt import FP8_E4M3_MAX, FP8_KV_SCALE_FLOOR, INT4_MAX, INT8_MAX
from ..checkpoints.layout import TensorPlan
from ..checkpoints.quant import QUANT_SOURCE, linear_of
from ..checkpoints.scheme import QuantScheme
from .calibrate import KvQuant, LinearQuant, QuantState


def sanitize(amax: torch.Tensor, maxbound: float) -> torch.Tensor:
    """ModelOpt's export_amax: zero/NaN (a quantizer that saw nothing) -> maxbound, then > 0."""
    amax = torch.nan_to_num(torch.where(amax == 0, torch.full_like(amax, maxbound), amax), nan=maxbound)
    return amax.clamp(min=torch.finfo(amax.dtype).tiny, max=torch.finfo(amax.dtype).max)


def resmooth(parts: list[LinearQuant]) -> list[LinearQuant]:
    """Give the fused parts one smoothing factor, their mean; re-smooth weights and re-measure amax."""
    if len(parts) < 2 or parts[0].pre_quant_scale is None:
        return parts
    mean = torch.stack([p.pre_quant_scale for p in parts]).mean(dim=0)
    out = []
    for p in parts:
        if torch.equal(p.pre_quant_scale, mean):
            out.append(p)
            continue
        w = (p.weight.float() * p.pre_quant_scale.float() / mean.float()).to(p.weight.dtype)
        if p.group_size:
            amax = w.reshape(w.shape[0], -1, p.group_size).abs().amax(dim=-1).float()
        else:
            amax = w.abs().amax(dim=1).float()
        out.append(LinearQuant(w, amax, p.input_amax, mean, p.group_size))
    return out


def max_input_amax(parts: list[LinearQuant], maxbound: float) -> torch.Tensor:
    return sanitize(torch.stack([p.input_amax.reshape(()) for p in parts]).max(), maxbound).reshape(1)


def fp8_linear(parts: list[LinearQuant], peers: list[LinearQuant]) -> dict[str, torch.Tensor]:
    m = FP8_E4M3_MAX
    group = parts + peers
    w_amax = sanitize(torch.stack([p.weight_amax.reshape(()) for p in group]).max(), m).reshape(1)
    wsf = w_amax.float() / m
    weight = (torch.cat([p.weight for p in parts]) / wsf).clamp(-m, m)  # saturate, never NaN
    return {"weight": weight.to(torch.float8_e4m3fn), "weights_scaling_factor": wsf,
            "activation_scaling_factor": max_input_amax(group, m).float() / m}


def sq_linear(parts: list[LinearQuant]) -> dict[str, torch.Tensor]:
    m = INT8_MAX
    parts = resmooth(parts)
    wsf = torch.cat([sanitize(p.weight_amax, m).float() / m for p in parts])
    weight = torch.cat([p.weight for p in parts]) / wsf[:, None]
    return {"weight": weight.round().clamp(-128, 127).to(torch.int8), "weights_scaling_factor": wsf,
            "activation_scaling_factor": max_input_amax(parts, m).float() / m,
            "prequant_scaling_factor": parts[0].pre_quant_scale}


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int4 values in an int8 [out, in] -> bytes [out/2, in]: rows 2r, 2r+1 in the low, high nibble."""
    out, inp = q.shape
    pairs = q.T.reshape(inp, out // 2, 2)
    packed = (pairs[..., 0] & 0x0F) | (pairs[..., 1] << 4)
    return packed.T.contiguous().view(torch.int8)


def awq_linear(parts: list[LinearQuant]) -> dict[str, torch.Tensor]:
    m = INT4_MAX
    parts = resmooth(parts)
    g = parts[0].group_size
    wsf = torch.cat([sanitize(p.weight_amax, m).float() / m for p in parts])
    w = torch.cat([p.weight for p in parts])
    q = (w / wsf[:, torch.arange(w.shape[1]) // g]).round().clamp(-8, 7).to(torch.int8)
    pqs = parts[0].pre_quant_scale
    if pqs is None:  # AWQ skipped this linear (never saw data): neutral smoothing, as ModelOpt forces
        pqs = torch.ones(w.shape[1])
    return {"weight": pack_int4(q), "weights_scaling_factor": wsf, "prequant_scaling_factor": pqs}


def kv_scale(kv: KvQuant, kv_algo: str) -> torch.Tensor:
    m = FP8_E4M3_MAX if kv_algo == "FP8" else INT8_MAX
    k, v = sanitize(kv.k_amax, m).float() / m, sanitize(kv.v_amax, m).float() / m
    if kv_algo == "FP8":
        floor = torch.tensor([FP8_KV_SCALE_FLOOR])
        k, v = torch.maximum(k, floor), torch.maximum(v, floor)
    return torch.maximum(k, v).reshape(1)


def _module(source_name: str) -> str:
    return source_name[: -len(".weight")]


FP8_PEERS = {".mlp.fc": ".mlp.gate", ".mlp.gate": ".mlp.fc"}  # one fused GEMM at build time


def peer_of(linear: str) -> str | None:
    for own, other in FP8_PEERS.items():
        if linear.endswith(own):
            return linear[: -len(own)] + other
    return None


class QuantSource:
    """The quantized tensors of a checkpoint as a lazy weight source (Source.model "quant").

    `plain` are the unquantized plans (their HF sources say which calibrated modules make each
    TRT-LLM linear), `quantized` the plans being written, `states[model]` the calibrated state of
    input `model` ("base", "head")."""

    where = "quantized exporter"

    def __init__(self, plain: list[TensorPlan], quantized: list[TensorPlan], states: dict[str, QuantState],
                 layout: QuantScheme):
        self.layout, self.states = layout, states
        self.linears = {lin: p for p in plain if (lin := linear_of(p.name))}
        self.attn = {p.name[: -len("qkv.weight")]: p for p in plain if p.name.endswith("attention.qkv.weight")}
        self.plans = {p.name: p for p in quantized if p.sources and p.sources[0].model == QUANT_SOURCE}
        self._cache: tuple[str, dict[str, torch.Tensor]] | None = None

    def names(self) -> set[str]:
        return set(self.plans)

    def __contains__(self, name: str) -> bool:
        return name in self.plans

    def shape(self, name: str) -> tuple[int, ...]:
        return self.plans[name].shape

    def files(self) -> list:
        return []

    def _parts(self, linear: str) -> list[LinearQuant]:
        return [self.states[s.model].linears[_module(s.name)] for s in self.linears[linear].sources]

    def _compute(self, linear: str) -> dict[str, torch.Tensor]:
        algo = self.layout.quant_algo
        if algo == "FP8":
            peer = peer_of(linear)
            return fp8_linear(self._parts(linear), self._parts(peer) if peer else [])
        if algo == "W8A8_SQ_PER_CHANNEL":
            return sq_linear(self._parts(linear))
        if algo == "W4A16_AWQ":
            return awq_linear(self._parts(linear))
        raise AssertionError(f"no quantized tensors for quant_algo {algo}")  # W8A16 writes none

    def get(self, name: str) -> torch.Tensor:
        if name.endswith("attention.kv_cache_scaling_factor"):
            q = self.attn[name[: -len("kv_cache_scaling_factor")]].sources[0]  # ...self_attn.q_proj.weight
            attention = _module(q.name).rsplit(".", 1)[0]  # ...self_attn
            return kv_scale(self.states[q.model].kv[attention], self.layout.kv_cache_quant_algo)
        linear, field = name.rsplit(".", 1)
        if self._cache is None or self._cache[0] != linear:
            self._cache = (linear, self._compute(linear))  # a linear's tensors are consecutive plans
        return self._cache[1][field]
