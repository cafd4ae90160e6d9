"""The GPU presets of the cost model (`tune.cost`: h100, h200, cpu): nominal peaks and efficiencies.

Light (pydantic only), so the `tune` options and `trtspec tune --help` list the presets from here
without importing the cost model (checkpoints, torch); trtspec.tuning.cost uses them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import TrtspecError

ComputeDtype = Literal["fp32", "fp16", "bf16", "fp8", "int8"]


class GpuSpec(BaseModel):
    """One GPU, its nominal peaks and the four efficiency/overhead numbers a fit adjusts."""
    model_config = ConfigDict(extra="forbid")

    name: str
    hbm_bandwidth_gbs: float = Field(gt=0, description="HBM bandwidth, GB/s (1e9 bytes/s)")
    peak_tflops_fp32: float = Field(gt=0, description="dense TF32 tensor-core peak, TFLOP/s")
    peak_tflops_fp16: float = Field(gt=0, description="dense FP16 tensor-core peak, TFLOP/s")
    peak_tflops_bf16: float = Field(gt=0, description="dense BF16 tensor-core peak, TFLOP/s")
    peak_tflops_fp8: float = Field(gt=0, description="dense FP8 tensor-core peak, TFLOP/s")
    peak_tflops_int8: float = Field(gt=0, description="dense INT8 tensor-core peak, TOP/s")
    bandwidth_efficiency: float = Field(
        0.80, gt=0, description="achieved / nominal HBM bandwidth in weight-streaming GEMMs. Default "
        "0.80: an assumption consistent with anchor A1 (landscape.md §4.1: SGLang, Llama-3.1-8B "
        "bf16, H100, 158.3 tok/s = 6.3 ms per token vs 16.1 GB / 3.35 TB/s = 4.8 ms at 100%)")
    compute_efficiency: float = Field(
        0.60, gt=0, description="achieved / nominal tensor-core throughput of large GEMMs (typical "
        "large-GEMM MFU on Hopper is 60-75%); an assumption, fit it to measurements")
    forward_overhead_s: float = Field(
        3.0e-4, ge=0, description="fixed time per engine forward (target verify, each draft-model "
        "step): launch, scheduling, sampling. 0.3 ms closes the gap to anchor A1 with 0.80 above")
    eagle_level_overhead_s: float = Field(
        3.0e-5, ge=0, description="fixed time per EAGLE drafter level; the levels run inside the "
        "target's engine step (TRT-LLM EAGLE plugins), so no separate launch. An assumption")
    allreduce_latency_s: float = Field(
        1.0e-5, ge=0, description="one small all-reduce over NVLink (2 per layer when tp > 1). An "
        "assumption (NCCL small-message latency on NVLink is ~5-15 us)")
    memory_compute_overlap: bool = Field(
        True, description="True: a forward takes max(memory time, compute time), a GPU's roofline (HBM "
        "streaming and tensor cores overlap); False: their sum (a CPU at decode sizes, the module docstring)")

    def peak_tflops(self, dtype: ComputeDtype) -> float:
        return getattr(self, f"peak_tflops_{dtype}")


# Nominal numbers: NVIDIA H100 Tensor Core GPU datasheet (H100 SXM5: 3.35 TB/s HBM3; dense
# TF32 494.7, FP16/BF16 989.4, FP8 1978.9 TFLOPS, INT8 1978.9 TOPS; the datasheet's headline
# figures are 2x these, with sparsity) and the H200 datasheet (H200 SXM: 4.8 TB/s HBM3e, the same
# tensor cores as H100 SXM). "cpu" is only a starting point for fitting a table timed on a CPU
# (`trtspec.tuning.measure`); its nominal numbers are placeholders a fit rescales.
PRESETS: dict[str, GpuSpec] = {
    "h100": GpuSpec(name="NVIDIA H100 SXM5 80GB", hbm_bandwidth_gbs=3350.0, peak_tflops_fp32=494.7,
                    peak_tflops_fp16=989.4, peak_tflops_bf16=989.4, peak_tflops_fp8=1978.9,
                    peak_tflops_int8=1978.9),
    "h200": GpuSpec(name="NVIDIA H200 SXM 141GB", hbm_bandwidth_gbs=4800.0, peak_tflops_fp32=494.7,
                    peak_tflops_fp16=989.4, peak_tflops_bf16=989.4, peak_tflops_fp8=1978.9,
                    peak_tflops_int8=1978.9),
    "cpu": GpuSpec(name="CPU (placeholder peaks, fit before use)", hbm_bandwidth_gbs=20.0,
                   peak_tflops_fp32=0.2, peak_tflops_fp16=0.2, peak_tflops_bf16=0.2, peak_tflops_fp8=0.2,
                   peak_tflops_int8=0.2, bandwidth_efficiency=1.0, compute_efficiency=1.0,
                   forward_overhead_s=1e-3, eagle_level_overhead_s=1e-3, allreduce_latency_s=0.0,
                   memory_compute_overlap=False),
}


def gpu_preset(name: str) -> GpuSpec:
    if name not in PRESETS:
        raise TrtspecError(f"tune.cost: unknown GPU {name!r} (expected one of {', '.join(PRESETS)} or a cost table file)")
    return PRESETS[name].model_copy()
