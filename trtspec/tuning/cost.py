"""Step-time model: how long a target verify, a draft-model step or an EAGLE drafter level takes.

One engine forward over `num_tokens` new tokens per sequence, `batch` sequences, `context` tokens
already in each sequence's KV cache, on one GPU of a tp-way group:

    time = overhead + max(bytes / (HBM bandwidth * bandwidth_efficiency),
                          FLOPs / (tensor-core peak of the compute dtype * compute_efficiency))
           + 2 * num_layers * allreduce_latency            (tp > 1 only)

(the sum of the two terms instead of their max when `memory_compute_overlap` is False: the "cpu"
preset, see below)

    bytes = rank linear weights * bytes/weight + lm_head * its bytes/weight / tp
            + batch * (context + num_tokens) * rank KV bytes per token     (KV read + the new writes)
    FLOPs = 2 * batch * num_tokens * (rank linear weights + lm_head parameters / tp)
            + 4 * num_layers * batch * num_tokens * (context + (num_tokens + 1) / 2) * heads * head_size / tp
              (causal: new token i attends to the context and the i new tokens up to itself)

where a rank holds heads / tp query heads (tp must divide them, as upstream asserts) and
ceil(kv_heads / tp) KV heads (upstream.trtllm.kv_heads_per_rank): with fewer KV heads than ranks
each rank keeps a copy of one, its cache and its k/v projection (rank linear weights = linear / tp
+ those copies' k/v weights), so the KV bytes per rank stop shrinking at tp = kv_heads. And, for a
network with a sliding window W (Mistral-7B-v0.1: every layer attends the last 4096
positions; ModelShape.attention_window), context is min(context, W): a query reads at most W
cached positions, so past W the attention terms stay flat (upstream.trtllm SLIDING_WINDOW_CONFIG_KEY;
clamping the mean context, min(mean, W) >= mean(min(c, W)), errs toward the more expensive step).

Why a roofline: decode and verify steps are weight-streaming (memory-bound) at small batch and
become compute-bound only when batch * tokens reaches a few hundred; the crossover is what makes
long drafts pay off at concurrency 1 and lose at 64 (landscape.md §4.2 caveat 2). Ignored on
purpose: activation traffic, embedding lookups, norms/rotary, sampling, attention kernels' own
efficiency (all FLOPs run at the compute dtype's peak). The efficiencies and overheads absorb
them, and `fit_gpu` fits those four numbers to measured step times (a `CostTable`).

A CPU is not a roofline at decode sizes: one thread streaming a weight matrix does not hide the
arithmetic of a few extra tokens, so the time of a forward grows by a step per extra token from
the first one (measured on this project's 2-core box, a 12-layer fp32 model: 27, 35, 40, 54 ms for
1, 2, 3, 5 tokens). Its preset therefore adds the memory and compute terms: fitted to that table
the sum has about half the error of the max (11% vs 24% rms), and unlike the max it does not
predict that verifying K + 1 tokens costs no more than 1 token, which made the tuner pick
speculation where greedy was faster (scripts/bench_tuning_quality.py).

A speculative EAGLE step (CostModel.eagle_step) is more than its forwards (issue #16 item 4; the
numbers are trtspec.tuning.gpus FRAMEWORKS, each with its source there):

    step = sum over drafter levels of level(tokens of the level) + verify(1 + nodes) + eagle_step_overhead_s
    level = forward_time(drafter)                    its eagle_level_overhead_s = kernels of a level
                                                     (layer 9 + head 5 + token selection 4 or 8) x kernel_latency_s
            + logits_passes x batch x tokens x draft vocab x 4 bytes / bandwidth   (softmax, top-k of
              the fp32 logits: EAGLE-3's 32k draft vocabulary, EAGLE-1/2's full one)
            + allreduce_latency_s                    (tp > 1: the vocab-sharded lm_head's all-gather;
                                                      forward_time already has 2 all-reduces per layer)
            + fc bytes x (1 - 1/tp) / bandwidth      (eagle_fc_replicated: SGLang reads the whole fc per rank)
            EAGLE-3's fc only on the first level (ModelShape.fc_first_level_only, where the GPU's
            eagle3_fc_first_level_only says the framework runs it so), EAGLE-1/2's on every one
    verify = forward_time(target, 1 + nodes) + tree_verify_kernels x kernel_latency_s
             (the spec-dec mask, the acceptance walk, KV rewind; the tree's attention itself is the
             plain forward's: its FLOPs grow with the tokens and it reads the KV cache once per
             sequence, XQA spec-dec in TRT-LLM and flashinfer's custom-mask kernel in SGLang)

eagle_step_overhead_s is the host time a framework does not hide (SGLang: fitted, see gpus.py);
the "cpu" preset has all these extras at zero. A draft model's step is two engines' forwards, whose
host work sits in each forward's forward_overhead_s. What each kind of step runs is written once
(`Forward`/`Step`: baseline_forwards, draft_target_forwards, eagle_forwards): CostModel prices it
for the tuner, and trtspec.tuning.calibrate fits the same description to a deployment's requests,
so a calibrated model prices a step with exactly the terms it was fitted with.

Quantization: bytes per weight and KV element and the GEMM dtype (trtspec.tuning.quant_bytes).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..checkpoints.hf_unified import open_checkpoint
from ..checkpoints.sharding import check_tp
from ..errors import TrtspecError
from ..upstream import trtllm
from .gpus import ComputeDtype, GpuSpec
from .quant_bytes import quant_bytes


class ModelShape(BaseModel):
    """What the step-time model needs of one network: sizes, bytes per weight, compute dtype."""
    model_config = ConfigDict(extra="forbid")

    name: str
    role: Literal["target", "draft", "eagle"]
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    intermediate_size: int
    vocab_size: int
    extra_linear_params: int = Field(0, description="linear weights outside the layers (EAGLE fc: 2H x H)")
    fc_params: int = Field(0, description="of extra_linear_params, the EAGLE fc's (EAGLE-1/2 2H x H, EAGLE-3 "
                           "aux layers x H x H): what a framework that replicates fc reads on every TP rank")
    fc_first_level_only: bool = Field(False, description="EAGLE-3: fc fuses the target's hidden states on the "
                                      "first drafter pass only (later levels feed back the drafter's own H-wide "
                                      "state: upstream.trtllm EAGLE3_FC_FIRST_PASS); EAGLE-1/2 apply fc every level")
    weight_bytes: float = Field(description="bytes per weight of the quantized linear layers")
    lm_head_bytes: float = Field(description="bytes per lm_head weight")
    kv_bytes: float = Field(description="bytes per cached K or V element")
    dtype_bytes: float | None = Field(None, description="bytes per model-dtype element (embedding, norms); None "
                                      "(a shape written without it): lm_head_bytes")
    attn_bias: bool = False
    qk_norm: bool = False
    parallel_embedding: bool = Field(False, description="the embedding is split over tp (use_parallel_embedding)")
    own_embedding: bool = Field(True, description="holds its own embedding (an EAGLE-3 head uses the target's)")
    attention_window: int | None = Field(None, description="sliding window every layer attends over (DecoderSpec."
                                         "sliding_window): a query reads at most this many cached positions; "
                                         "None: the whole context")
    compute_dtype: ComputeDtype
    tp: int = 1
    quant_algo: str | None = None
    kv_cache_quant_algo: str | None = None

    @model_validator(mode="after")
    def _splits_over_tp(self):
        check_tp(self.num_heads, self.num_kv_heads, self.intermediate_size, self.tp,
                 f"cost model, network '{self.name}' ({self.role})")
        return self

    @property
    def linear_params(self) -> int:
        qkv = self.hidden_size * (self.num_heads + 2 * self.num_kv_heads) * self.head_size
        dense = self.num_heads * self.head_size * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size
        return self.num_layers * (qkv + dense + mlp) + self.extra_linear_params

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def kv_heads_per_rank(self) -> int:
        return trtllm.kv_heads_per_rank(self.num_kv_heads, self.tp)

    @property
    def rank_linear_params(self) -> float:
        """Linear weights on one tp rank: a 1/tp share, plus the k/v projections of the KV heads a
        rank holds beyond its share (fewer KV heads than ranks: each rank a copy of one)."""
        copies = self.kv_heads_per_rank - self.num_kv_heads / self.tp
        return self.linear_params / self.tp + self.num_layers * 2 * self.hidden_size * self.head_size * copies

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes of one token on one tp rank (kv_heads_per_rank, as builders.memory sizes it)."""
        return self.num_layers * 2 * self.kv_heads_per_rank * self.head_size * self.kv_bytes


