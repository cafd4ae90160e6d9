"""One view of a TRT-LLM checkpoint: config, decoder specs, quantization scheme, and full (TP-merged) tensors.

The PyTorch runtime loads it, `validate_checkpoint` checks it against the layout the config
implies (names, per-rank shapes, dtypes) without TensorRT-LLM, the build planner reads its config,
and the Triton memory plan builds the same view from an engine's `pretrained_config` (no rank
files: `checkpoint_from_config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..errors import TrtspecError
from ..fsutil import read_json
from ..upstream import trtllm
from .config_fields import ConfigFields
from .layout import shard_for
from .safetensors_io import TensorInfo, read_header, read_tensor
from .scheme import QuantScheme
from .sharding import merge
from .spec import DecoderSpec, spec_from_trtllm


@dataclass(frozen=True, eq=False)
class TrtllmCheckpoint:
    path: Path
    config: dict
    spec: DecoderSpec  # the base decoder
    eagle_spec: DecoderSpec | None  # the EAGLE drafter decoder (eagle_net_config), if any
    quant: QuantScheme  # the `quantization` block
    tp: int
    pp: int = 1
    ranks: list[dict[str, TensorInfo]] = field(repr=False, default_factory=list)  # empty: config only

    @property
    def architecture(self) -> str:
        return self.config["architecture"]

    @property
    def is_eagle(self) -> bool:
        return self.eagle_spec is not None

    @property
    def dtype(self) -> str:
        return self.config["dtype"]

    @property
    def quant_algo(self) -> str | None:
        """`quantization.quant_algo` (FP8, W8A8_SQ_PER_CHANNEL, W8A16, W4A16_AWQ, ...) or None."""
        return self.quant.quant_algo

    @property
    def kv_cache_quant_algo(self) -> str | None:
        return self.quant.kv_cache_quant_algo

    def where(self, key: str) -> str:
        """`.../config.json: key`, for errors that name a config field."""
        return f"{self.path / 'config.json'}: {key}"

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


def checkpoint_from_config(config: dict, path: Path) -> TrtllmCheckpoint:
    """The view of a checkpoint (or engine) directory from its TRT-LLM config alone: no tensors."""
    path = Path(path)
    where = path / "config.json"
    spec = spec_from_trtllm(config, where)
    eagle_spec = None
    if config.get("architecture") == trtllm.EAGLE_ARCHITECTURE:
        if not isinstance(config.get("eagle_net_config"), dict):
            raise TrtspecError(f"{where}: EagleForCausalLM without an 'eagle_net_config' object")
        net = {**config["eagle_net_config"], "architecture": trtllm.EAGLE_NET_ARCHITECTURE}
        eagle_spec = spec_from_trtllm(net, where, prefix="eagle_net_config.")
    _check_checkpoint_fields(config, where)
    mapping = ConfigFields(config.get("mapping") or {}, where, "mapping.")
    tp, pp = mapping.int("tp_size", 1), mapping.int("pp_size", 1)
    # TRT-LLM's Mapping(**mapping) raises unless world_size (default 1) is tp * pp * cp
    world, parts = mapping.int("world_size", 1), tp * pp * mapping.int("cp_size", 1)
    if world != parts:
        mapping.fail("world_size", f"tp_size * pp_size * cp_size = {parts} (TensorRT-LLM's Mapping requires it)",
                     world)
    return TrtllmCheckpoint(path, config, spec, eagle_spec, QuantScheme.from_config(config, str(where)), tp, pp)


def _check_checkpoint_fields(config: dict, where: Path) -> None:
    """The checkpoint-level fields the views above read raw (the decoder's are typed by spec_from_trtllm)."""
    top = ConfigFields(config, where)
    top.choice("dtype", tuple(trtllm.DTYPE_BYTES))  # builders/memory.py sizes weights and KV by it
    top.choice("logits_dtype", tuple(trtllm.DTYPE_BYTES), None)
    top.flag("use_parallel_embedding", False)
    if config.get("architecture") == trtllm.EAGLE_ARCHITECTURE:
        top.int("num_eagle_layers", trtllm.EAGLE_CONFIG_DEFAULT_NUM_LAYERS)
        if "max_draft_len" in config and config["max_draft_len"] is None:  # absent means EagleConfig's 63
            top.fail("max_draft_len", "an integer (EagleConfig passes a null on and the engine build fails)", None)
        top.int("max_draft_len", trtllm.EAGLE_DEFAULT_MAX_DRAFT_LEN)
        ConfigFields(config["eagle_net_config"], where, "eagle_net_config.").flag("use_parallel_embedding", False)


def is_hf_unified(path: Path) -> bool:
    """A ModelOpt unified HF checkpoint (hf_quant_config.json), the PyTorch backend's format
    (checkpoints/hf_unified.py reads it)."""
    return (Path(path) / trtllm.HF_QUANT_CONFIG_FILE).is_file()


def load_checkpoint(path: Path) -> TrtllmCheckpoint:
    """Open a checkpoint directory (headers only; tensors are read on demand)."""
    path = Path(path)
    if is_hf_unified(path):
        raise TrtspecError(f"{path}: a ModelOpt unified HF checkpoint ({trtllm.HF_QUANT_CONFIG_FILE}), for the PyTorch "
                           "backend; this needs a TensorRT-LLM checkpoint (quantization.output_format trtllm)")
    config = read_json(path / "config.json", "TRT-LLM config.json")
    if isinstance(config, dict) and "architecture" not in config and config.get("architectures"):
        raise TrtspecError(f"{path / 'config.json'}: this is a Hugging Face model directory, not a TensorRT-LLM "
                           f"checkpoint (run 'trtspec convert --hf {path} --out CKPT' first)")
    view = checkpoint_from_config(config, path)
    if view.pp != 1:
        raise TrtspecError(f"{path / 'config.json'}: mapping.pp_size must be 1 (pipeline parallel is not supported)")
    ranks = []
    for r in range(view.tp):
        f = path / f"rank{r}.safetensors"
        if not f.exists():
            raise TrtspecError(f"{path}: missing rank{r}.safetensors (mapping.tp_size={view.tp})")
        ranks.append(read_header(f))
    for r in range(1, view.tp):
        if set(ranks[r]) != set(ranks[0]):
            diff = sorted(set(ranks[r]) ^ set(ranks[0]))[0]
            raise TrtspecError(f"{path}: rank{r}.safetensors and rank0.safetensors differ in tensor '{diff}'")
    return replace(view, ranks=ranks)
