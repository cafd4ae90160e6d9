"""The `quantization` block of a TRT-LLM checkpoint's config.json, parsed once (trtllm.md §3.1, §3.3).

Every stage reads the same block: the validator (which tensors must exist), the PyTorch runtime
(how to dequantize them), the build planner (rules and the memory estimate), the Triton memory
plan and the cost model. `QuantScheme.from_config` parses and type-checks it; each stage then
checks what *it* supports (`check_written` for what trtspec writes; the runtime, the planner and
the cost model their own sets), because TensorRT-LLM accepts more than any one of them.

Kept torch-free so the cost model and `trtspec --help` do not pay for torch.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from ..errors import TrtspecError
from ..upstream import trtllm
from .config_fields import ConfigFields

# Weight formats stored as int4 pairs along the output dim: [out/2, in] (checkpoints/quant.py).
PACKED_INT4_ALGOS = ("W4A16_AWQ",)


@dataclass(frozen=True)
class QuantScheme:
    """What `config.json`'s `quantization` block says, with TRT-LLM's defaults applied.

    `exclude` holds the module-name patterns quantize() skips: the block's `exclude_modules`, or
    TRT-LLM's defaults when it is null. A scheme trtspec is about to write (calib) lists only the
    linears it keeps in the model dtype; `quantization_block` restates lm_head and TRT-LLM's
    defaults when writing it, because an explicit list replaces them."""

    quant_algo: str | None = None  # a TRT-LLM QuantAlgo name, or None
    kv_cache_quant_algo: str | None = None  # FP8 | INT8 | None on SM90
    group_size: int = trtllm.AWQ_DEFAULT_GROUP_SIZE
    exclude: tuple[str, ...] = ()
    has_zero_point: bool | None = None  # as written (None: absent)
    pre_quant_scale: bool | None = None  # as written (None: absent)
    unknown_keys: tuple[str, ...] = ()  # keys QuantConfig(**d) would reject

    @classmethod
    def from_config(cls, cfg: dict, where: str) -> "QuantScheme":
        """The scheme of a TRT-LLM config (a checkpoint's config.json or an engine's pretrained_config)."""
        return cls.from_block(cfg.get("quantization"), where)

    @classmethod
    def from_block(cls, block: dict | None, where: str) -> "QuantScheme":
        """Parse and type-check a `quantization` block; errors name the field."""
        q = block or {}
        if not isinstance(q, dict):
            raise TrtspecError(f"{where}: field 'quantization' must be an object, got {q!r}")
        for key in ("quant_algo", "kv_cache_quant_algo"):
            if q.get(key) is not None and not isinstance(q[key], str):
                raise TrtspecError(f"{where}: quantization.{key}: expected a QuantAlgo name or null, got {q[key]!r}")
        for key in ("has_zero_point", "pre_quant_scale"):
            if q.get(key) is not None and not isinstance(q[key], bool):
                raise TrtspecError(f"{where}: quantization.{key}: expected true, false or null, got {q[key]!r}")
        exclude = q.get("exclude_modules")
        if exclude is not None and not (isinstance(exclude, list) and all(isinstance(x, str) for x in exclude)):
            raise TrtspecError(f"{where}: quantization.exclude_modules must be a list of module-name patterns, "
                               f"got {exclude!r}")
        # typed, not int()-truncated: 64.9 or "128" is an error naming the field, never 64 or 128
        group = ConfigFields(q, where, "quantization.").int(
            "group_size", trtllm.AWQ_DEFAULT_GROUP_SIZE, expected="an integer >= 1 (input channels per scale)")
        return cls(q.get("quant_algo"), q.get("kv_cache_quant_algo"), group,
                   tuple(trtllm.DEFAULT_EXCLUDE_MODULES if exclude is None else exclude),
                   q.get("has_zero_point"), q.get("pre_quant_scale"),
                   tuple(sorted(set(q) - set(trtllm.QUANT_CONFIG_KEYS))))

    @property
    def quantized(self) -> bool:
        return bool(self.quant_algo or self.kv_cache_quant_algo)

    def is_excluded(self, module: str) -> bool:
        """TRT-LLM's rule: quantize_layers() skips a module whose full name matches a pattern of
        `exclude_modules` with fnmatch.fnmatchcase (quantization/quantize.py, trtllm.md §3.3)."""
        return any(fnmatch.fnmatchcase(module, p) for p in self.exclude)

    def quantizes(self, linear: str) -> bool:
        """Whether TRT-LLM's quantize() replaces the linear module `linear` with a quantized one."""
        return self.quant_algo is not None and not self.is_excluded(linear)

    def check_written(self, where: str) -> None:
        """Refuse a block trtspec does not write or check: keys QuantConfig(**d) would reject,
        formats other than trtspec's, and AWQ other than ModelOpt's symmetric export."""
        if self.unknown_keys:
            raise TrtspecError(f"{where}: quantization.{self.unknown_keys[0]} is not a TensorRT-LLM QuantConfig field "
                               f"(QuantConfig(**d) would raise); allowed: {', '.join(trtllm.QUANT_CONFIG_KEYS)}")
        algo, kv = self.quant_algo, self.kv_cache_quant_algo
        if algo is not None and algo not in trtllm.TRTSPEC_QUANT_ALGOS:
            raise TrtspecError(f"{where}: quantization.quant_algo={algo!r} is not one trtspec writes or checks "
                               f"({', '.join(trtllm.TRTSPEC_QUANT_ALGOS)})")
        if kv is not None and kv not in trtllm.KV_CACHE_QUANT_ALGOS:
            raise TrtspecError(f"{where}: quantization.kv_cache_quant_algo={kv!r}; expected one of "
                               f"{', '.join(trtllm.KV_CACHE_QUANT_ALGOS)} or null")
        if algo in PACKED_INT4_ALGOS and (self.has_zero_point or self.pre_quant_scale is not True):
            raise TrtspecError(f"{where}: {algo} with has_zero_point={self.has_zero_point}, pre_quant_scale="
                               f"{self.pre_quant_scale}: trtspec writes and checks symmetric AWQ with pre-quant "
                               "scales only (has_zero_point false, pre_quant_scale true, as ModelOpt exports)")