def shape_from_spec(spec, config: dict, role: str, name: str, where: str) -> ModelShape:
    """A ModelShape from a DecoderSpec (trtspec.checkpoints.spec) and its TRT-LLM config dict."""
    lm_head = "eagle_nets.0.lm_head" if role == "eagle" else "lm_head"
    qb = quant_bytes(config.get("quantization"), config.get("dtype", "float16"), lm_head, where)
    tp = int((config.get("mapping") or {}).get("tp_size", 1))
    extra = 2 * spec.hidden_size * spec.hidden_size if role == "eagle" else 0
    return ModelShape(name=name, role=role, num_layers=spec.num_layers, hidden_size=spec.hidden_size,
                      num_heads=spec.num_heads, num_kv_heads=spec.num_kv_heads, head_size=spec.head_size,
                      intermediate_size=spec.intermediate_size, vocab_size=spec.vocab_size,
                      extra_linear_params=extra, fc_params=extra, tp=tp, attention_window=spec.sliding_window,
                      dtype_bytes=trtllm.DTYPE_BYTES[config.get("dtype", "float16")], attn_bias=spec.attn_bias,
                      qk_norm=spec.qk_norm, **qb,
                      # at tp 1 a split embedding is the whole one: the same network in any format
                      parallel_embedding=tp > 1 and bool(config.get("use_parallel_embedding")))


