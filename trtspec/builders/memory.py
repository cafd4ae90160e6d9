"""Will the planned engines fit on the GPU, and how many KV-cache tokens do they leave?

Per GPU (rank 0 of each engine; with TP every rank holds about the same share; with pipeline parallelism
a rank holds its stage's layers, the first stage the embedding, the last the final norm, lm_head and any
EAGLE head: upstream.trtllm pp_layers; the per-stage numbers are checkpoint_weight_bytes and
kv_bytes_per_token of a `stage`):

  weights      parameters from config.json x bytes per weight of the quant format (weight_bits: the
               group-wise formats' scales and zeros included); embeddings stay in the model dtype,
               lm_head too unless exclude_modules lets it be quantized (reference §3.3); EAGLE
               engines hold num_eagle_layers copies of the head (§4.3). WeightCounter is the rule,
               shared with the tuner's drafter budget (tuning/choose.py).
  activations  max_num_tokens x hidden_size x ACTIVATION_FACTOR elements in the model dtype (TensorRT
               reuses activation memory across layers, so one layer's live tensors bound it), plus the
               float32 logits of the tokens that reach lm_head.
  overhead     CUDA context, cuBLAS/plugin workspaces, runtime buffers: RUNTIME_OVERHEAD_BYTES.
  KV cache     the runtime gives the KV pool KV_CACHE_FREE_GPU_MEMORY_FRACTION of what is left; a
               token costs 2 x the stage's layers x kv_heads_per_rank x head_size x kv bytes (EAGLE adds its
               drafter layers, which share the pool; models/eagle/model.py). A draft-target pair on
               one GPU shares the pool, and every request lives in both engines.
  per sequence the engine's max_seq_len, or with a sliding window below it (Mistral-7B-v0.1's 4096,
               which the served config sets) what TensorRT-LLM keeps of it: the window plus a block,
               or the longest prompt while its context runs (upstream.trtllm kv_tokens_per_sequence).

It is an estimate (±10% on the weights-dominated cases it was checked against), meant to catch
plans that cannot fit before a build is attempted, not to replace the runtime's own accounting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ..checkpoints.trtllm_ckpt import TrtllmCheckpoint
from ..upstream import trtllm
from .engine import EngineBuild

# Live per-token activations of one Llama-style layer, in hidden-size units: fused gate/up output
# (2 x intermediate ~ 7H), SwiGLU output (~3.5H), fused qkv (~1.5H), three hidden-size buffers
# (residual, normed input, attention/MLP output) = ~15H, rounded up to 16.
ACTIVATION_FACTOR = 16
RUNTIME_OVERHEAD_BYTES = 2 * 1024**3
GIB = 1024**3


@dataclass
class EngineMemory:
    name: str
    weights_bytes: int
    activation_bytes: int
    kv_bytes_per_token: int
    kv_tokens_per_sequence: int   # upstream.trtllm.kv_tokens_per_sequence: max_seq_len, or less with a window
    kv_tokens_at_limits: int      # max_batch_size x kv_tokens_per_sequence
    kv_bytes_at_limits: int


@dataclass
class MemoryEstimate:
    gpu: str
    gpu_memory_bytes: int
    engines: list[EngineMemory]
    runtime_overhead_bytes: int
    free_after_load_bytes: int    # what the KV pool is carved from (negative: does not load)
    kv_cache_fraction: float
    kv_pool_bytes: int
    kv_token_capacity: int        # tokens the pool holds (per engine; a pair's requests need both)
    kv_tokens_at_limits: int
    full_length_sequences: int    # how many sequences at the engine max_seq_len (or its window) fit at once
    fits: bool                    # weights + activations + overhead fit at all
    kv_fits_at_limits: bool       # max_batch_size such sequences fit in the pool
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def weights_bytes(self) -> int:
        return sum(e.weights_bytes for e in self.engines)

    @property
    def activation_bytes(self) -> int:
        return sum(e.activation_bytes for e in self.engines)

    @property
    def kv_bytes_per_token(self) -> int:
        return sum(e.kv_bytes_per_token for e in self.engines)


# Group-wise formats (WeightOnlyGroupwiseQuantLinear): bits of the packed weight itself.
GROUPWISE_BITS = {"W4A16_AWQ": 4, "W4A16_GPTQ": 4, "W4A8_AWQ": 4, "W8A16_GPTQ": 8}


def weight_bits(quant_algo: str | None, dtype_bits: int, group_size: int, has_zero_point: bool = False) -> float:
    """Bits per quantized-linear weight as TensorRT-LLM holds it, group scales included.

    The group-wise formats (GROUPWISE_BITS; quantization/layers.py WeightOnlyGroupwiseQuantLinear, 1.x)
    keep a model-dtype weights_scaling_factor [in / group_size, out] per linear, and with
    has_zero_point a zero of the same shape. W4A16 / W8A16 are per-channel (WeightOnlyQuantLinear:
    per_channel_scale [out]); that, FP8's and SmoothQuant's per-tensor / per-channel scales and
    AWQ's prequant_scaling_factor [in] are under 1/in_features of the weight and left out."""
    if quant_algo in (None, "NO_QUANT"):
        return dtype_bits
    if quant_algo in GROUPWISE_BITS:
        return GROUPWISE_BITS[quant_algo] + dtype_bits / group_size * (2 if has_zero_point else 1)
    if quant_algo == "W4A16":
        return 4
    return 8  # FP8, W8A16, W8A8_SQ_*


