"""Decoder weights out of a ModelOpt unified HF checkpoint, with the TensorRT-LLM PyTorch
backend's numerics (upstream.trtllm, "PyTorch backend: ModelOpt unified HF checkpoints").

The backend fuses q/k/v into one qkv_proj and gate/up into one gate_up_proj. For FP8
(FP8QDQLinearMethod) a fused linear takes the larger input scale and the larger weight scale of its
parts, and requantizes each part: fp8 -> model dtype, times its own scale (rounded to the model
dtype), divided by the larger scale (rounded again), cast back to fp8 (rescale_fused_weights). Its
GEMM is fp8(x / input_scale) x fp8 weight with both scales applied in float32; here that is
quant.Linear, which keeps that FP8 weight and runs either torch._scaled_mm on it or the emulation
(dequantized weight W = fp8 * weight_scale, static per-tensor input quantize-dequantize), as its
`fp8_gemm` setting says, like the TRT-LLM path. The scales stay float32 (the engine
flow's FP8Linear casts them to the model dtype; the PyTorch backend does not).

FP8 KV cache: the backend quantizes K and V (after RoPE) with kv_cache_scaling_factor 1.0 and
ignores the checkpoint's k_scale / v_scale (they are read for an NVFP4 KV cache only), so the
cache holds fp8(K), fp8(V) unscaled: quant.KVQuant with scale 1.0.

Not emulated (as everywhere in the runtime): the backend's activations and GEMM outputs are in
the model dtype (bfloat16/float16); here they stay in the compute dtype (float32 by default). With
an FP8 KV cache and FP8 weights the backend's attention also quantizes its output to FP8 with
o_proj's input scale, which o_proj's own input quantization reproduces; its FP8 FMHA kernels'
internal rounding (Q, softmax probabilities) is not emulated.
Formats other than FP8 are refused by name.
"""

from __future__ import annotations

import torch

from pathlib import Path

from ..checkpoints.hf_unified import GATE_UP, QKV, HfUnifiedCheckpoint, is_hf_unified
from ..checkpoints.scheme import QuantScheme
from ..checkpoints.writer import TORCH_DTYPES
from ..errors import TrtspecError
from ..fsutil import read_json
from ..upstream import trtllm
from .quant import Fp8Weight, KVQuant, Linear, load_float
from .weights import LayerWeights

# What a profile or quality report measured on such a checkpoint (recorded with its quantization).
NUMERICS = ("TensorRT-LLM PyTorch backend FP8 (FP8QDQLinearMethod): q/k/v and gate/up fused, each part "
            "requantized to the group's largest weight scale in the model dtype; static per-tensor input "
            "scales (largest of the group); FP8 KV cache cast with scale 1.0 (checkpoint k/v scales unused); "
            "activations and GEMM outputs in the runtime dtype, not the model dtype; FP8 FMHA internals not emulated")
# quant_algo values this module executes (None: unquantized linears, e.g. a KV-only checkpoint).
HF_RUNTIME_ALGOS = (None, "FP8")


def _bias(ckpt: HfUnifiedCheckpoint, module: str, dtype: torch.dtype) -> torch.Tensor | None:
    return load_float(ckpt, module + ".bias", dtype) if module + ".bias" in ckpt else None


def fused_fp8(ckpt: HfUnifiedCheckpoint, modules: list[str], dtype: torch.dtype) -> Linear:
    """One FP8 linear made of `modules` (HF names) the way rescale_fused_weights fuses them."""
    model = TORCH_DTYPES[ckpt.dtype]
    w8 = [ckpt.tensor(m + ".weight").view(torch.float8_e4m3fn) for m in modules]
    ws = [ckpt.tensor(m + ".weight_scale").float().reshape(()) for m in modules]
    acts = [ckpt.tensor(m + ".input_scale").float().reshape(()) for m in modules]
    s, a = torch.stack(ws).max(), torch.stack(acts).max()
    parts = []
    for w, own in zip(w8, ws):
        r = (w.to(model).float() * own).to(model)  # fp8 -> model dtype, .mul_(own scale) in the model dtype
        parts.append((r.float() / s).to(model).to(torch.float8_e4m3fn))  # .div_(max scale), -> fp8
    biases = [_bias(ckpt, m, dtype) for m in modules]
    bias = None if all(b is None for b in biases) else torch.cat(biases)
    w8 = torch.cat(parts)
    return Linear((w8.float() * s).to(dtype), bias, act_quant="fp8", act_scale=a.reshape(1),
                  fp8=Fp8Weight(w8, s.reshape(1)))


