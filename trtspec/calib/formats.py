"""The quantization formats `trtspec quantize` accepts, and the ModelOpt recipe behind each.

Only formats an H100 (SM90) engine can run are accepted:

| --format   | quant_algo          | ModelOpt recipe (mtq)             | calibration                     |
|------------|---------------------|-----------------------------------|---------------------------------|
| fp8        | FP8                 | FP8_DEFAULT_CFG (max)             | weight + input amax             |
| int8_sq    | W8A8_SQ_PER_CHANNEL | INT8_SMOOTHQUANT_CFG (smoothquant)| smoothing, weight + input amax  |
| w8a16      | W8A16               | none                              | none (trtllm-build quantizes)   |
| w4a16_awq  | W4A16_AWQ           | INT4_AWQ_CFG (awq_lite)           | AWQ scale search, group amax    |

`--kv-cache fp8|int8` adds 8-bit quantizers on the attention's K and V (after RoPE, what the KV
cache stores): ModelOpt's FP8_KV_CFG, or the same pattern with 8-bit integers.

FP4 formats (nvfp4, mxfp4, w4a16_mxfp4, w4a8_nvfp4_fp8, w4a8_mxfp4_fp8, mxfp8, an nvfp4 KV
cache) need Blackwell (SM100) tensor cores and are refused with that reason.

`output_format: hf` (ModelOpt's unified HF checkpoint, for the PyTorch / LLM-API backend) takes
the formats that backend runs (upstream.trtllm.PYTORCH_QUANT_ALGOS) and ModelOpt exports on the
CPU: fp8 and w4a16_awq, with an fp8 KV cache or none (`check_hf_format`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from ..errors import TrtspecError
from ..upstream.trtllm import PYTORCH_QUANT_ALGOS


@dataclass(frozen=True)
class QuantFormat:
    name: str  # --format value
    quant_algo: str  # TRT-LLM QuantAlgo
    modelopt_cfg: str | None  # attribute of modelopt.torch.quantization; None: no weight calibration
    description: str


FORMATS = {
    "fp8": QuantFormat("fp8", "FP8", "FP8_DEFAULT_CFG", "FP8 E4M3 weights and activations, per-tensor scales"),
    "int8_sq": QuantFormat("int8_sq", "W8A8_SQ_PER_CHANNEL", "INT8_SMOOTHQUANT_CFG",
                           "INT8 SmoothQuant: per-channel int8 weights, per-tensor int8 activations"),
    "w8a16": QuantFormat("w8a16", "W8A16", None, "INT8 weight-only (quantized by trtllm-build)"),
    "w4a16_awq": QuantFormat("w4a16_awq", "W4A16_AWQ", "INT4_AWQ_CFG", "INT4 AWQ weight-only, per-group scales"),
}
KV_FORMATS = {"fp8": "FP8", "int8": "INT8"}
SM100_ONLY = ("nvfp4", "mxfp4", "w4a16_mxfp4", "w4a8_nvfp4_fp8", "w4a8_mxfp4_fp8", "mxfp8", "nvfp4_awq",
              "w4a16_nvfp4", "nvfp4_svdquant")
# ModelOpt / TRT-LLM example spellings of the formats we do accept, for a helpful refusal.
ALIASES = {"int8_wo": "w8a16", "int4_awq": "w4a16_awq", "w8a8_sq_per_channel": "int8_sq", "int8": "int8_sq",
           "smoothquant": "int8_sq", "awq": "w4a16_awq", "fp8_per_tensor": "fp8"}
# H100-capable formats trtspec does not write (yet), with the reason.
NOT_SUPPORTED = {
    "int4_wo": "INT4 weight-only without AWQ scales loses more accuracy than w4a16_awq at the same size",
    "w4a8_awq": "W4A8 AWQ checkpoints are not written by trtspec",
    "fp8_pc_pt": "FP8 per-channel/per-token (rowwise) is not written by trtspec",
}


def check_format(name: str, field: str = "quantization.format") -> QuantFormat:
    """The format named `name`, or TrtspecError saying why not and what to use instead (naming `field`)."""
    key = name.strip().lower()
    if key in FORMATS:
        return FORMATS[key]
    accepted = ", ".join(FORMATS)
    if key in SM100_ONLY:
        raise TrtspecError(f"{field}: {name}: FP4/MX formats need Blackwell (SM100) tensor cores; an H100 (SM90) "
                           f"engine cannot run them. Use one of {accepted} (fp8 is the H100 default)")
    if key in ALIASES:
        raise TrtspecError(f"{field}: {name}: unknown format; this is ModelOpt's/TRT-LLM's name for "
                           f"{field} {ALIASES[key]}")
    if key in NOT_SUPPORTED:
        raise TrtspecError(f"{field}: {name}: {NOT_SUPPORTED[key]}; use one of {accepted}")
    raise TrtspecError(f"{field}: unknown format {name!r}; expected one of {accepted}")


def check_kv_format(name: str | None) -> str | None:
    """The TRT-LLM kv_cache_quant_algo for `--kv-cache` (None: the KV cache stays in the model dtype)."""
    if name is None or name.strip().lower() in ("", "none"):
        return None
    key = name.strip().lower()
    if key in KV_FORMATS:
        return KV_FORMATS[key]
    if key in ("nvfp4", "fp4"):
        raise TrtspecError(f"quantization.kv_cache: {name}: an NVFP4 KV cache needs Blackwell (SM100); an H100 "
                           "cannot run it. Use quantization.kv_cache fp8")
    raise TrtspecError(f"quantization.kv_cache: expected fp8 or int8 (or leave it out for a model-dtype KV cache), "
                           f"got {name!r}")


def modelopt_config(fmt: QuantFormat, kv_algo: str | None, group_size: int, disabled: list[dict] | None = None
                    ) -> dict | None:
    """The `mtq.quantize` config for this request, or None when nothing needs calibrating
    (w8a16 without a KV format). KV quantizers are ModelOpt's `*[kv]_bmm_quantizer` pattern.
    `disabled`: entries that switch quantizers off (mixed.exclusion_config), appended last so
    they win over the format's patterns, as ModelOpt applies quant_cfg entries in order."""
    # lazy: modelopt takes ~7 s to import, and `trtspec run` imports calib even when quantize is skipped
    import modelopt.torch.quantization as mtq

    if fmt.modelopt_cfg is None and kv_algo is None:
        return None
    if fmt.modelopt_cfg is None:  # weights stay full precision: only the KV quantizers run
        cfg = {"quant_cfg": [{"quantizer_name": "*", "enable": False}], "algorithm": "max"}
    else:
        cfg = copy.deepcopy(getattr(mtq, fmt.modelopt_cfg))
    if fmt.quant_algo == "W4A16_AWQ":
        for entry in cfg["quant_cfg"]:
            if entry.get("quantizer_name") == "*weight_quantizer":
                entry["cfg"]["block_sizes"][-1] = group_size
    if kv_algo == "FP8":
        cfg["quant_cfg"] = cfg["quant_cfg"] + copy.deepcopy(mtq.FP8_KV_CFG["quant_cfg"])
    elif kv_algo == "INT8":
        cfg["quant_cfg"] = cfg["quant_cfg"] + [{"quantizer_name": "*[kv]_bmm_quantizer",
                                                "cfg": {"num_bits": 8, "axis": None}}]
    if disabled:
        cfg["quant_cfg"] = cfg["quant_cfg"] + list(disabled)
    return cfg


