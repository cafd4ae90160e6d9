"""The GPU presets of the cost model (`tune.cost`: h100, h200, cpu): nominal peaks and efficiencies,
and the serving framework's share of a speculative step (FRAMEWORKS: trtllm, sglang).

Light (pydantic only), so the `tune` options and `trtspec tune --help` list the presets from here
without importing the cost model (checkpoints, torch); trtspec.tuning.cost uses them. Where each
number comes from (a datasheet, a count of kernels, a fit to named published rows) is in the field
descriptions below and in trtspec.tuning.cost's docstring; scripts/bench_published_setups.py redoes
the fits and checks them against the rows that were not fitted.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import TrtspecError
from ..upstream import published, trtllm

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
        3.0e-5, ge=0, description="fixed time per EAGLE drafter level: the level's kernels (a decoder "
        "layer, fc/norms, lm_head, the top-k selection) x kernel_latency_s. The levels run inside the "
        "target's CUDA graph (TRT-LLM) or one draft graph (SGLang), so no separate launch")
    allreduce_latency_s: float = Field(
        1.0e-5, ge=0, description="one small all-reduce / all-gather over NVLink: 2 per layer, and 1 "
        "lm_head gather per EAGLE drafter level, when tp > 1. An assumption (one-shot custom all-reduce "
        "and NCCL's LL protocol take ~5-15 us for kilobyte messages on NVLink)")
    kernel_latency_s: float = Field(
        0.0, ge=0, description="fixed time of one small kernel in a CUDA-graph replay (launch gap plus the "
        "ramp/tail of a kernel too small to fill the GPU); prices the kernels of a tree verify "
        "(tree_verify_kernels) and, through FRAMEWORKS, of a drafter level (eagle_level_overhead_s). An "
        "assumption for h100/h200 (2.5 us: graph node-to-node gaps are ~1-2 us); 0 elsewhere")
    tree_verify_kernels: int = Field(
        0, ge=0, description="kernels a speculative verify runs beyond a plain forward of as many tokens: "
        "the spec-dec mask (build, upload), the acceptance walk, accepted-length bookkeeping, KV/position "
        "rewind. A count (FRAMEWORKS); 0 = a plain forward")
    eagle_step_overhead_s: float = Field(
        0.0, ge=0, description="host time per EAGLE step not hidden behind the GPU (Python bookkeeping, "
        "the CPU sync on the accepted lengths, separate graph replays for draft / verify / draft-extend). "
        "TRT-LLM one-model drafts inside the target's graph: 0; SGLang: fitted (FRAMEWORKS)")
    logits_passes: int = Field(
        0, ge=0, description="passes over a drafter level's fp32 logits (batch x tokens x draft vocab x 4 "
        "bytes) beyond the lm_head GEMM's write: softmax and top-k read them. h100/h200: 2; 0 elsewhere")
    eagle_fc_replicated: bool = Field(
        False, description="the EAGLE-3 fc (aux hidden states -> H) is replicated on every TP rank instead "
        "of sharded (SGLang, sglang PR 4716: 'it doesn't get the benefits of TP'): its bytes are read in "
        "full by each rank")
    eagle3_fc_first_level_only: bool = Field(
        False, description="price an EAGLE-3 head's fc on the first drafter level only, as TRT-LLM and SGLang "
        "run it (upstream.trtllm EAGLE3_FC_FIRST_PASS); False (the cpu preset, unchanged) reads it every level")
    framework: str = Field("trtllm", description="the serving framework whose step costs these are (FRAMEWORKS)")
    step_tokens_s: dict[int, float] = Field(
        default_factory=dict, description="measured on the deployment (tune --calibrate): seconds a target "
        "decode/verify step of n tokens per sequence takes beyond the model above, per n >= 2 (may be "
        "negative). Why: a CPU's GEMM kernels are not monotonic in the row count (this project's 2-core box: "
        "a 4-token forward 79 ms, a 2-token one 96 ms) and a server's speculative path has per-step work of "
        "its own; neither has a roofline term. Empty: no correction")
    memory_compute_overlap: bool = Field(
        True, description="True: a forward takes max(memory time, compute time), a GPU's roofline (HBM "
        "streaming and tensor cores overlap); False: their sum (a CPU at decode sizes, the module docstring)")

    def peak_tflops(self, dtype: ComputeDtype) -> float:
        return getattr(self, f"peak_tflops_{dtype}")


# The kernels of one EAGLE drafter level, counted from the work a level does in either framework
# (each op one kernel in a CUDA-graph replay; norms fused with the residual add as both do):
# a Llama decoder layer is 9 (RMSNorm, QKV GEMM, RoPE + KV write, attention, O GEMM, add + RMSNorm,
# gate/up GEMM, SiLU x mul, down GEMM); the head around it 5 (token embedding, fc, input norm,
# final norm, lm_head GEMM); picking the level's tokens: TRT-LLM's one-model chain 4 (argmax, the
# EAGLE-3 d2t offset, the draft-token write, the attention metadata step), SGLang's tree 8 (softmax,
# top-k, score product, top-k over topk^2 candidates, three gathers, a concat: select_top_k_tokens).
# A verify adds 6 kernels to a plain forward in both (spec-dec mask build/upload, the acceptance
# walk, accepted lengths, gathers of the accepted tokens/hidden states, KV rewind).
KERNEL_LATENCY_S = 2.5e-6
LAYER_KERNELS, EAGLE_HEAD_KERNELS, TREE_VERIFY_KERNELS = 9, 5, 6
SELECT_KERNELS = {"trtllm": 4, "sglang": 8}


def _level_overhead(framework: str) -> float:
    return (LAYER_KERNELS + EAGLE_HEAD_KERNELS + SELECT_KERNELS[framework]) * KERNEL_LATENCY_S


# Fitted: SGLang's eagle_step_overhead_s, by least squares on the relative error of the step time,
# to the rows of SGLANG_FIT_ROWS (scripts/bench_published_setups.py redoes the fit and
# tests/tuning/test_eagle_cost.py checks that this constant is what it gives). The plain-decode
# scale (bandwidth_efficiency, forward_overhead_s) is kept as it was: the script prints a refit to
# other rows' baselines and what it would change.
SGLANG_FIT_ROWS = ("sglang PR 4247 EAGLE-3 num_steps 8", "sglang PR 4247 EAGLE-2 num_steps 8")
FITTED_SGLANG_STEP_OVERHEAD_S = 5.450e-3

# The serving framework's share of a speculative step, as overrides of a GPU preset. trtllm: the
# PyTorch backend's one-model EAGLE-3 (drafting loop inside the target's forward and CUDA graph,
# argmax and acceptance on the GPU; upstream.published EAGLE3_ONE_MODEL_RECIPE_PR5146) and the engine's
# EAGLE plugins alike (the drafter levels run inside the engine step): no host time beyond the
# forward's own, as long as the overlap scheduler hides it (OVERLAP_SCHEDULER_DEFAULT). The sources
# give nothing that tells the two TRT-LLM paths apart, so they share one entry. sglang: EAGLEWorker
# runs draft (one graph for all steps), verify and draft-extend as separate replays with the
# accepted lengths read on the host in between, with the overlap scheduler off for EAGLE
# (upstream.published SGLANG_EAGLE_OVERLAP_SCHEDULER): that host time is eagle_step_overhead_s, and it
# replicates the EAGLE-3 fc on every TP rank (SGLANG_EAGLE3_FC_SHARDED).
FRAMEWORKS: dict[str, dict] = {
    "trtllm": dict(framework="trtllm", kernel_latency_s=KERNEL_LATENCY_S, tree_verify_kernels=TREE_VERIFY_KERNELS,
                   eagle_level_overhead_s=_level_overhead("trtllm"), eagle_step_overhead_s=0.0, logits_passes=2,
                   eagle_fc_replicated=False, eagle3_fc_first_level_only=trtllm.EAGLE3_FC_FIRST_PASS),
    "sglang": dict(framework="sglang", kernel_latency_s=KERNEL_LATENCY_S, tree_verify_kernels=TREE_VERIFY_KERNELS,
                   eagle_level_overhead_s=_level_overhead("sglang"),
                   eagle_step_overhead_s=FITTED_SGLANG_STEP_OVERHEAD_S, logits_passes=2,
                   eagle_fc_replicated=not published.SGLANG_EAGLE3_FC_SHARDED,
                   eagle3_fc_first_level_only=trtllm.EAGLE3_FC_FIRST_PASS),
}

# Nominal numbers: NVIDIA H100 Tensor Core GPU datasheet (H100 SXM5: 3.35 TB/s HBM3; dense
# TF32 494.7, FP16/BF16 989.4, FP8 1978.9 TFLOPS, INT8 1978.9 TOPS; the datasheet's headline
# figures are 2x these, with sparsity) and the H200 datasheet (H200 SXM: 4.8 TB/s HBM3e, the same
# tensor cores as H100 SXM). The h100/h200 presets are TRT-LLM's (the framework trtspec deploys to).
# "cpu" is only a starting point for fitting a table timed on a CPU (`trtspec.tuning.measure`);
# its nominal numbers are placeholders a fit rescales, and it has no speculative-step extras.
PRESETS: dict[str, GpuSpec] = {
    "h100": GpuSpec(name="NVIDIA H100 SXM5 80GB", hbm_bandwidth_gbs=3350.0, peak_tflops_fp32=494.7,
                    peak_tflops_fp16=989.4, peak_tflops_bf16=989.4, peak_tflops_fp8=1978.9,
                    peak_tflops_int8=1978.9, **FRAMEWORKS["trtllm"]),
    "h200": GpuSpec(name="NVIDIA H200 SXM 141GB", hbm_bandwidth_gbs=4800.0, peak_tflops_fp32=494.7,
                    peak_tflops_fp16=989.4, peak_tflops_bf16=989.4, peak_tflops_fp8=1978.9,
                    peak_tflops_int8=1978.9, **FRAMEWORKS["trtllm"]),
    "cpu": GpuSpec(name="CPU (placeholder peaks, fit before use)", hbm_bandwidth_gbs=20.0,
                   peak_tflops_fp32=0.2, peak_tflops_fp16=0.2, peak_tflops_bf16=0.2, peak_tflops_fp8=0.2,
                   peak_tflops_int8=0.2, bandwidth_efficiency=1.0, compute_efficiency=1.0,
                   forward_overhead_s=1e-3, eagle_level_overhead_s=1e-3, allreduce_latency_s=0.0,
                   memory_compute_overlap=False, framework="trtspec"),
}


def with_framework(gpu: GpuSpec, framework: str) -> GpuSpec:
    """`gpu` with the speculative-step costs of another serving framework (FRAMEWORKS)."""
    if framework not in FRAMEWORKS:
        raise TrtspecError(f"cost model: unknown framework {framework!r} (expected one of {', '.join(FRAMEWORKS)})")
    return gpu.model_copy(update=FRAMEWORKS[framework])


def gpu_preset(name: str) -> GpuSpec:
    if name not in PRESETS:
        raise TrtspecError(f"tune.cost: unknown GPU {name!r} (expected one of {', '.join(PRESETS)} or a cost table file)")
    return PRESETS[name].model_copy()