def linear(ckpt: HfUnifiedCheckpoint, modules: list[str], dtype: torch.dtype) -> Linear:
    """The backend's (fused) linear over HF `modules`: FP8 when quantized, float when excluded."""
    quantized = [ckpt.quantizes(m) for m in modules]
    if all(quantized):
        return fused_fp8(ckpt, modules, dtype)
    if any(quantized):
        raise TrtspecError(f"{ckpt.where('quantization.exclude_modules')} excludes some of {', '.join(modules)} but "
                           "not all: the PyTorch backend fuses them into one linear with one format")
    biases = [_bias(ckpt, m, dtype) for m in modules]
    return Linear(torch.cat([load_float(ckpt, m + ".weight", dtype) for m in modules]),
                  None if all(b is None for b in biases) else torch.cat(biases))


def split_rows(lin: Linear, rows: int) -> list[Linear]:
    """A bias-free fused linear cut into output-row blocks of `rows` (gate_up_proj -> gate, up) that
    share its input transform and weight scale."""
    w8s = lin.fp8.data.split(rows) if lin.fp8 is not None else [None] * (lin.weight.shape[0] // rows)
    return [Linear(w, None, act_quant=lin.act_quant, act_scale=lin.act_scale,
                   fp8=Fp8Weight(w8.contiguous(), lin.fp8.scale) if w8 is not None else None)
            for w, w8 in zip(lin.weight.split(rows), w8s)]


def kv_quant(ckpt: HfUnifiedCheckpoint) -> KVQuant | None:
    if ckpt.kv_cache_quant_algo is None:
        return None
    one = torch.tensor([trtllm.PYTORCH_FP8_KV_CACHE_SCALE])
    return KVQuant("FP8", one, torch.reciprocal(one))


def check_runtime(ckpt: HfUnifiedCheckpoint) -> QuantScheme:
    """The checkpoint's scheme, refused by field name when this runtime does not execute it."""
    if ckpt.quant_algo not in HF_RUNTIME_ALGOS:
        raise TrtspecError(f"{ckpt.where('quantization.quant_algo')}={ckpt.quant_algo!r} is not executed by the "
                           "runtime for unified HF checkpoints (supported: FP8)")
    if ckpt.kv_cache_quant_algo not in (None, "FP8"):
        raise TrtspecError(f"{ckpt.where('quantization.kv_cache_quant_algo')}={ckpt.kv_cache_quant_algo!r} is not "
                           "executed by the runtime for unified HF checkpoints (supported: FP8 or null)")
    return ckpt.quant


def load_hf_layer(ckpt: HfUnifiedCheckpoint, i: int, dtype: torch.dtype) -> LayerWeights:
    p = f"model.layers.{i}."
    a, m = p + "self_attn.", p + "mlp."
    spec = ckpt.spec
    gate_up = linear(ckpt, [m + n for n in GATE_UP], dtype)  # one gate_up_proj, split for run_layers
    gate, up = split_rows(gate_up, spec.intermediate_size)
    return LayerWeights(
        input_norm=load_float(ckpt, p + "input_layernorm.weight", dtype),
        qkv=linear(ckpt, [a + n for n in QKV], dtype),
        q_norm=load_float(ckpt, a + "q_norm.weight", dtype) if spec.qk_norm else None,
        k_norm=load_float(ckpt, a + "k_norm.weight", dtype) if spec.qk_norm else None,
        dense=linear(ckpt, [a + "o_proj"], dtype),
        post_norm=load_float(ckpt, p + "post_attention_layernorm.weight", dtype),
        fc=gate, gate=up,
        proj=linear(ckpt, [m + "down_proj"], dtype),
        kv=kv_quant(ckpt),
    )


def load_hf_decoder(ckpt: HfUnifiedCheckpoint, dtype: torch.dtype
                    ) -> tuple[QuantScheme, torch.Tensor, list[LayerWeights], torch.Tensor, torch.Tensor]:
    """(scheme, embed, layers, final norm, lm_head) of the checkpoint, for runtime.model.Decoder."""
    scheme = check_runtime(ckpt)
    embed = load_float(ckpt, "model.embed_tokens.weight", dtype)
    layers = [load_hf_layer(ckpt, i, dtype) for i in range(ckpt.spec.num_layers)]
    lm_head = load_float(ckpt, "lm_head.weight", dtype) if "lm_head.weight" in ckpt else embed
    return scheme, embed, layers, load_float(ckpt, "model.norm.weight", dtype), lm_head


def quantization_record(ckpt_dir: Path) -> dict:
    """The quantization a checkpoint directory of either format declares, for measurement records:
    a TRT-LLM config's `quantization` block, or hf_quant_config.json's plus the checkpoint format and
    the numerics this runtime runs it with ({} when unquantized)."""
    ckpt_dir = Path(ckpt_dir)
    if not is_hf_unified(ckpt_dir):
        return read_json(ckpt_dir / "config.json", "TRT-LLM config.json").get("quantization") or {}
    block = read_json(ckpt_dir / trtllm.HF_QUANT_CONFIG_FILE, "hf_quant_config.json").get("quantization") or {}
    return {**block, "checkpoint_format": "modelopt-hf", "runtime_numerics": NUMERICS}