def shape_from_eagle3(head, target_config: dict, name: str, where: str) -> ModelShape:
    """An EAGLE-3 head (checkpoints.eagle3.Eagle3Head) as the drafter of a chain: K head forwards per
    step (draft_target_step), each one layer whose q/k/v read 2H, plus fc (n*H -> H) and the reduced
    lm_head (draft_vocab x H); weights in the target's dtype (the PyTorch backend loads the head
    with the target's), sharded over the target's tp (its mapping: the head's layers are the
    target model's tensor-parallel modules). Role "eagle": one-model EAGLE-3 runs the head inside
    the target's engine step, so each forward costs an EAGLE level's overhead, not a separate engine launch."""
    spec = replace(head.spec, vocab_size=head.draft_vocab)
    config = {"dtype": target_config.get("dtype", "float16"), "mapping": target_config.get("mapping")}
    shape = shape_from_spec(spec, config, "eagle", name, where)
    H = spec.hidden_size
    extra = len(head.aux_layers) * H * H + H * (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_size
    return shape.model_copy(update={"extra_linear_params": extra, "fc_params": len(head.aux_layers) * H * H,
                                    "fc_first_level_only": True, "own_embedding": False})


def shapes_from_checkpoint(ckpt_dir: Path, role: str = "target") -> dict[str, ModelShape]:
    """{role: shape} of a TRT-LLM checkpoint; an EagleForCausalLM one also yields its drafter ("eagle")."""
    c = open_checkpoint(Path(ckpt_dir))
    where = str(Path(ckpt_dir) / "config.json")
    out = {role: shape_from_spec(c.spec, c.config, role, Path(ckpt_dir).name, where)}
    if c.is_eagle:
        net = {"dtype": c.config.get("dtype"), **c.config["eagle_net_config"]}
        net.setdefault("quantization", c.config.get("quantization"))
        out["eagle"] = shape_from_spec(c.eagle_spec, net, "eagle", f"{Path(ckpt_dir).name}:eagle",
                                       where + ":eagle_net_config")
    return out


def forward_terms(m: ModelShape, batch: int, num_tokens: int, context: float) -> tuple[float, float]:
    """(bytes moved, FLOPs) of one forward on one tp rank."""
    if m.attention_window:
        context = min(context, m.attention_window)
    tokens = batch * num_tokens
    kv = batch * (context + num_tokens) * m.kv_bytes_per_token
    nbytes = m.rank_linear_params * m.weight_bytes + m.lm_head_params * m.lm_head_bytes / m.tp + kv
    attn = 4.0 * m.num_layers * tokens * (context + (num_tokens + 1) / 2) * m.num_heads * m.head_size  # causal
    flops = 2.0 * tokens * (m.rank_linear_params + m.lm_head_params / m.tp) + attn / m.tp
    return nbytes, flops


class Forward(NamedTuple):
    """`count` forwards of one network: a term of a step (CostModel) or of a whole request
    (trtspec.tuning.calibrate), priced the same way by both."""
    role: str  # target | draft | eagle
    batch: int
    num_tokens: int
    context: float
    count: float = 1  # a request's T / AL steps need not be whole
    level: int | None = None  # eagle: the drafter level (0 takes the target's hidden states); None: a plain forward
    verify: bool = False  # target: a speculative verify (the spec-dec kernels around it)


class Step(NamedTuple):
    """What a step (or a request) runs: its forwards and how many EAGLE steps' host time it pays."""
    forwards: tuple[Forward, ...]
    eagle_steps: float = 0  # count of GpuSpec.eagle_step_overhead_s


class Parts(NamedTuple):
    """One forward's time as trtspec.tuning.fit solves for it (parts_seconds): seconds at the nominal
    bandwidth / peak, scaled by the efficiencies, plus what no fit adjusts."""
    mem_s: float
    comp_s: float
    serial_s: float  # bytes read outside the roofline's max: a drafter level's logits passes, a replicated fc
    fixed_s: float  # all-reduces and gathers, the verify's spec-dec kernels
    eagle: bool  # pays eagle_level_overhead_s, not forward_overhead_s
    step_tokens: int  # a target decode/verify step's tokens, for GpuSpec.step_tokens_s (0: none)


def forward_parts(gpu: GpuSpec, m: ModelShape, f: Forward) -> Parts:
    """The Parts of forward `f` of network `m` (the module docstring's formulas)."""
    if f.level is not None and f.level > 0 and m.fc_first_level_only and gpu.eagle3_fc_first_level_only:
        m = m.model_copy(update={"extra_linear_params": m.extra_linear_params - m.fc_params, "fc_params": 0})
    nbytes, flops = forward_terms(m, f.batch, f.num_tokens, f.context)
    serial, fixed = 0.0, 2 * m.num_layers * gpu.allreduce_latency_s if m.tp > 1 else 0.0
    if f.level is not None:  # an EAGLE drafter level
        serial = gpu.logits_passes * f.batch * f.num_tokens * m.vocab_size * 4.0
        if m.tp > 1:
            fixed += gpu.allreduce_latency_s
            if gpu.eagle_fc_replicated:
                serial += m.fc_params * m.weight_bytes * (1 - 1 / m.tp)
    if f.verify:
        fixed += gpu.tree_verify_kernels * gpu.kernel_latency_s
    bw = gpu.hbm_bandwidth_gbs * 1e9
    return Parts(nbytes / bw, flops / (gpu.peak_tflops(m.compute_dtype) * 1e12), serial / bw, fixed,
                 m.role == "eagle", f.num_tokens if m.role == "target" and f.context > 0 else 0)


def parts_seconds(gpu: GpuSpec, p: Parts) -> float:
    u, v = 1.0 / gpu.bandwidth_efficiency, 1.0 / gpu.compute_efficiency
    busy = max(u * p.mem_s, v * p.comp_s) if gpu.memory_compute_overlap else u * p.mem_s + v * p.comp_s
    overhead = gpu.eagle_level_overhead_s if p.eagle else gpu.forward_overhead_s
    return overhead + busy + u * p.serial_s + p.fixed_s + (gpu.step_tokens_s.get(p.step_tokens, 0.0)
                                                           if p.step_tokens else 0.0)


def forward_time(gpu: GpuSpec, m: ModelShape, batch: int, num_tokens: int, context: float) -> float:
    """Seconds for one forward of `m` (see the module docstring)."""
    return parts_seconds(gpu, forward_parts(gpu, m, Forward(m.role, batch, num_tokens, context)))


def prefill_time(gpu: GpuSpec, m: ModelShape, prompt_tokens: int, chunk_tokens: int | None = None) -> float:
    """Seconds for one sequence's context phase (its prefill): forwards of at most `chunk_tokens` new
    tokens each, every chunk attending to the ones before it (TensorRT-LLM's chunked context, whose
    chunk is the engine's max_num_tokens); None: one forward of the whole prompt.

    Why it belongs to a speedup: a tokens/s that counts the context phase (trtllm-bench's per-user
    output throughput, upstream.published.TRTLLM_BENCH_PER_USER_INCLUDES_CONTEXT) divides the output by
    prefill + decode, and speculation shortens only the decode, so a long prompt dilutes the speedup.
    Priced like any forward (the lm_head over every prompt token included, though an engine computes
    the last token's logits only: 1.5% of a 70B prefill's FLOPs)."""
    if prompt_tokens < 1:
        raise ValueError(f"prompt_tokens: expected >= 1, got {prompt_tokens}")
    chunk = chunk_tokens or prompt_tokens
    return sum(forward_time(gpu, m, 1, min(chunk, prompt_tokens - done), done)
               for done in range(0, prompt_tokens, chunk))


# What each kind of step runs (one description, priced by CostModel for the tuner and fitted by
# trtspec.tuning.calibrate to a deployment's requests).

def baseline_forwards(batch: int, context: float) -> Step:
    """No speculation: one target forward of one token per sequence."""
    return Step((Forward("target", batch, 1, context),))


def eagle_forwards(batch: int, level_sizes: list[int], num_nodes: int, context: float) -> Step:
    """An EAGLE tree step (CostModel.eagle_step); num_nodes = 0: no speculation."""
    if num_nodes == 0:
        return baseline_forwards(batch, context)
    levels = tuple(Forward("eagle", batch, max(1, n), context, level=i) for i, n in enumerate(level_sizes))
    return Step(levels + (Forward("target", batch, num_nodes + 1, context, verify=True),), eagle_steps=1)


def draft_target_forwards(drafter: str, batch: int, k: int, context: float, host_draft: bool = False) -> Step:
    """K draft tokens by `drafter` (draft: a draft model; eagle: an EAGLE-3 chain), or from the host
    (host_draft; CostModel.draft_target_step)."""
    if k == 0:
        return baseline_forwards(batch, context)
    if host_draft:
        return Step((Forward("target", batch, k + 1, context),))
    if drafter == "eagle":
        return eagle_forwards(batch, [1] * k, k, context)
    return Step((Forward(drafter, batch, 1, context, count=k), Forward("target", batch, k + 1, context)))


class StepTime(BaseModel):
    """One step's draft/drafter part, target verify and framework host time (EAGLE), and their sum."""
    draft_s: float
    target_s: float
    overhead_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.draft_s + self.target_s + self.overhead_s


def price(gpu: GpuSpec, shapes: dict[str, ModelShape], step: Step) -> StepTime:
    """A step's (or a request's) time on `gpu`, its networks looked up by role in `shapes`."""
    parts = {"draft": 0.0, "target": 0.0}
    for f in step.forwards:
        m = shapes.get(f.role)
        if m is None:
            raise TrtspecError(f"cost model: a {f.role} network is needed (give its checkpoint)")
        parts["target" if f.role == "target" else "draft"] += f.count * parts_seconds(gpu, forward_parts(gpu, m, f))
    return StepTime(draft_s=parts["draft"], target_s=parts["target"],
                    overhead_s=step.eagle_steps * gpu.eagle_step_overhead_s)


class CostModel(BaseModel):
    """The GPU plus the networks of one deployment: the target and its draft model or EAGLE drafter."""
    model_config = ConfigDict(extra="forbid")

    gpu: GpuSpec
    target: ModelShape
    draft: ModelShape | None = None  # role "draft" (draft-target) or "eagle" (EAGLE drafter)
    # Whether the server steps concurrent requests together (TensorRT-LLM's in-flight batching: a
    # band of b sequences is one forward of batch b). False (the cpu flavor: a worker thread per
    # request, triton_repo.flavors.in_flight_batching): each request steps alone, so every band is
    # priced at batch 1; a band's tokens/s (b x AL / step) then assumes cores enough for b requests,
    # while its speedup, a ratio of two such rates, does not.
    in_flight_batching: bool = True

    def _batch(self, batch: int) -> int:
        return batch if self.in_flight_batching else 1

    @property
    def shapes(self) -> dict[str, ModelShape]:
        """{role: shape}, as steps look their networks up."""
        return {"target": self.target, **({self.draft.role: self.draft} if self.draft is not None else {})}

    def baseline_step(self, batch: int, context: float) -> StepTime:
        """No speculation: one target forward of one token per sequence."""
        return price(self.gpu, self.shapes, baseline_forwards(self._batch(batch), context))

    def draft_target_step(self, batch: int, k: int, context: float, host_draft: bool = False) -> StepTime:
        """K draft tokens: K draft-model forwards of one token each (the first also catches up on
        the previous step's 1-2 committed tokens, counted as one), then one target verify of K + 1
        tokens (TRT-LLM draft_tokens_external; trtspec/runtime/draft_target.py does the same). An
        EAGLE-3 head (role eagle, shape_from_eagle3) drafts a chain of K levels: eagle_step([1] * K, K).
        host_draft: the drafts come from the host at no GPU time (n-gram lookup), so the step is the
        verify alone, always K + 1 tokens (upstream pads short drafts to K: upstream.trtllm NGRAM)."""
        drafter = self.draft.role if self.draft is not None else "draft"
        return price(self.gpu, self.shapes, draft_target_forwards(drafter, self._batch(batch), k, context, host_draft))

    def eagle_step(self, batch: int, level_sizes: list[int], num_nodes: int, context: float) -> StepTime:
        """An EAGLE-1 tree step: drafter level 0 on the accepted tokens (counted as one token per
        sequence), then level d on the non-leaf nodes of depth d (level_sizes[d]), then one target
        verify of root + num_nodes tokens under the tree mask, plus the framework's host time per
        step (eagle_forwards, forward_parts, GpuSpec.eagle_step_overhead_s). A chain is the tree
        of one node per level. num_nodes = 0: no speculation. price() refuses a missing network."""
        return price(self.gpu, self.shapes, eagle_forwards(self._batch(batch), level_sizes, num_nodes, context))