class WeightCounter:
    """Bytes of one network's weights on one rank (tp rank 0 of pipeline stage `stage` of `pp`): the one
    rule the build estimate, the Triton memory plan and the tuner's drafter budget (tuning/choose.py)
    count with. `spec` is a DecoderSpec or anything with its sizes (the cost model's ModelShape);
    `linear_bytes(module)` says what a weight of that linear module takes."""

    def __init__(self, dtype_bytes: float, tp: int, linear_bytes: Callable[[str], float], pp: int = 1,
                 stage: int = 0):
        self.dtype_bytes, self.tp, self.linear_bytes = dtype_bytes, tp, linear_bytes
        self.pp, self.stage = pp, stage

    @classmethod
    def of_checkpoint(cls, ckpt: TrtllmCheckpoint, stage: int = 0) -> "WeightCounter":
        scheme, dtype_bytes = ckpt.quant, trtllm.DTYPE_BYTES[ckpt.dtype]
        qbytes = weight_bits(scheme.quant_algo, dtype_bytes * 8, scheme.group_size, bool(scheme.has_zero_point)) / 8
        return cls(dtype_bytes, ckpt.tp, lambda m: qbytes if scheme.quantizes(m) else dtype_bytes, ckpt.pp, stage)

    @property
    def last_stage(self) -> bool:
        return self.stage == self.pp - 1

    def linear(self, module: str, params: float) -> float:
        return params * self.linear_bytes(module)

    def decoder_layers(self, spec, prefix: str, layers: range | None = None) -> float:
        """`layers` (default: all of them) of the decoder."""
        tp, h, hd = self.tp, spec.hidden_size, spec.head_size
        q_heads, kv_heads = math.ceil(spec.num_heads / tp), trtllm.kv_heads_per_rank(spec.num_kv_heads, tp)
        qkv_out = (q_heads + 2 * kv_heads) * hd
        total = 0.0
        for i in range(spec.num_layers) if layers is None else layers:
            p = f"{prefix}layers.{i}."
            total += self.linear(p + "attention.qkv", qkv_out * h)
            total += self.linear(p + "attention.dense", h * q_heads * hd)
            for m in ("mlp.fc", "mlp.gate", "mlp.proj"):
                total += self.linear(p + m, h * math.ceil(spec.intermediate_size / tp))
            small = 2 * h + (qkv_out if spec.attn_bias else 0) + (2 * hd if spec.qk_norm else 0)
            total += small * self.dtype_bytes
        return total

    def vocab(self, spec, parallel: bool) -> int:
        rows = math.ceil(spec.vocab_size / self.tp) if parallel else spec.vocab_size
        return rows * spec.hidden_size

    def decoder(self, spec, prefix: str, parallel_embedding: bool, embedding: bool = True) -> float:
        """A decoder's layers of this stage, its embedding on the first stage (model dtype; none when it
        uses another network's), its vocab-parallel lm_head and its final norm on the last."""
        total = self.decoder_layers(spec, prefix, trtllm.pp_layers(spec.num_layers, self.pp, self.stage))
        if self.last_stage:  # summed in the pp = 1 order: layers, norm, embedding, lm_head
            total += spec.hidden_size * self.dtype_bytes
        if embedding and self.stage == 0:
            total += self.vocab(spec, parallel_embedding) * self.dtype_bytes
        return total + (self.linear("lm_head", self.vocab(spec, True)) if self.last_stage else 0)


def checkpoint_weight_bytes(ckpt: TrtllmCheckpoint, stage: int = 0) -> int:
    """Weights on tp rank 0 of pipeline stage `stage` (the EAGLE head on the last stage)."""
    c = WeightCounter.of_checkpoint(ckpt, stage)
    spec, cfg = ckpt.spec, ckpt.config
    total = c.decoder(spec, "transformer.", bool(cfg.get("use_parallel_embedding")))
    if ckpt.eagle_spec is not None and c.last_stage:
        e, net_cfg = ckpt.eagle_spec, cfg.get("eagle_net_config") or {}
        one = c.decoder_layers(e, "eagle_nets.0.drafter.")
        one += c.vocab(e, bool(net_cfg.get("use_parallel_embedding"))) * c.dtype_bytes
        one += c.linear("eagle_nets.0.drafter.fc", 2 * e.hidden_size * math.ceil(e.hidden_size / c.tp))
        one += c.linear("eagle_nets.0.lm_head", c.vocab(e, True))
        total += one * int(cfg.get("num_eagle_layers", trtllm.EAGLE_CONFIG_DEFAULT_NUM_LAYERS))
    return int(total)


