"""Quantized linears and KV cache with the numerics TensorRT-LLM 1.2 applies (trtllm.md §3).

A linear is kept as one dequantized weight W [out, in] in the compute dtype plus the transform
TRT-LLM applies to its input at run time; then y = F.linear(x', W, b). Dequantizing both sides
first is exact algebra: (q_x s_x)(q_W s_W)^T = s_x s_W (q_x q_W^T), the integer/FP8 GEMM, up to
float summation order.

    FP8                  x' = fp8(clamp(x / s_a, ±448)) s_a       W = fp8 s_w      (per tensor)
    W8A8_SQ_PER_CHANNEL  x' = int8(round(x s_pre / s_a)) s_a      W = int8 s_w[out]
    W8A16 / W4A16        x' = x                                   W = int(w / s) s  (built by TRT-LLM)
    W4A16_AWQ            x' = x s_pre                             W = int4 s_w[out, in / group]
    KV FP8 / INT8        K, V cached as q(K / s_kv) s_kv          (after RoPE; / s_kv is * rcp_kv)

K/V are quantized in every forward, prompt included, as ModelOpt's k/v bmm quantizers do. TRT-LLM's
context phase may differ (not checked against its kernels): without FP8 context FMHA the prompt can
attend its own unquantized K/V; with FP8 context FMHA (FP8 weights + FP8 KV) Q and the softmax
probabilities are FP8 too, which neither ModelOpt's fake quant nor this runtime emulates.

Rounding and clamping are TensorRT's Quantize (round half to even; FP8 ±448, INT8 [-128, 127]).
ModelOpt's fake quant clamps INT8 to ±127 (narrow range); the two differ only for an activation
below -127.5 s_a, i.e. beyond its calibrated range.

What TRT-LLM does to the checkpoint at build time is emulated here, because it changes numbers:
- FP8Linear casts both scales to the model dtype before use (quantization/layers.py);
- `fuse_gate_mlp` (use_fused_mlp, on for FP8) requantizes mlp.fc and mlp.gate to one FP8 weight
  with the larger weight scale and the larger activation scale (models/modeling_utils.py);
- W8A16/W4A16 checkpoints carry float weights; `symmetric_quantize` quantizes them per output
  channel with s = amax / 2^(bits-1) (128 or 8, not 127), C `round` (half away from zero),
  clamp [-2^(bits-1), 2^(bits-1) - 1], and keeps s in the weight dtype (cutlass_preprocessors.cpp);
- AWQ scales are cast to the model dtype (`preprocess_perlayer_weights`).
Activations otherwise stay in the compute dtype (float32 by default), as everywhere in the runtime.

FP8 GEMMs (`fp8_gemm`): an FP8 linear also keeps its FP8 weight, and can run the real FP8 GEMM
TensorRT-LLM runs: x_fp8 = fp8(clamp(x / s_a, ±448)), y = _scaled_mm(x_fp8, W_fp8^T, s_a, s_w) + b
(upstream.trtllm, "FP8 GEMMs"). The QDQ emulation above is the same algebra in float arithmetic.
    emulate    always the QDQ emulation;
    scaled_mm  torch._scaled_mm wherever it runs (CPU included: torch's CPU kernel is exact float32
               arithmetic, so it equals the emulation there up to summation order);
    auto       scaled_mm on CUDA devices of compute capability >= 8.9 (FP8 tensor cores: Ada, Hopper),
               the emulation elsewhere, so CPU results (and every golden test) stay bit-identical.
A weight whose dims _scaled_mm's CUDA kernels refuse (not multiples of 16) falls back to the
emulation whatever the mode, on every device alike. Both forms of the weight are kept (the
dequantized one for the emulation and the fallback): one byte per parameter more than the
compute-dtype weight alone, e.g. 8 GB next to 16 GB of bfloat16 for an 8B model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..checkpoints.scheme import QuantScheme
from ..checkpoints.trtllm_ckpt import TrtllmCheckpoint
from ..checkpoints.writer import TORCH_DTYPES
from ..errors import TrtspecError
from ..upstream import trtllm
from .options import FP8_GEMMS  # how an FP8 linear multiplies (module docstring)

# The weight formats this runtime implements (a subset of what TRT-LLM accepts).
QUANT_ALGOS = ("FP8", "W8A8_SQ_PER_CHANNEL", "W8A16", "W4A16", "W4A16_AWQ")
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448: TensorRT's FP8 Quantize saturates here
FLOAT_DTYPES = tuple(TORCH_DTYPES.values())
# FP8 tensor cores (and so cuBLASLt's FP8 GEMM behind torch._scaled_mm) exist from SM 8.9 on.
SCALED_MM_MIN_CAPABILITY = (8, 9)
SCALED_MM_ALIGN = 16  # _scaled_mm (CUDA) wants both dims of the FP8 weight divisible by 16


# --- TensorRT Quantize -> Dequantize ------------------------------------------------------------

def quantize_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x / s saturated to ±448, rounded to float8_e4m3fn: the FP8 GEMM's input (and qdq_fp8's)."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def qdq_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x / s saturated to ±448, rounded to float8_e4m3fn (nearest even), times s."""
    return (quantize_fp8(x, scale).float() * scale).to(x.dtype)


