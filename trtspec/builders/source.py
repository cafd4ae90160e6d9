"""What the planner needs to know about a checkpoint directory, read from its config.json.

A plan depends only on `config.json` (plus the presence of the rank files), so this module reads
the config first and classifies the directory before anything stricter looks at it: a Hugging Face
directory, an EAGLE-3 head, a `target/` + `draft/` pair, an `EagleForCausalLM` checkpoint, or a
plain decoder. Classifying first lets each refusal say what the directory *is* and what to do,
instead of a generic "unsupported architecture".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..checkpoints.spec import DecoderSpec
from ..checkpoints.trtllm_ckpt import load_checkpoint
from ..errors import TrtspecError
from ..fsutil import read_json
from . import trtllm_facts as facts

EAGLE3_ROUTE = ("EAGLE-3 heads cannot go into TensorRT engines (the TRT-LLM 1.2 engine flow has "
                "EAGLE-1/2 only); serve EAGLE-3 with the LLM-API PyTorch backend (trtspec triton --flavor llmapi)")


@dataclass(frozen=True)
class Checkpoint:
    """One TRT-LLM checkpoint as the planner sees it."""

    path: Path                 # absolute
    config: dict
    spec: DecoderSpec          # the base decoder
    eagle_spec: DecoderSpec | None
    tp: int
    pp: int

    @property
    def architecture(self) -> str:
        return self.config["architecture"]

    @property
    def is_eagle(self) -> bool:
        return self.architecture == facts.EAGLE_ARCHITECTURE

    @property
    def dtype(self) -> str:
        return self.config["dtype"]

    @property
    def quantization(self) -> dict:
        return self.config.get("quantization") or {}

    @property
    def quant_algo(self) -> str | None:
        return self.quantization.get("quant_algo")

    @property
    def kv_cache_quant_algo(self) -> str | None:
        return self.quantization.get("kv_cache_quant_algo")

    @property
    def is_qwen3(self) -> bool:
        return self.spec.family == "qwen3" or self.config.get("qwen_type") == "qwen3" or self.spec.qk_norm

    def where(self, key: str) -> str:
        return f"{self.path / 'config.json'}: {key}"


def is_pair_dir(path: Path) -> bool:
    path = Path(path)
    return (path / "target" / "config.json").is_file() and (path / "draft" / "config.json").is_file()


def _eagle3_marker(config: dict) -> str | None:
    """The key or architecture that marks an EAGLE-3 config, if any (top level or nested)."""
    for cfg in (config, config.get("eagle_net_config") or {}, config.get("eagle_config") or {}):
        archs = [cfg.get("architecture")] + list(cfg.get("architectures") or [])
        for arch in archs:
            if isinstance(arch, str) and "eagle3" in arch.lower():
                return f"architecture {arch!r}"
        for key in facts.EAGLE3_MARKER_KEYS:
            if key in cfg:
                return f"field '{key}'"
    return None


def read_checkpoint(path: Path) -> Checkpoint:
    """Classify and open one checkpoint directory; refuse HF directories and EAGLE-3 heads by name."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise TrtspecError(f"{path}: checkpoint directory not found")
    cfg_path = path / "config.json"
    config = read_json(cfg_path, "TRT-LLM config.json")
    marker = _eagle3_marker(config)
    if marker:
        raise TrtspecError(f"{cfg_path}: {marker} marks an EAGLE-3 head; {EAGLE3_ROUTE}")
    if "architecture" not in config and config.get("architectures"):
        raise TrtspecError(f"{cfg_path}: this is a Hugging Face model directory, not a TensorRT-LLM checkpoint "
                           f"(run 'trtspec convert --hf {path} --out CKPT' first)")
    mapping = config.get("mapping") or {}
    pp = int(mapping.get("pp_size", 1))
    if pp != 1 and config.get("architecture") == facts.EAGLE_ARCHITECTURE:
        raise TrtspecError(f"{cfg_path}: mapping.pp_size={pp}, but EAGLE engines need pp_size 1 (TRT-LLM asserts "
                           "it; reference §4.2, §9.4); reconvert with tensor parallelism (--tp) instead")
    ckpt = load_checkpoint(path)  # checks rank files, refuses pp > 1 for everything else
    names = ckpt.names()
    hit = next((n for n in names if n.split(".")[-1] in facts.EAGLE3_MARKER_TENSORS), None)
    if hit:
        raise TrtspecError(f"{path}: tensor '{hit}' marks an EAGLE-3 head; {EAGLE3_ROUTE}")
    return Checkpoint(path=path, config=ckpt.config, spec=ckpt.spec, eagle_spec=ckpt.eagle_spec,
                      tp=ckpt.tp, pp=pp)
