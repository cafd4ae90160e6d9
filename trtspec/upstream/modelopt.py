"""ModelOpt 0.47: what its TensorRT-LLM export writes, which trtspec's quantized export reproduces.

Read from the pinned ModelOpt sources (modelopt/torch/export); when ModelOpt moves, re-check here.
"""

from __future__ import annotations

MODELOPT_VERSION = "0.47.0"

# ModelOpt 0.47's TRT-LLM export also writes separate k/v scales next to `kv_cache_scaling_factor`
# (a TRT-LLM 0.17 leftover, model_config_utils.split_config_and_weights). TRT-LLM 1.2 reads only
# the merged one; the others are extra tensors it warns about. We accept them when validating.
LEGACY_KV_SCALE_SUFFIXES = ("attention.k_cache_scaling_factor", "attention.v_cache_scaling_factor")
# ModelOpt clamps FP8 KV scales to >= 1.0 (export/quant_utils.get_kv_cache_scaling_factor: "we
# recommend default kv cache scaling factor to be 1"); we write what ModelOpt writes.
FP8_KV_SCALE_FLOOR = 1.0
# The largest magnitudes of the quantized formats the scales are computed against
# (export/quant_utils: amax / 448 for float8_e4m3fn, / 127 for int8, / 7 for int4).
FP8_E4M3_MAX = 448.0
INT8_MAX = 127.0
INT4_MAX = 7.0

# --- Unified HF export (export_hf_checkpoint; #15 item 5), read from modelopt/torch/export ------
# unified_export_hf.py, quant_utils.py of the installed 0.47.0.
# The exporter quantizes each weight from `weight.to(dtype)` but leaves unquantized tensors in the
# model's own dtype, so the model is cast before the export (calib.hf_export).
# FP8 projections that share an input (q/k/v, gate/up) are not unified: _fuse_shared_input_modules
# skips QUANTIZATION_FP8, so each keeps its own weight_scale (the PyTorch backend requantizes the
# fused group to the largest); their input scales agree because calibration saw the same input.
# KV-cache scales are written as `k_proj.k_scale` / `v_proj.v_scale` = amax / 448 with no floor
# (quant_utils.postprocess_state_dict), unlike the TRT-LLM export's FP8_KV_SCALE_FLOOR.
HF_KV_SCALE_MAXBOUND = 448.0
# The one transformers-side quantization marker the export puts in config.json.
HF_QUANT_METHOD = "modelopt"
