"""Measured sensitivity of each quantized GEMM: how much of the quantized model's error it causes.

Measured on the checkpoint itself, in the PyTorch runtime (TRT-LLM's numerics: scales in the
model dtype, fused fc/gate requantized, the FP8 KV floor), not on ModelOpt's fake-quant model, so
what is ranked is what the engine would run. For each unit u (mixed.py):

    score(u) = KL(ref || quant) - KL(ref || quant with u in the model dtype)

per token, pooled, teacher-forced on calibration prompts (their first `seq_len` tokens), ref the
unquantized model in float32. This is leave-one-out: each unit is judged with every other unit
quantized, which is the setting it will run in. The KV cache stays quantized throughout, as TRT-
LLM quantizes it for every attention whatever exclude_modules says.

Only calibration prompts are used, never the report's held-out ones, so the quality report stays
an honest measurement of the choice.

Cost: one reference and one quantized forward per prompt, then per unit a forward of the layers
from the unit's own layer on (the hidden state entering that layer is the quantized run's, cached),
plus the LM head: for SmolLM2-135M (120 units, 30 layers, a 49k vocabulary) about 1.2 TFLOP per
64-token prompt. Measured: 8 x 64 tokens took 2009 s on the shared 2-core dev VM at a load average
of ~6 (one thread); budget `--sensitivity-samples` x `--sensitivity-seq-len` accordingly. The noise
floor at 512 tokens is ~1e-3 nats/token of score, against a top score of 8e-3 on SmolLM2.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import TrtspecError
from ..runtime.kv_cache import KVCache
from ..runtime.model import Decoder, rms_norm, run_layers
from ..runtime.quant import Linear

# TRT-LLM unit suffix -> LayerWeights fields it replaces (mlp.fc names the fused fc + gate GEMM).
FIELDS = {"attention.qkv": ("qkv",), "attention.dense": ("dense",), "mlp.fc": ("fc", "gate"), "mlp.proj": ("proj",)}
METHOD = "leave-one-out KL(ref || quant) reduction per token, teacher-forced on calibration prompts"


@dataclass
class Sensitivity:
    scores: dict[str, float]  # unit -> KL reduction per token when it stays in the model dtype
    baseline_kl: float  # KL(ref || all quantized) per token
    baseline_top1: float  # top-1 agreement of all quantized with ref on the same positions
    prompts: int
    tokens: int
    seconds: float

    def ranked(self) -> list[str]:
        """Most sensitive first; a non-finite score (the float weight overflowed the model dtype)
        ranks last: keeping that GEMM unquantized would not run either."""
        return sorted(self.scores, key=lambda u: (-self.scores[u] if math.isfinite(self.scores[u]) else math.inf, u))

    def manifest(self, top: list[str]) -> dict:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"method": METHOD, "prompts": self.prompts, "tokens": self.tokens, "seconds": round(self.seconds, 2),
                "baseline_kl": num(self.baseline_kl), "baseline_top1": self.baseline_top1,
                "kept": {u: num(self.scores[u]) for u in top},
                "scores": {u: num(self.scores[u]) for u in self.ranked()}}


def _split(unit: str) -> tuple[int, tuple[str, ...]]:
    """'transformer.layers.3.mlp.fc' -> (3, ('fc', 'gate'))."""
    head, _, rest = unit.partition("transformer.layers.")
    idx, _, suffix = rest.partition(".")
    if head or not idx.isdigit() or suffix not in FIELDS:
        raise TrtspecError(f"sensitivity: '{unit}' is not a decoder-layer linear of a TRT-LLM checkpoint")
    return int(idx), FIELDS[suffix]


def _as_dtype(lin: Linear, dtype: torch.dtype) -> Linear:
    """The float linear as the checkpoint would store it unquantized: weights rounded to `dtype`."""
    return Linear(lin.weight.to(dtype).to(lin.weight.dtype),
                  None if lin.bias is None else lin.bias.to(dtype).to(lin.bias.dtype))


def _kl(ref_logp: torch.Tensor, logits: torch.Tensor) -> tuple[float, torch.Tensor]:
    logp = F.log_softmax(logits.float(), dim=-1)
    return float((ref_logp.exp() * (ref_logp - logp)).sum()), logp.argmax(-1)


def _tail(dec: Decoder, x: torch.Tensor, layers: list, start: int) -> torch.Tensor:
    """Logits of layers[start:] applied to x (the hidden state entering layer `start`)."""
    s = dec.spec
    cache = KVCache(len(layers) - start, 1, x.shape[1], s.num_kv_heads, s.head_size, dec.dtype,
                    dec.placement.layers[start:])
    x = run_layers(x, layers[start:], s, dec.freq, cache, None, None, None)
    return dec.logits(rms_norm(x, dec.ln_f, s.norm_eps))[0]


@torch.inference_mode()
def measure(quant: Decoder, ref: Decoder, units: list[str], prompts: list[list[int]], model_dtype: torch.dtype,
            progress=None) -> Sensitivity:
    """Score every unit in `units` (see module doc). `quant` has every unit quantized, `ref` none."""
    start = time.perf_counter()
    where = [(u, *_split(u)) for u in units]
    sums = dict.fromkeys(units, 0.0)
    base_kl, agree, ntok = 0.0, 0, 0
    for n, ids in enumerate(prompts):
        tokens = torch.tensor([ids], device=quant.device)  # both decoders on one device (quantization.device)
        T = len(ids)
        ref_logits, _ = ref.forward(tokens, ref.new_cache(1, T))
        ref_logp = F.log_softmax(ref_logits[0].float(), dim=-1)
        entering = []  # hidden state entering each layer of the quantized run
        x = F.embedding(tokens, quant.embed)
        for i in range(len(quant.layers)):
            entering.append(x)
            s = quant.spec
            x = run_layers(x, quant.layers[i:i + 1], s, quant.freq,
                           KVCache(1, 1, T, s.num_kv_heads, s.head_size, quant.dtype,
                                   quant.placement.layers[i:i + 1]),
                           None, None, None)
        kl, top = _kl(ref_logp, quant.logits(rms_norm(x, quant.ln_f, quant.spec.norm_eps))[0])
        base_kl += kl
        agree += int((top == ref_logp.argmax(-1)).sum())
        ntok += T
        for unit, layer, fields in where:
            own, other = quant.layers[layer], ref.layers[layer]
            swapped = dataclasses.replace(own, **{f: _as_dtype(getattr(other, f), model_dtype) for f in fields})
            layers = quant.layers[:layer] + [swapped] + quant.layers[layer + 1:]
            sums[unit] += kl - _kl(ref_logp, _tail(quant, entering[layer], layers, layer))[0]
        if progress:
            progress(f"  sensitivity: prompt {n + 1}/{len(prompts)} ({len(units)} units)")
    return Sensitivity({u: v / ntok for u, v in sums.items()}, base_kl / ntok, agree / ntok, len(prompts), ntok,
                       time.perf_counter() - start)


def sensitivity_prompts(prompts: list[list[int]], count: int, seq_len: int) -> list[list[int]]:
    """`count` calibration prompts spread over the set (sources are concatenated in order, so a
    stride covers each), each cut to its first `seq_len` tokens."""
    if count < 1 or seq_len < 2:
        raise TrtspecError(f"sensitivity: expected >= 1 prompts of >= 2 tokens, got {count} x {seq_len}")
    step = max(1, len(prompts) // count)
    return [p[:seq_len] for p in prompts[::step][:count] if len(p) >= 2]
