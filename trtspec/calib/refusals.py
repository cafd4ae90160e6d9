"""Requests refused before any work starts, each with the reason and what to do instead.

Format names (unknown, SM100-only) are refused in formats.py, AWQ group sizes against the
model's shapes in checkpoints/quant.check_group_size; here are the combinations with a
speculative mode that TensorRT-LLM 1.2 cannot build or run (trtllm.md §3.6, §7.2, §9.5, §9.6),
and the model dtypes a quantized checkpoint cannot have.
"""

from __future__ import annotations

from pathlib import Path

from ..checkpoints.convert import resolve_dtype
from ..checkpoints.scheme import QuantScheme
from ..errors import TrtspecError

ISSUE_SQ_EAGLE = "https://github.com/NVIDIA/TensorRT-LLM/issues/3207"


def check_request(layout: QuantScheme, speculative: str | None) -> None:
    """`speculative`: None (a plain target), "eagle" or "draft-target"."""
    if speculative and layout.kv_cache_quant_algo == "INT8":
        engine = "EAGLE forces paged context FMHA" if speculative == "eagle" else \
            "draft-target engines need paged context FMHA for KV-cache reuse"
        raise TrtspecError(f"quantization.kv_cache: int8 with {speculative}: an INT8 KV cache disables paged context "
                           f"FMHA in trtllm-build, and {engine}; use quantization.kv_cache fp8 (or no KV "
                           "quantization)")
    if speculative == "eagle" and layout.quant_algo == "W8A8_SQ_PER_CHANNEL":
        raise TrtspecError("quantization.format: int8_sq with an EAGLE head: TensorRT-LLM's EAGLE path crashes "
                           f"loading SmoothQuant weights ({ISSUE_SQ_EAGLE}); use quantization.format fp8 (H100) or "
                           "w8a16")


def quant_dtype(dtype: str, hf_dir: Path) -> str:
    """The model dtype of a quantized checkpoint: float16 or bfloat16. TRT-LLM's quantized GEMMs
    and its weight-only kernels take half-precision activations; ModelOpt's export forces float16
    for anything else, and TRT-LLM's quantize example maps a float32 source to float16 under
    `dtype auto` (trtllm.md §6.1), which is what "auto" does here too."""
    resolved = resolve_dtype(dtype, hf_dir)
    if resolved != "float32":
        return resolved
    if dtype == "auto":
        return "float16"
    raise TrtspecError("convert.dtype: float32: quantized TensorRT-LLM checkpoints run their unquantized parts in "
                       "float16 or bfloat16; use convert.dtype float16, bfloat16 or auto")
