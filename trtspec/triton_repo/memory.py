"""GPU memory of the TensorRT-LLM models of a repository (trtllm flavor), per GPU, from the builders' estimate.

Each `tensorrt_llm*` model is its own executor: its own copy of the engine's weights, its own
activation buffers and runtime overhead, and a KV pool, on every GPU its `gpu_device_ids` names
(engine_gpus: rank r on GPU r). Under pipeline parallelism a GPU holds its rank's stage (rank // tp):
its share of the layers and their KV cache, the embedding on the first stage, lm_head on the last
(upstream.trtllm pp_layers), so weights and KV bytes per token are counted per stage. Draft-target
puts the draft beside the target's first ranks (a TP-1 draft beside a TP-2 target is only on GPU 0;
every request lives in both, so on a GPU holding both their per-token KV costs add up); EAGLE serves
one model per tree profile, so each extra profile costs a whole engine instance (weights +
activations + overhead), and the profiles split the pool.
The numbers come from `trtspec.builders.memory` (the same per-rank estimate `trtspec build` prints;
±10% on weights-dominated cases) applied to each engine's own `config.json`, read as the same
checkpoint view (`checkpoint_from_config` of its `pretrained_config`).

How the executor sizes each model's pool (kvCacheManager.cpp calculateFreeMemBytes /
calculateMaxNumBlocks @b35ac1b6, 1.2.0rc2): kv_cache_free_gpu_mem_fraction x the memory free on
that rank's GPU *when the model loads*, capped by max_tokens_in_paged_kv_cache ("The smaller value
will be used"), then the blocks are MIN-reduced over the engine's ranks (all of its world, the
pipeline stages too, each rank pricing a token by its own layers), so a TP or PP engine gets what
its tightest GPU allows. A model loaded after another on the same GPU sees that one's weights and
KV pool gone, which is why upstream's draft-target recipe writes a split fraction (0.5) and a token
cap on both models (examples/draft_target_model/README.md @11925f62). trtspec writes each model's
planned tokens as the cap and, as its fraction, the smallest one that still reaches them when the
model loads last on its tightest GPU (kv_fraction): a model alone on its GPUs keeps 0.9.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..builders import memory as bm
from ..checkpoints.trtllm_ckpt import checkpoint_from_config
from ..upstream import trtllm
from .deploy import Artifact, attention_window


def engine_gpus(art: Artifact) -> list[int]:
    """The GPUs an engine's ranks run on: one per rank from 0, in leader mode (rank r of the MPI world
    uses GPU r) and in orchestrator mode (gpu_device_ids lists exactly TP x PP GPUs, upstream.triton)."""
    return list(range(art.world_size))


def gpu_device_ids(art: Artifact, orchestrator: bool) -> str:
    """The engine's `gpu_device_ids`. Leader mode (one TensorRT-LLM model): each MPI rank uses its own
    GPU, leave it unset. Orchestrator mode (several models, spawned workers): engine_gpus (the
    executor refuses another count, upstream.triton), so a TP-1 draft shares GPU 0 with the target."""
    return ",".join(map(str, engine_gpus(art))) if orchestrator else ""


@dataclass
class ModelMemory:
    model: str
    engine: str
    stage_weights_bytes: list[int]  # per rank of each pipeline stage (builders.memory's rule; one stage at pp 1)
    activation_bytes: int
    overhead_bytes: int
    stage_kv_bytes_per_token: list[int]  # per rank of each pipeline stage
    kv_tokens_per_sequence: int  # upstream.trtllm.kv_tokens_per_sequence of the engine's limits
    gpus: list[int] = field(default_factory=list)
    kv_tokens: int = 0  # max_tokens_in_paged_kv_cache we give it
    kv_gpu: int = 0     # the GPU whose memory bounds kv_tokens
    kv_fraction: float = trtllm.KV_CACHE_FREE_GPU_MEMORY_FRACTION  # kv_cache_free_gpu_mem_fraction we give it

    @property
    def weights_bytes(self) -> int:
        """Per rank; under pp the fullest stage's."""
        return max(self.stage_weights_bytes)

    @property
    def kv_bytes_per_token(self) -> int:
        """Per rank; under pp the largest stage's."""
        return max(self.stage_kv_bytes_per_token)

    def stage(self, gpu: int) -> int:
        """The pipeline stage of the rank on `gpu` (engine_gpus: rank r on GPU r)."""
        return trtllm.pp_stage(self.gpus.index(gpu), len(self.gpus) // len(self.stage_weights_bytes))

    def kv_bytes_on(self, gpu: int) -> int:
        return self.stage_kv_bytes_per_token[self.stage(gpu)]

    def instance_bytes_on(self, gpu: int) -> int:
        """What one more copy of this model costs on `gpu` before its KV cache."""
        return self.stage_weights_bytes[self.stage(gpu)] + self.activation_bytes + self.overhead_bytes

    @property
    def instance_bytes(self) -> int:
        """What one more copy of this model costs on each of its GPUs (under pp: its fullest) before KV cache."""
        return self.weights_bytes + self.activation_bytes + self.overhead_bytes


@dataclass
class GpuMemory:
    gpu: int
    models: list[str]
    free_after_load_bytes: int  # what the KV pools are carved from (negative: does not load)
    kv_pool_bytes: int


@dataclass
class MemoryPlan:
    gpu: str
    gpu_memory_bytes: int
    models: list[ModelMemory]
    gpus: list[GpuMemory]
    shared_kv: bool  # draft-target: every request needs both engines' KV
    warnings: list[str] = field(default_factory=list)

    @property
    def tightest(self) -> GpuMemory:
        return min(self.gpus, key=lambda g: g.free_after_load_bytes)

    def to_dict(self) -> dict:
        d = asdict(self)
        for m, md in zip(self.models, d["models"]):
            md.update(weights_bytes=m.weights_bytes, kv_bytes_per_token=m.kv_bytes_per_token,
                      instance_bytes=m.instance_bytes)
        d["free_after_load_bytes"] = self.tightest.free_after_load_bytes  # the README's summary line
        d["kv_pool_bytes"] = self.tightest.kv_pool_bytes
        d["tightest_gpu"] = self.tightest.gpu
        return d


def _model(name: str, art: Artifact) -> ModelMemory:
    ck = checkpoint_from_config(art.config, art.path)
    activations = bm.activation_bytes(ck, art.max_batch_size or 1, art.max_draft_len, art.max_num_tokens or 0)
    max_seq = art.max_seq_len or ck.spec.max_position_embeddings
    per_seq = trtllm.kv_tokens_per_sequence(max_seq, attention_window(art), int(art.build.get("max_input_len") or max_seq))
    weights = [bm.checkpoint_weight_bytes(ck, s) for s in range(ck.pp)]
    kv = [bm.kv_bytes_per_token(ck, s) for s in range(ck.pp)]
    return ModelMemory(name, str(art.path), weights, activations, bm.RUNTIME_OVERHEAD_BYTES, kv, per_seq,
                       engine_gpus(art))


def _blocks(pool: float, per_token: int) -> int:
    block = trtllm.TOKENS_PER_BLOCK
    return int(pool // (per_token * block)) * block if per_token > 0 and pool > 0 else 0


def plan_memory(placements: list[tuple[str, Artifact]], gpu: str, shared_kv: bool) -> MemoryPlan:
    """placements: (model name, engine) for every TensorRT-LLM model of the repository."""
    models = [_model(name, art) for name, art in placements]
    total = trtllm.GPU_MEMORY_MIB[gpu] * 1024**2
    gpus = []
    for g in sorted({i for m in models for i in m.gpus}):
        here = [m for m in models if g in m.gpus]
        free = total - sum(m.instance_bytes_on(g) for m in here)
        gpus.append(GpuMemory(g, [m.model for m in here], free,
                              max(0, int(free * trtllm.KV_CACHE_FREE_GPU_MEMORY_FRACTION))))
    plan = MemoryPlan(gpu, total, models, gpus, shared_kv)
    on = {g.gpu: [m for m in models if g.gpu in m.gpus] for g in gpus}
    for m in models:  # shared (draft-target): the pair's tokens on each GPU; else the GPU's pool split evenly
        tokens = {g.gpu: _blocks(g.kv_pool_bytes, sum(o.kv_bytes_on(g.gpu) for o in on[g.gpu])) if shared_kv
                  else _blocks(g.kv_pool_bytes / len(on[g.gpu]), m.kv_bytes_on(g.gpu))
                  for g in gpus if shared_kv or g.gpu in m.gpus}
        m.kv_gpu = min(tokens, key=lambda i: (tokens[i], i))  # the tightest GPU bounds it (MIN over ranks)
        m.kv_tokens = tokens[m.kv_gpu]
    for m in models:
        m.kv_fraction = kv_fraction(m, [(g, on[g.gpu]) for g in gpus if g.gpu in m.gpus])
    for g in gpus:
        if g.free_after_load_bytes <= 0:
            plan.warnings.append(
                f"memory: GPU {g.gpu} holds {', '.join(g.models)}, which need about "
                f"{(total - g.free_after_load_bytes) / bm.GIB:.1f} GiB before any KV cache but one "
                f"{trtllm.GPU_NAMES[gpu]} has {total / bm.GIB:.1f} GiB; serve fewer EAGLE profiles "
                "(trtspec tune --max-profiles), or quantize")
    return plan


def kv_fraction(m: ModelMemory, placed: list[tuple[GpuMemory, list[ModelMemory]]]) -> float:
    """The kv_cache_free_gpu_mem_fraction for model `m` (module docstring): on each of its GPUs, loaded
    last, it sees the free memory less the other models' planned pools there and must still reach its
    own planned pool; the largest such share over its GPUs, rounded up to 0.01, at most 0.9. With no
    plan (nothing free) each model of the busiest GPU gets an even 0.9 / n, as upstream splits it."""
    cap = trtllm.KV_CACHE_FREE_GPU_MEMORY_FRACTION
    if m.kv_tokens <= 0:
        return round(cap / max(len(here) for _, here in placed), 4)
    need = 0.0
    for g, here in placed:
        others = sum(o.kv_tokens * o.kv_bytes_on(g.gpu) for o in here if o is not m)
        need = max(need, m.kv_tokens * m.kv_bytes_on(g.gpu) / max(1, g.free_after_load_bytes - others))
    return min(cap, math.ceil(need * 100) / 100)


def request_tokens(w) -> int:
    """Prompt + output of one request of a tuned workload (WorkloadTuning): its recorded mean prompt
    plus the mean output. A tuning.json without prompt_tokens priced its steps at context_tokens = mean
    prompt + half the mean output (tuning/select.py context_of), so the request is that plus the other
    half; not so under a tune.context_tokens override, which such a file cannot tell apart."""
    output = w.num_tokens / max(1, w.num_samples)
    if w.prompt_tokens is not None:
        return math.ceil(w.prompt_tokens + output)
    return math.ceil(w.context_tokens + 0.5 * output)


def check_demand(plan: MemoryPlan, batch: int, tuning) -> None:
    """Warn (plan.warnings) where a model's KV tokens fall short of the tuned load: each band's
    concurrency (at most `batch`: generate runs no more at once) x its workload's prompt + output.
    Not against `batch` full-length sequences: that is short on nearly every deployment, and the
    scheduler only admits what fits (a warning every repository carries would be noise)."""
    for m in plan.models:
        where = f"memory: GPU {m.kv_gpu}"
        loads = [(min(b.concurrency, batch), min(request_tokens(w), m.kv_tokens_per_sequence), name)
                 for name, w in tuning.workloads.items() for b in w.bands]
        c, per_req, name = max(loads, key=lambda x: x[0] * x[1])
        if m.kv_tokens < c * per_req:
            plan.warnings.append(
                f"{where}: {m.model} gets about {m.kv_tokens} KV tokens (max_tokens_in_paged_kv_cache), fewer than "
                f"the tuned load needs: {c} concurrent requests x {per_req} tokens (prompt + output of workload "
                f"'{name}') = {c * per_req}; requests wait for KV blocks: lower triton.max_batch_size to "
                f"{max(1, m.kv_tokens // per_req)}, quantize the KV cache, or serve fewer models per GPU")