# Why the other formats are not written as a unified HF checkpoint (output_format: hf).
HF_NOT_WRITTEN = {
    "W8A8_SQ_PER_CHANNEL": "the PyTorch backend has no SmoothQuant linear (W8A8_SQ_* runs in the engine flow only)",
    "W8A16": "trtspec's w8a16 leaves the weights to trtllm-build, which the PyTorch backend does not run",
}


def check_hf_format(fmt: QuantFormat, kv_algo: str | None) -> None:
    """Refuse what ModelOpt's unified HF checkpoint cannot carry for the PyTorch backend on H100."""
    if fmt.quant_algo in HF_NOT_WRITTEN or fmt.quant_algo not in PYTORCH_QUANT_ALGOS:
        ok = ", ".join(n for n, f in FORMATS.items() if f.quant_algo in PYTORCH_QUANT_ALGOS
                       and f.quant_algo not in HF_NOT_WRITTEN)
        why = HF_NOT_WRITTEN.get(fmt.quant_algo, "not a PyTorch-backend format")
        raise TrtspecError(f"quantization.format: {fmt.name} with quantization.output_format hf: {why}; use one "
                           f"of {ok} (or quantization.output_format trtllm)")
    if kv_algo not in (None, "FP8"):
        raise TrtspecError(f"quantization.kv_cache: {kv_algo.lower()} with quantization.output_format hf: ModelOpt's "
                           "unified HF export writes FP8 (or NVFP4) KV-cache scales only; use quantization.kv_cache "
                           "fp8")
