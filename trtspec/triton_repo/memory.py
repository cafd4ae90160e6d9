"""GPU memory of the TensorRT-LLM models of a repository (trtllm flavor), from the builders' estimate.

Each `tensorrt_llm*` model is its own executor: its own copy of the engine's weights, its own
activation buffers and runtime overhead, and a KV pool. Draft-target puts two engines on one GPU
(every request lives in both, so their per-token KV costs add up); EAGLE serves one model per tree
profile, so each extra profile costs a whole engine instance (weights + activations + overhead),
and the profiles split the KV pool. The numbers come from `trtspec.builders.memory` (the same
estimate `trtspec build` prints; ±10% on weights-dominated cases) applied to each engine's own
`config.json`, read as the same checkpoint view (`checkpoint_from_config` of its `pretrained_config`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..builders import memory as bm
from ..checkpoints.trtllm_ckpt import checkpoint_from_config
from ..upstream import trtllm
from .deploy import Artifact


@dataclass
class ModelMemory:
    model: str
    engine: str
    weights_bytes: int
    activation_bytes: int
    overhead_bytes: int
    kv_bytes_per_token: int
    kv_tokens: int = 0  # max_tokens_in_paged_kv_cache we give it

    @property
    def instance_bytes(self) -> int:
        """What one more copy of this model costs before its KV cache."""
        return self.weights_bytes + self.activation_bytes + self.overhead_bytes


@dataclass
class MemoryPlan:
    gpu: str
    gpu_memory_bytes: int
    models: list[ModelMemory]
    free_after_load_bytes: int
    kv_pool_bytes: int
    shared_kv: bool  # draft-target: every request needs both engines' KV
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        for m, md in zip(self.models, d["models"]):
            md["instance_bytes"] = m.instance_bytes
        return d


def plan_memory(placements: list[tuple[str, Artifact]], gpu: str, shared_kv: bool) -> MemoryPlan:
    """placements: (model name, engine) for every TensorRT-LLM model sharing one GPU (per rank)."""
    models = []
    for name, art in placements:
        ck = checkpoint_from_config(art.config, art.path)
        activations = bm.activation_bytes(ck, art.max_batch_size or 1, art.max_draft_len, art.max_num_tokens or 0)
        models.append(ModelMemory(name, str(art.path), bm.checkpoint_weight_bytes(ck), activations,
                                  bm.RUNTIME_OVERHEAD_BYTES, bm.kv_bytes_per_token(ck)))
    total = trtllm.GPU_MEMORY_MIB[gpu] * 1024**2
    free = total - sum(m.instance_bytes for m in models)
    pool = max(0, int(free * trtllm.KV_CACHE_FREE_GPU_MEMORY_FRACTION))
    block = trtllm.TOKENS_PER_BLOCK
    plan = MemoryPlan(gpu, total, models, free, pool, shared_kv)
    if shared_kv:
        per_token = sum(m.kv_bytes_per_token for m in models)
        tokens = (pool // (per_token * block)) * block if per_token else 0
        for m in models:
            m.kv_tokens = tokens
    else:
        for m in models:
            share = pool // len(models)
            m.kv_tokens = (share // (m.kv_bytes_per_token * block)) * block if m.kv_bytes_per_token else 0
    if free <= 0:
        plan.warnings.append(
            f"memory: the {len(models)} TensorRT-LLM model(s) need about {(total - free) / bm.GIB:.1f} GiB before "
            f"any KV cache but one {trtllm.GPU_NAMES[gpu]} has {total / bm.GIB:.1f} GiB; serve fewer EAGLE profiles "
            "(trtspec tune --max-profiles), or quantize")
    return plan