def kv_bytes_per_token(ckpt: TrtllmCheckpoint, stage: int = 0) -> int:
    """KV bytes per token on a rank of pipeline stage `stage`: its layers (the EAGLE drafter's on the last)."""
    kv = ckpt.kv_cache_quant_algo
    elem = 1 if kv in ("FP8", "INT8") else trtllm.DTYPE_BYTES[ckpt.dtype]
    spec = ckpt.spec
    layers = len(trtllm.pp_layers(spec.num_layers, ckpt.pp, stage))
    if ckpt.eagle_spec is not None and stage == ckpt.pp - 1:
        layers += ckpt.eagle_spec.num_layers
    return 2 * layers * trtllm.kv_heads_per_rank(spec.num_kv_heads, ckpt.tp) * spec.head_size * elem


def activation_bytes(ckpt: TrtllmCheckpoint, max_batch_size: int, max_draft_len: int, max_num_tokens: int) -> int:
    """Activations of one engine at its build limits, plus the float32 logits reaching lm_head."""
    dtype_bytes = trtllm.DTYPE_BYTES[ckpt.dtype]
    logits_bytes = trtllm.DTYPE_BYTES[ckpt.config.get("logits_dtype") or "float32"]
    logit_tokens = max_batch_size * (max_draft_len + 1)
    return (max_num_tokens * ckpt.spec.hidden_size * ACTIVATION_FACTOR * dtype_bytes
            + logit_tokens * ckpt.spec.vocab_size * logits_bytes)


def estimate_memory(builds: list[EngineBuild], ckpts: dict[str, TrtllmCheckpoint], gpu: str) -> MemoryEstimate:
    """The estimate for rank 0 of every engine of the plan sharing one GPU of kind `gpu`."""
    total = trtllm.GPU_MEMORY_MIB[gpu] * 1024**2
    engines = []
    for b in builds:
        ck = ckpts[b.name]
        per_tok = kv_bytes_per_token(ck)
        per_seq = trtllm.kv_tokens_per_sequence(b.engine_max_seq_len, ck.spec.sliding_window, b.max_input_len)
        tokens = b.max_batch_size * per_seq
        activations = activation_bytes(ck, b.max_batch_size, b.max_draft_len, b.max_num_tokens)
        engines.append(EngineMemory(b.name, checkpoint_weight_bytes(ck), activations, per_tok, per_seq, tokens,
                                    tokens * per_tok))
    free = total - sum(e.weights_bytes + e.activation_bytes for e in engines) - RUNTIME_OVERHEAD_BYTES
    frac = trtllm.KV_CACHE_FREE_GPU_MEMORY_FRACTION
    pool = max(0, int(free * frac))
    per_token = sum(e.kv_bytes_per_token for e in engines)
    block = trtllm.TOKENS_PER_BLOCK
    capacity = (pool // (per_token * block)) * block if per_token else 0
    at_limits = max(e.kv_tokens_at_limits for e in engines)
    max_seq = max(e.kv_tokens_per_sequence for e in engines)
    est = MemoryEstimate(
        gpu=gpu, gpu_memory_bytes=total, engines=engines, runtime_overhead_bytes=RUNTIME_OVERHEAD_BYTES,
        free_after_load_bytes=free, kv_cache_fraction=frac, kv_pool_bytes=pool, kv_token_capacity=capacity,
        kv_tokens_at_limits=at_limits, full_length_sequences=capacity // max_seq, fits=free > 0,
        kv_fits_at_limits=capacity >= at_limits)
    name = trtllm.GPU_NAMES[gpu]
    if not est.fits:
        est.warnings.append(
            f"memory: the engines need {_gib(total - free)} GiB (weights {_gib(est.weights_bytes)}, activations "
            f"{_gib(est.activation_bytes)}, overhead {_gib(RUNTIME_OVERHEAD_BYTES)}) but one {name} has "
            f"{_gib(total)} GiB; use more tensor parallelism, stronger quantization, or lower --max-num-tokens")
    elif not est.kv_fits_at_limits:
        est.warnings.append(
            f"memory: the KV cache holds about {capacity} tokens, fewer than max_batch_size x {max_seq} tokens per "
            f"sequence (max_seq_len, or what a sliding window keeps) = {at_limits}; at most "
            f"{est.full_length_sequences} full-length sequences run at once (lower --max-batch-size or "
            "--max-seq-len, or quantize the KV cache)")
    if len(engines) > 1:
        est.notes.append("memory: both engines share GPU 0; each sizes its KV pool from the memory free when it "
                            "loads, so `trtspec triton` writes each a token cap and a fraction that reaches it when "
                            "loaded last (triton_repo/memory.py)")
    return est


def _gib(n: int) -> str:
    return f"{n / GIB:.1f}"
