"""The llmapi flavor's tensor parallelism: how many GPUs each LLM instance spans (triton.tp), checked
against the heads of every network it runs, and what each of those GPUs holds.

Every served setting is its own LLM instance (llmapi.py) and, launched at world size 1, each spawns
its tp workers on GPUs 0..tp-1 (upstream.triton LLMAPI_MAX_TP block): the instances share those GPUs,
each holding 1/tp of its weights on every one of them. A draft model or an EAGLE-3 head runs at the
target's tp (the PyTorch backend builds it with the target's mapping), so it is checked and split alike.
"""

from __future__ import annotations

from pathlib import Path

from ..builders.memory import WeightCounter
from ..checkpoints.sharding import check_tp
from ..checkpoints.spec import spec_from_hf
from ..errors import TrtspecError
from ..fsutil import read_json
from ..upstream.triton import LLMAPI_MAX_TP
from .deploy import Artifact


def checkpoint_tp(ckpt: Path | None) -> int | None:
    """The tp_size of the TensorRT-LLM checkpoint given as ckpt (its config.json, or a pair's
    target/config.json, has a `mapping`), or None: an HF directory has none."""
    if ckpt is None:
        return None
    root = Path(ckpt).expanduser()
    for cfg_path in (root / "config.json", root / "target" / "config.json"):
        if cfg_path.is_file():
            cfg = read_json(cfg_path, "config.json")
            if "architectures" not in cfg and isinstance(cfg.get("mapping"), dict):
                return int(cfg["mapping"].get("tp_size", 1))
    return None


def served_tp(option: int | None, ckpt: Path | None, arts: list[Artifact]) -> int:
    """triton.tp, else the tp of the checkpoint the repository was given (what a recipe converted,
    profiled and tuned at), else 1; refused (naming triton.tp) when a served network cannot split so."""
    tp = option if option is not None else (checkpoint_tp(ckpt) or 1)
    if tp < 1:
        raise TrtspecError(f"triton.tp: expected >= 1, got {tp}")
    if tp > LLMAPI_MAX_TP:
        raise TrtspecError(f"triton.tp: {tp} exceeds the {LLMAPI_MAX_TP} GPUs of one node, where each llmapi "
                           "model spawns its workers (multi-node serving is not generated)")
    if tp > 1:
        for art in arts:
            cfg = art.config
            heads = cfg.get("num_attention_heads")
            if isinstance(heads, int):
                check_tp(heads, int(cfg.get("num_key_value_heads") or heads), int(cfg.get("intermediate_size") or tp),
                         tp, f"triton.tp ({art.role} {art.path})")
    return tp


def served_mapping(art: Artifact, llmapi_tp: int | None) -> dict:
    """The tp and pp the manifest says an artifact is served at: an engine's or checkpoint's own
    mapping, or under llmapi (llmapi_tp) the served tp and pp 1, what every model.yaml sets
    (tensor_parallel_size, pipeline_parallel_size) and a draft model or head runs at too."""
    return {"tp": llmapi_tp, "pp": 1} if llmapi_tp is not None else {"tp": art.tp, "pp": art.pp}


def gpu_share(path: Path, tp: int) -> float:
    """The part of an HF model's weights one GPU of a tp group holds: builders.memory's WeightCounter
    (the per-rank rule of the build estimate and the tuner) at tp over the same at 1, with every
    weight one byte. The embedding is counted whole on each GPU (conservative: whether 1.2's PyTorch
    backend splits it is not read)."""
    if tp == 1:
        return 1.0
    spec = spec_from_hf(Path(path))

    def per_rank(n: int) -> float:
        return WeightCounter(1.0, n, lambda _m: 1.0).decoder(spec, "", parallel_embedding=False)
    return per_rank(tp) / per_rank(1)


def memory_plan(gpu: str, gpu_bytes: int, tp: int, instances: int, weights_per_gpu: int, overhead: int,
                share: float | None) -> dict:
    """The manifest's llmapi memory (README "GPU memory"): per GPU of the tp group, what the
    instances sharing it load before their KV caches, and each one's KV share (llmapi.kv_share)."""
    return {"gpu": gpu, "gpu_memory_bytes": gpu_bytes, "gpus": tp, "instances": instances,
            "weights_bytes_per_gpu": weights_per_gpu, "overhead_bytes_per_gpu": overhead,
            "free_after_load_bytes": gpu_bytes - instances * (weights_per_gpu + overhead),
            "free_gpu_memory_fraction": share}