def qdq_int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """round(x / s) (half to even) clamped to [-128, 127], times s."""
    q = torch.round(x.float() / scale).clamp(-128, 127)
    return (q * scale).to(x.dtype)


@dataclass
class Fp8Weight:
    """An FP8 linear's weight as the FP8 GEMM reads it."""
    data: torch.Tensor  # [out, in] float8_e4m3fn, row-major: data.t() is the column-major operand
    scale: torch.Tensor  # [1] float32 (already rounded through the model dtype where TRT-LLM does)

    def fits_scaled_mm(self) -> bool:
        return all(d % SCALED_MM_ALIGN == 0 for d in self.data.shape)

    def on(self, device: torch.device) -> "Fp8Weight":
        """Itself on `device` (the runtime may move a model's float tensors without knowing this one)."""
        return self if self.data.device == device else Fp8Weight(self.data.to(device), self.scale.to(device))


def scaled_mm_capable(device: torch.device) -> bool:
    """Whether `auto` runs FP8 GEMMs on `device`: CUDA with FP8 tensor cores, and a torch with _scaled_mm."""
    return (device.type == "cuda" and hasattr(torch, "_scaled_mm")
            and torch.cuda.get_device_capability(device) >= SCALED_MM_MIN_CAPABILITY)


def fp8_gemm(x: torch.Tensor, act_scale: torch.Tensor, w: Fp8Weight, bias: torch.Tensor | None) -> torch.Tensor:
    """y = (fp8(x / s_a) W_fp8^T) s_a s_w (+ b) with torch._scaled_mm: float32 accumulation, output
    in x's dtype, bias added afterwards as TRT-LLM's FP8QDQLinearMethod does."""
    lead = x.shape[:-1]
    q = quantize_fp8(x.reshape(-1, x.shape[-1]), act_scale).contiguous()
    y = torch._scaled_mm(q, w.data.t(), act_scale.reshape(()), w.scale.reshape(()), out_dtype=x.dtype)
    y = y.reshape(*lead, y.shape[-1])
    return y if bias is None else y + bias


@dataclass
class Linear:
    """y = W x' + b, x' = the input as TRT-LLM's quantized linear sees it (module docstring)."""
    weight: torch.Tensor  # [out, in], dequantized, compute dtype
    bias: torch.Tensor | None = None
    pre_scale: torch.Tensor | None = None  # [in]: SmoothQuant smoothing / AWQ pre-quant scale
    act_quant: str | None = None  # "fp8" | "int8": static per-tensor input quantization
    act_scale: torch.Tensor | None = None  # [1] float32
    fp8: Fp8Weight | None = None  # FP8 linears: the FP8 weight (weight == fp8.data * fp8.scale)
    fp8_gemm: str = "auto"  # FP8_GEMMS: how an FP8 linear multiplies

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_scale is not None:
            x = x * self.pre_scale
        if self.act_quant == "fp8":
            if self._scaled_mm(x.device):
                self.fp8 = self.fp8.on(x.device)
                return fp8_gemm(x, self.act_scale, self.fp8, self.bias)
            x = qdq_fp8(x, self.act_scale)
        elif self.act_quant == "int8":
            x = qdq_int8(x, self.act_scale)
        return F.linear(x, self.weight, self.bias)

    def _scaled_mm(self, device: torch.device) -> bool:
        if self.fp8 is None or self.fp8_gemm == "emulate" or not self.fp8.fits_scaled_mm():
            return False
        return self.fp8_gemm == "scaled_mm" or scaled_mm_capable(device)

    def tensors(self) -> list[torch.Tensor | None]:
        return [self.weight, self.bias, self.pre_scale, self.act_scale]


