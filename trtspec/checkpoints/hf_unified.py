"""One view of ModelOpt's unified Hugging Face checkpoint (`export_hf_checkpoint`), the format the
TensorRT-LLM PyTorch / LLM-API backend loads pre-quantized models from.

A directory is such a checkpoint when it has `hf_quant_config.json` next to an HF `config.json`
(the backend's own test, upstream.trtllm.HF_QUANT_CONFIG_FILE). The view holds the decoder spec
(read from config.json like any HF model), the `quantization` object of hf_quant_config.json
parsed by the same QuantScheme as the TRT-LLM block (only the keys the backend reads matter:
upstream.trtllm.HF_QUANT_CONFIG_KEYS; `exclude_modules` holds HF module names), and the tensors
under their HF names, read lazily. `load_hf_unified` checks, from the headers alone, that every
quantized linear carries the tensors the backend reads for its format, with their dtypes, so a
broken directory is refused by tensor name before anything runs.

`open_checkpoint` opens either format: this view, or the TRT-LLM one (trtllm_ckpt.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import TrtspecError
from ..fsutil import read_json
from ..upstream import trtllm
from .safetensors_io import WeightSource, open_weights
from .scheme import QuantScheme
from .spec import DecoderSpec, spec_from_hf
from .trtllm_ckpt import TrtllmCheckpoint, is_hf_unified, load_checkpoint

# The HF module names of a Llama-family layer's linears, per fused group the backend builds.
QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")
LINEARS = tuple(f"self_attn.{n}" for n in (*QKV, "o_proj")) + tuple(f"mlp.{n}" for n in (*GATE_UP, "down_proj"))
# What each weight format of this view must carry per quantized linear (name suffix -> dtypes).
FP8_TENSORS = {"weight": (torch.float8_e4m3fn,), "weight_scale": (torch.float32,), "input_scale": (torch.float32,)}
# W4A16_AWQ: int4 pairs in uint8 along the output dim ([out/2, in], as ModelOpt 0.47 exports k_proj
# [kv_out/2, H]), [out, in/group] float32 scales (pre_quant_scale only
# where ModelOpt could not fold it into the preceding norm: o_proj, down_proj).
AWQ_TENSORS = {"weight": (torch.uint8, torch.int8), "weight_scale": (torch.float32, torch.float16, torch.bfloat16)}
TENSORS = {"FP8": FP8_TENSORS, "W4A16_AWQ": AWQ_TENSORS}


@dataclass(frozen=True, eq=False)
class HfUnifiedCheckpoint:
    path: Path
    hf_config: dict  # config.json
    quant_config: dict  # hf_quant_config.json
    spec: DecoderSpec
    quant: QuantScheme  # hf_quant_config.json `quantization`
    dtype: str  # config.json torch_dtype: the unquantized tensors' dtype
    weights: WeightSource
    eagle_spec: None = None

    @property
    def config(self) -> dict:
        """The fields a TRT-LLM checkpoint's config.json gives its readers (cost model, EAGLE limits),
        in that vocabulary: architecture, dtype, the `quantization` block (HF module names in
        exclude_modules), an unsharded mapping."""
        return {"architecture": self.spec.architecture, "dtype": self.dtype,
                "quantization": dict(self.quant_config["quantization"]),
                "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1}}

    @property
    def quant_algo(self) -> str | None:
        return self.quant.quant_algo

    @property
    def kv_cache_quant_algo(self) -> str | None:
        return self.quant.kv_cache_quant_algo

    @property
    def is_eagle(self) -> bool:
        return False

    def where(self, key: str) -> str:
        """`.../hf_quant_config.json: key`, for errors that name a quantization field."""
        return f"{self.path / trtllm.HF_QUANT_CONFIG_FILE}: {key}"

    def names(self) -> list[str]:
        return sorted(self.weights.names())

    def __contains__(self, name: str) -> bool:
        return name in self.weights

    def tensor(self, name: str) -> torch.Tensor:
        if name not in self.weights:
            raise TrtspecError(f"{self.path}: missing tensor '{name}'")
        return self.weights.get(name)

    def quantizes(self, module: str) -> bool:
        """Whether `module` (an HF module name) is quantized: quant_algo set and not excluded."""
        return self.quant.quantizes(module)

    def linear_modules(self) -> list[str]:
        return [f"model.layers.{i}.{n}" for i in range(self.spec.num_layers) for n in LINEARS]


def _dtype(config: dict, where: Path) -> str:
    dtype = config.get("torch_dtype", config.get("dtype"))
    if dtype not in trtllm.DTYPES:  # the dtypes the PyTorch backend (and the runtime) compute in
        raise TrtspecError(f"{where}: field 'torch_dtype' is {dtype!r}, expected one of {list(trtllm.DTYPES)}")
    return dtype


def _check_tensors(view: HfUnifiedCheckpoint) -> None:
    """Every quantized linear carries what the backend reads for the format (header check)."""
    need = TENSORS.get(view.quant_algo, {})
    for module in view.linear_modules():
        if not view.quantizes(module):
            continue
        for suffix, dtypes in need.items():
            name = f"{module}.{suffix}"
            if name not in view.weights:
                raise TrtspecError(f"{view.path}: missing tensor '{name}' (quant_algo {view.quant_algo})")
            got = view.weights.infos[name].dtype if name in view.weights.infos else view.weights.get(name).dtype
            if got not in dtypes:
                raise TrtspecError(f"{view.path}: tensor '{name}' is {str(got).removeprefix('torch.')}, expected "
                                   f"{str(dtypes[0]).removeprefix('torch.')} (quant_algo {view.quant_algo})")
    if view.kv_cache_quant_algo is not None:
        for i in range(view.spec.num_layers):
            for suffix in trtllm.HF_KV_SCALE_TENSORS:
                name = f"model.layers.{i}.self_attn.{suffix}"
                if name not in view.weights:
                    raise TrtspecError(f"{view.path}: missing tensor '{name}' (kv_cache_quant_algo "
                                       f"{view.kv_cache_quant_algo})")


def load_hf_unified(path: Path) -> HfUnifiedCheckpoint:
    """Open a unified HF checkpoint directory (headers only; tensors are read on demand)."""
    path = Path(path)
    qfile = path / trtllm.HF_QUANT_CONFIG_FILE
    qcfg = read_json(qfile, "ModelOpt hf_quant_config.json")
    block = qcfg.get("quantization") if isinstance(qcfg, dict) else None
    if not isinstance(block, dict):
        raise TrtspecError(f"{qfile}: expected an object with a 'quantization' object (ModelOpt's "
                           "export_hf_checkpoint writes one)")
    config = read_json(path / "config.json", "HF config.json")
    view = HfUnifiedCheckpoint(path, config, qcfg, spec_from_hf(path),
                               QuantScheme.from_block(block, str(qfile)), _dtype(config, path / "config.json"),
                               open_weights(path))
    _check_tensors(view)
    return view


def open_checkpoint(path: Path) -> TrtllmCheckpoint | HfUnifiedCheckpoint:
    """A TRT-LLM checkpoint or a ModelOpt unified HF checkpoint, by what the directory holds."""
    return load_hf_unified(path) if is_hf_unified(path) else load_checkpoint(path)
