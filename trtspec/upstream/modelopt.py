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

# ---- EAGLE-3 heads trained with modelopt.torch.speculative (train-draft, #17) ----------------------
# Source: NVIDIA/Model-Optimizer 0.47.0 as installed (modelopt/torch/speculative/config.py,
# plugins/hf_eagle.py, plugins/modeling_eagle.py, export/plugins/hf_spec_export.py).
# export_speculative_decoding(model, export_dir=...) writes exactly these two files for an
# unquantized head (EagleExporter.export); `lm_head.weight` is the target's when the head has no own
# (full draft vocabulary), and `d2t` (draft id -> target id offset, target = i + d2t[i]) is present
# when draft_vocab_size < vocab_size.
EAGLE3_EXPORT_FILES = ("config.json", "model.safetensors")
EAGLE3_EXPORT_ARCHITECTURE = "LlamaForCausalLMEagle3"
# EagleConfig.eagle_use_torch_compile defaults to True: 143 s first step then 2.65 s/step on CPU vs
# ~0.05 s eager (reference/cpu-stack.md §3); eagle_export_rope_scaling defaults to a yarn block the
# head was never trained with, so it is set to {} (export the rope the head was trained with).
EAGLE3_CPU_OVERRIDES = {"eagle_use_torch_compile": False, "eagle_export_rope_scaling": {}}