def set_fp8_gemm(linears, mode: str) -> None:
    """Make every linear of `linears` multiply its FP8 weight the `mode` way (FP8_GEMMS); linears
    without an FP8 weight are unaffected. `scaled_mm` needs a torch that has torch._scaled_mm."""
    if mode not in FP8_GEMMS:
        raise TrtspecError(f"fp8_gemm: {mode!r} is not one of {', '.join(FP8_GEMMS)}")
    if mode == "scaled_mm" and not hasattr(torch, "_scaled_mm"):
        raise TrtspecError(f"fp8_gemm: scaled_mm needs torch._scaled_mm, which torch {torch.__version__} lacks")
    for lin in linears:
        lin.fp8_gemm = mode


@dataclass
class KVQuant:
    """K/V as the quantized cache returns them. TRT-LLM's attention kernels multiply by
    `kv_cache_rcp_scaling_factor` to quantize and by `kv_cache_scaling_factor` to dequantize."""
    kind: str  # "FP8" | "INT8"
    scale: torch.Tensor  # [1] float32
    rcp: torch.Tensor  # [1] float32

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float() * self.rcp
        q = y.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() if self.kind == "FP8" \
            else torch.round(y).clamp(-128, 127)
        return (q * self.scale).to(x.dtype)

    def tensors(self) -> list[torch.Tensor]:
        return [self.scale, self.rcp]


# --- The checkpoint's quantization block ----------------------------------------------------------

def scheme_of(ckpt: TrtllmCheckpoint) -> QuantScheme:
    """The checkpoint's quantization scheme, once checked that this runtime implements it;
    unsupported algorithms are refused by name."""
    q, where = ckpt.quant, ckpt.path / "config.json"
    algo, kv = q.quant_algo, q.kv_cache_quant_algo
    if algo is not None and algo not in QUANT_ALGOS:
        raise TrtspecError(f"{where}: quantization.quant_algo={algo!r} is not supported by the PyTorch runtime "
                           f"(supported: {', '.join(QUANT_ALGOS)})")
    if kv is not None and kv not in trtllm.KV_CACHE_QUANT_ALGOS:
        raise TrtspecError(f"{where}: quantization.kv_cache_quant_algo={kv!r} is not supported by the PyTorch "
                           f"runtime (supported: {', '.join(trtllm.KV_CACHE_QUANT_ALGOS)})")
    if algo == "W4A16_AWQ" and q.has_zero_point:
        raise TrtspecError(f"{where}: quantization.has_zero_point=true (asymmetric AWQ) is not supported")
    model_dtype(ckpt)
    return q


def model_dtype(ckpt: TrtllmCheckpoint) -> torch.dtype:
    """The checkpoint's model dtype: TRT-LLM keeps some scales in it."""
    if ckpt.dtype not in TORCH_DTYPES:
        raise TrtspecError(f"{ckpt.path / 'config.json'}: field 'dtype' is {ckpt.dtype!r}, expected one of "
                           f"{list(TORCH_DTYPES)}")
    return TORCH_DTYPES[ckpt.dtype]


# --- Reading tensors --------------------------------------------------------------------------------

def _raw(ckpt: TrtllmCheckpoint, name: str, why: str) -> torch.Tensor:
    if name not in ckpt:
        raise TrtspecError(f"{ckpt.path}: missing tensor '{name}' ({why})")
    return ckpt.tensor(name)


