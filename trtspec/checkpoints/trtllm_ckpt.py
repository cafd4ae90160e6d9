"""Read a TRT-LLM checkpoint directory back: config, decoder specs, and full (TP-merged) tensors.

This is what the PyTorch runtime loads, and what `validate_checkpoint` checks against the layout
the config implies (names, per-rank shapes, dtypes) without TensorRT-LLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import upstream
from ..errors import TrtspecError
from ..fsutil import read_json
from .safetensors_io import TensorInfo, read_header, read_tensor
from .sharding import merge
from .spec import DecoderSpec, spec_from_trtllm
from .layout import shard_for


@dataclass
class TrtllmCheckpoint:
    path: Path
    config: dict
    spec: DecoderSpec  # the base decoder
    eagle_spec: DecoderSpec | None  # the EAGLE drafter decoder (eagle_net_config), if any
    tp: int
    ranks: list[dict[str, TensorInfo]] = field(repr=False, default_factory=list)

    @property
    def is_eagle(self) -> bool:
        return self.eagle_spec is not None

    @property
    def dtype(self) -> str:
        return self.config["dtype"]

    @property
    def quant_algo(self) -> str | None:
        """`quantization.quant_algo` (FP8, W8A8_SQ_PER_CHANNEL, W8A16, W4A16_AWQ) or None."""
        return (self.config.get("quantization") or {}).get("quant_algo")

    @property
    def kv_cache_quant_algo(self) -> str | None:
        return (self.config.get("quantization") or {}).get("kv_cache_quant_algo")

    def names(self) -> list[str]:
        return list(self.ranks[0])

    def __contains__(self, name: str) -> bool:
        return name in self.ranks[0]

    def spec_for(self, name: str) -> tuple[DecoderSpec, bool]:
        """The decoder spec and the parallel-embedding flag that govern tensor `name`."""
        if name.startswith("eagle_nets.") and self.eagle_spec is not None:
            return self.eagle_spec, bool(self.config["eagle_net_config"].get("use_parallel_embedding", False))
        return self.spec, bool(self.config.get("use_parallel_embedding", False))

    def tensor(self, name: str) -> torch.Tensor:
        """The full tensor, merged over ranks, as stored (quantized tensors stay quantized: see
        checkpoints/quant.py for their layout); vocab padding rows are dropped."""
        if name not in self.ranks[0]:
            raise TrtspecError(f"{self.path}: missing tensor '{name}'")
        spec, parallel_embedding = self.spec_for(name)
        parts = [read_tensor(rank[name], name) for rank in self.ranks]
        shard = shard_for(name, spec, parallel_embedding, self.quant_algo)
        full = merge(parts, shard)
        if shard.kind == "vocab":
            full = full[: spec.vocab_size]
        return full


def load_checkpoint(path: Path) -> TrtllmCheckpoint:
    """Open a checkpoint directory (headers only; tensors are read on demand)."""
    path = Path(path)
    config = read_json(path / "config.json", "TRT-LLM config.json")
    spec = spec_from_trtllm(config, path / "config.json")
    eagle_spec = None
    if config.get("architecture") == upstream.EAGLE_ARCHITECTURE:
        if not isinstance(config.get("eagle_net_config"), dict):
            raise TrtspecError(f"{path / 'config.json'}: EagleForCausalLM without an 'eagle_net_config' object")
        net = {**config["eagle_net_config"], "architecture": "LlamaForCausalLM"}
        eagle_spec = spec_from_trtllm(net, f"{path / 'config.json'}:eagle_net_config")
    mapping = config.get("mapping") or {}
    tp = int(mapping.get("tp_size", 1))
    if int(mapping.get("pp_size", 1)) != 1:
        raise TrtspecError(f"{path / 'config.json'}: mapping.pp_size must be 1 (pipeline parallel is not supported)")
    ranks = []
    for r in range(tp):
        f = path / f"rank{r}.safetensors"
        if not f.exists():
            raise TrtspecError(f"{path}: missing rank{r}.safetensors (mapping.tp_size={tp})")
        ranks.append(read_header(f))
    for r in range(1, tp):
        if set(ranks[r]) != set(ranks[0]):
            diff = sorted(set(ranks[r]) ^ set(ranks[0]))[0]
            raise TrtspecError(f"{path}: rank{r}.safetensors and rank0.safetensors differ in tensor '{diff}'")
    return TrtllmCheckpoint(path, config, spec, eagle_spec, tp, ranks)
