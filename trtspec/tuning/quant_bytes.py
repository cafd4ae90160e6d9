"""Bytes per weight, per lm_head weight and per KV element, and the GEMM dtype, of a TRT-LLM
checkpoint's `quantization` block: what the step-time model (trtspec.tuning.cost) reads per network.

Quantization (trtllm.md §3): bytes per linear weight as builders.memory.weight_bits counts them
(fp32 4, fp16/bf16 2, FP8 / INT8 (W8A8 SmoothQuant, W8A16) 1, per-channel INT4 (W4A16) 0.5, the
group-wise formats (W4A16_AWQ, W4A16_GPTQ, W4A8_AWQ, W8A16_GPTQ) plus one model-dtype scale, and
with has_zero_point one zero, per `group_size` weights); the GEMMs run in FP8 (FP8, W4A8_AWQ),
INT8 (W8A8_SQ_*) or the model dtype (weight-only).
`lm_head` stays in the model dtype unless `exclude_modules` is an explicit list that does not
match it (TRT-LLM's default excludes `*lm_head`). KV cache: 1 byte with kv_cache_quant_algo FP8
or INT8, else the model dtype.
"""

from __future__ import annotations

from ..builders.memory import weight_bits
from ..checkpoints.scheme import QuantScheme
from ..errors import TrtspecError
from ..upstream import trtllm

DTYPE_COMPUTE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def quant_bytes(quant: dict | None, dtype: str, lm_head_name: str, where: str) -> dict:
    """bytes per weight / lm_head weight / KV element and the GEMM dtype from a `quantization` block."""
    if dtype not in trtllm.DTYPE_BYTES:
        raise TrtspecError(f"{where}: field 'dtype' is {dtype!r}; expected one of {', '.join(trtllm.DTYPE_BYTES)}")
    q = QuantScheme.from_block(quant, where)
    algo, kv = q.quant_algo, q.kv_cache_quant_algo
    base, compute = trtllm.DTYPE_BYTES[dtype], DTYPE_COMPUTE[dtype]
    if algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_BLOCK_SCALES", "W4A8_AWQ"):
        compute = "fp8"
    elif str(algo).startswith(trtllm.SMOOTHQUANT_PREFIX):
        compute = "int8"
    elif algo not in (None, "NO_QUANT", "W8A16", "W8A16_GPTQ", "W4A16", "W4A16_AWQ", "W4A16_GPTQ"):
        raise TrtspecError(f"{where}: quantization.quant_algo {algo!r} has no H100/H200 cost model (expected "
                           "null, FP8, W8A8_SQ_*, W8A16, W4A16, W4A16_AWQ, W4A16_GPTQ or W4A8_AWQ)")
    wb = weight_bits(algo, base * 8, q.group_size, bool(q.has_zero_point)) / 8
    lm_quantized = algo != "NO_QUANT" and q.quantizes(lm_head_name)
    if kv in (None, "NO_QUANT"):
        kvb = base
    elif kv in ("FP8", "INT8"):
        kvb = 1.0
    else:
        raise TrtspecError(f"{where}: quantization.kv_cache_quant_algo {kv!r}: expected null, FP8 or INT8")
    return {"weight_bytes": wb, "lm_head_bytes": wb if lm_quantized else base, "kv_bytes": kvb,
            "compute_dtype": compute, "quant_algo": algo, "kv_cache_quant_algo": kv}