def _expect(ckpt: TrtllmCheckpoint, t: torch.Tensor, name: str, dtypes: tuple[torch.dtype, ...],
            hint: str = "") -> None:
    if t.dtype not in dtypes:
        want = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TrtspecError(f"{ckpt.where('quantization.quant_algo')}={ckpt.quant_algo!r} but tensor '{name}' is "
                           f"{str(t.dtype).removeprefix('torch.')}, expected {want}{hint}")


def load_float(ckpt: TrtllmCheckpoint, name: str, dtype: torch.dtype) -> torch.Tensor:
    """A tensor TRT-LLM keeps in floating point (embeddings, norms, lm_head, unquantized linears);
    also read from a unified HF checkpoint view (hf_weights.py), which has the same `tensor`/`path`."""
    t = ckpt.tensor(name)
    if t.dtype not in FLOAT_DTYPES:
        raise TrtspecError(f"{ckpt.path}: tensor '{name}' is {str(t.dtype).removeprefix('torch.')}; the runtime "
                           "reads it as a float tensor (quantized lm_head/embeddings are not supported)")
    return t.to(dtype).contiguous()


def unpack_int4_rows(packed: torch.Tensor) -> torch.Tensor:
    """ModelOpt `pack_int4_in_uint8`: [out/2, in] bytes, row 2i in the low nibble, row 2i+1 in the
    high nibble, two's complement -> [out, in] int values in [-8, 7]."""
    b = packed.view(torch.uint8).to(torch.int16)
    lo, hi = b & 0xF, b >> 4
    lo, hi = lo - 16 * (lo >= 8), hi - 16 * (hi >= 8)
    return torch.stack([lo, hi], dim=1).reshape(2 * packed.shape[0], packed.shape[1])


