"""Classify and open a checkpoint directory for the planner (the view is checkpoints.TrtllmCheckpoint).

A plan depends only on `config.json` (plus the presence of the rank files), so this module reads
the config first and classifies the directory before anything stricter looks at it: a Hugging Face
directory, an EAGLE-3 head, a `target/` + `draft/` pair, an `EagleForCausalLM` checkpoint, or a
plain decoder. Classifying first lets each refusal say what the directory *is* and what to do,
instead of a generic "unsupported architecture".
"""

from __future__ import annotations

from pathlib import Path

from ..checkpoints.config_fields import ConfigFields
from ..checkpoints.trtllm_ckpt import TrtllmCheckpoint, is_hf_unified, load_checkpoint
from ..errors import TrtspecError
from ..fsutil import read_json
from ..upstream import trtllm

EAGLE3_ROUTE = ("EAGLE-3 heads cannot go into TensorRT engines (the TRT-LLM 1.2 engine flow has "
                "EAGLE-1/2 only); serve EAGLE-3 with the LLM-API PyTorch backend (trtspec triton --flavor llmapi)")


def is_pair_dir(path: Path) -> bool:
    path = Path(path)
    return (path / "target" / "config.json").is_file() and (path / "draft" / "config.json").is_file()


def _eagle3_marker(config: dict) -> str | None:
    """The key or architecture that marks an EAGLE-3 config, if any (top level or nested)."""
    nested = [config.get(key) for key in ("eagle_net_config", "eagle_config")]
    for cfg in [config] + [c for c in nested if isinstance(c, dict)]:  # other kinds: load_checkpoint names them
        archs = [cfg.get("architecture")] + list(cfg.get("architectures") or [])
        for arch in archs:
            if isinstance(arch, str) and "eagle3" in arch.lower():
                return f"architecture {arch!r}"
        for key in trtllm.EAGLE3_MARKER_KEYS:
            if key in cfg:
                return f"field '{key}'"
    return None


def read_checkpoint(path: Path) -> TrtllmCheckpoint:
    """Classify and open one checkpoint directory; refuse HF directories and EAGLE-3 heads by name."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise TrtspecError(f"{path}: checkpoint directory not found")
    cfg_path = path / "config.json"
    config = read_json(cfg_path, "TRT-LLM config.json")
    marker = _eagle3_marker(config)
    if marker:
        raise TrtspecError(f"{cfg_path}: {marker} marks an EAGLE-3 head; {EAGLE3_ROUTE}")
    if is_hf_unified(path):  # an HF config.json too: say what it is before the plain-HF advice below
        raise TrtspecError(f"{path}: a ModelOpt unified HF checkpoint ({trtllm.HF_QUANT_CONFIG_FILE}) for the PyTorch "
                           "backend, which TensorRT engines cannot be built from; serve it with trtspec triton "
                           "--flavor llmapi, or quantize with quantization.output_format trtllm for an engine")
    pp = ConfigFields(config.get("mapping") or {}, cfg_path, "mapping.").int("pp_size", 1)
    if pp != 1 and config.get("architecture") == trtllm.EAGLE_ARCHITECTURE:
        raise TrtspecError(f"{cfg_path}: mapping.pp_size={pp}, but EAGLE engines need pp_size 1 (TRT-LLM asserts "
                           "it; reference §4.2, §9.4); reconvert with tensor parallelism (--tp) instead")
    ckpt = load_checkpoint(path)  # checks rank files, refuses pp > 1 for everything else
    hit = next((n for n in ckpt.names() if n.split(".")[-1] in trtllm.EAGLE3_MARKER_TENSORS), None)
    if hit:
        raise TrtspecError(f"{path}: tensor '{hit}' marks an EAGLE-3 head; {EAGLE3_ROUTE}")
    return ckpt