def weight_only(w: torch.Tensor, bits: int) -> torch.Tensor:
    """TRT-LLM's build-time per-output-channel symmetric quantization of a float weight [out, in],
    dequantized: s = amax / 2^(bits-1) (stored in w's dtype), q = round-half-away(w / s)."""
    wf = w.float()
    s = wf.abs().amax(dim=1, keepdim=True) * (1.0 / (1 << (bits - 1)))
    r = wf / torch.where(s == 0, torch.ones_like(s), s)
    q = (torch.sign(r) * torch.floor(r.abs() + 0.5)).clamp(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return q * s.to(w.dtype).float()


def _fp8_raw(ckpt: TrtllmCheckpoint, prefix: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weight as float8 [out, in], weights_scaling_factor, activation_scaling_factor)."""
    w = _raw(ckpt, prefix + "weight", "FP8 weight")
    _expect(ckpt, w, prefix + "weight", (torch.float8_e4m3fn, torch.int8, torch.uint8))
    ws = _raw(ckpt, prefix + "weights_scaling_factor", "FP8 weight scale")
    acts = _raw(ckpt, prefix + "activation_scaling_factor", "FP8 activation scale")
    return w.view(torch.float8_e4m3fn), ws.float().reshape(1), acts.float().reshape(1)


def _fp8_linear(w8, ws, acts, bias, model: torch.dtype, dtype: torch.dtype) -> Linear:
    ws, acts = ws.to(model).float(), acts.to(model).float()  # FP8Linear: cast(scale, model dtype)
    return Linear((w8.float() * ws).to(dtype), bias, act_quant="fp8", act_scale=acts,
                  fp8=Fp8Weight(w8.contiguous(), ws))


def load_linear(ckpt: TrtllmCheckpoint, prefix: str, scheme: QuantScheme, dtype: torch.dtype,
                bias: bool | None = None) -> Linear:
    """The linear whose tensors start with `prefix` (e.g. 'transformer.layers.0.attention.qkv.').
    bias: True requires `bias`, None reads it when present."""
    b = None
    if bias or (bias is None and prefix + "bias" in ckpt):
        b = load_float(ckpt, prefix + "bias", dtype)
    algo = scheme.quant_algo if scheme.quantizes(prefix[:-1]) else None
    name = prefix + "weight"
    if algo is None:
        return Linear(load_float(ckpt, name, dtype), b)
    if algo == "FP8":
        return _fp8_linear(*_fp8_raw(ckpt, prefix), b, model_dtype(ckpt), dtype)
    w = _raw(ckpt, name, f"{algo} weight")
    if algo == "W8A8_SQ_PER_CHANNEL":
        _expect(ckpt, w, name, (torch.int8,))
        ws = _raw(ckpt, prefix + "weights_scaling_factor", "per-channel weight scale").float()
        acts = _raw(ckpt, prefix + "activation_scaling_factor", "activation scale").float().reshape(1)
        pre = _raw(ckpt, prefix + "prequant_scaling_factor", "SmoothQuant smoothing scale")
        return Linear((w.float() * ws.reshape(-1, 1)).to(dtype), b, pre.to(dtype), "int8", acts)
    if algo in ("W8A16", "W4A16"):
        _expect(ckpt, w, name, FLOAT_DTYPES, " (TRT-LLM quantizes float weights at build time; an int8 "
                "[out, in] weight is ModelOpt's raw int8_wo export, which trtllm-build does not read)")
        return Linear(weight_only(w, 8 if algo == "W8A16" else 4).to(dtype), b)
    # W4A16_AWQ
    _expect(ckpt, w, name, (torch.int8, torch.uint8))
    q = unpack_int4_rows(w)
    s = _raw(ckpt, prefix + "weights_scaling_factor", "AWQ group scale").to(model_dtype(ckpt)).float()
    if q.shape[1] != s.shape[1] * scheme.group_size or q.shape[0] != s.shape[0]:
        raise TrtspecError(f"{ckpt.path}: '{prefix}weights_scaling_factor' has shape {list(s.shape)}, expected "
                           f"[{q.shape[0]}, {q.shape[1] // scheme.group_size}] (group_size {scheme.group_size})")
    pname = prefix + "prequant_scaling_factor"
    pre = load_float(ckpt, pname, dtype) if pname in ckpt else None
    return Linear((q.float() * s.repeat_interleave(scheme.group_size, dim=1)).to(dtype), b, pre)


def load_gated_pair(ckpt: TrtllmCheckpoint, prefix: str, scheme: QuantScheme, dtype: torch.dtype
                    ) -> tuple[Linear, Linear]:
    """(mlp.fc, mlp.gate) under `prefix`. With FP8, TRT-LLM's fuse_gate_mlp requantizes both into
    one FP8 weight: dequantize each with its own scale, divide by the larger scale, cast to FP8;
    the fused activation scale is the larger one too."""
    fc, gate = prefix + "mlp.fc.", prefix + "mlp.gate."
    if scheme.quant_algo != "FP8" or not (scheme.quantizes(fc[:-1]) and scheme.quantizes(gate[:-1])):
        return load_linear(ckpt, fc, scheme, dtype), load_linear(ckpt, gate, scheme, dtype)
    (w_fc, s_fc, a_fc), (w_g, s_g, a_g) = _fp8_raw(ckpt, fc), _fp8_raw(ckpt, gate)
    s, a = torch.maximum(s_fc, s_g), torch.maximum(a_fc, a_g)
    requant = [(w.float() * sw / s).to(torch.float8_e4m3fn) for w, sw in ((w_fc, s_fc), (w_g, s_g))]
    biases = [load_float(ckpt, p + "bias", dtype) if p + "bias" in ckpt else None for p in (fc, gate)]
    return tuple(_fp8_linear(w, s, a, bb, model_dtype(ckpt), dtype) for w, bb in zip(requant, biases))


def load_kv_quant(ckpt: TrtllmCheckpoint, attention: str, scheme: QuantScheme) -> KVQuant | None:
    """KV-cache scales of the attention module `attention` ('...attention.'), when the KV cache is
    quantized. The reciprocal is what build adds when missing (`preprocess_weights`)."""
    if scheme.kv_cache_quant_algo is None:
        return None
    kv = scheme.kv_cache_quant_algo
    s = _raw(ckpt, attention + "kv_cache_scaling_factor", f"kv_cache_quant_algo={kv}").float().reshape(1)
    rname = attention + "kv_cache_rcp_scaling_factor"
    rcp = ckpt.tensor(rname).float().reshape(1) if rname in ckpt else torch.reciprocal(s)
    return KVQuant(kv, s, rcp)
