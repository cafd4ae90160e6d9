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

# --- EAGLE-3 heads: ModelOpt's training forward and export_speculative_decoding ----------------
# Read from the installed nvidia-modelopt 0.47.0: modelopt/torch/speculative/plugins/hf_eagle.py,
# plugins/modeling_eagle.py, eagle/default_config.py, config.py; export/plugins/hf_spec_export.py,
# hf_spec_configs.py (checkpoints/eagle3.py, tests/runtime/test_eagle3.py).
# Default aux layers (hf_eagle.default_eagle_aux_layer_ids): sorted({1, max(0, n//2 - 1), max(0, n - 4)})
# - a set, so for n = 6 it has two ids where TensorRT-LLM's default tuple has three (the exported
# config names its ids, so the runtime reads them from there).


# Captured state: a forward hook on each aux decoder layer's output (the residual stream after it),
# concatenated in layer order; the head's first input at position j is fc(cat(aux_j)) paired with
# the embedding of token j+1 (inputs shifted left by one, _prepare_eagle_inputs).
# Export (EagleExporter): tensors under their eagle_module names: `layers.{i}.*` (layer 0 also
# `hidden_norm`, `input_layernorm`), `fc.weight`, `norm.weight`, `lm_head.weight` (the base's when
# the head has none), `d2t` (int64, only when draft_vocab_size < vocab_size); config.json
# `architectures: ["LlamaForCausalLMEagle3"]`, `draft_vocab_size`, and
# `eagle_config.eagle_aux_hidden_state_layer_ids`.
EAGLE3_EXPORT_ARCHITECTURE = "LlamaForCausalLMEagle3"
# The exporter writes `rope_scaling` = EagleConfig.eagle_export_rope_scaling (default yarn, factor
# 32, original 2048) when the head was trained with rope_type "default": the exported head then
# runs with a RoPE it was not trained with. Set eagle_export_rope_scaling={} to export what trained.
# Training-forward quirk (modeling_eagle.EagleModule): the first layer's input_layernorm runs on the
# hidden state inside LlamaDecoderLayer and the attention pre-hook then applies hidden_norm to that,
# so ModelOpt trains cat(input_layernorm(e), hidden_norm(input_layernorm(h))) where TensorRT-LLM
# serves cat(input_layernorm(e), hidden_norm(h)). The two agree (to rms-norm eps) only while
# input_layernorm's weight is all ones (tests/runtime/test_eagle3.py keeps it so and checks the difference).

# ---- EAGLE-3 heads trained with modelopt.torch.speculative (train-draft, #17) ----------------------
# Source: NVIDIA/Model-Optimizer 0.47.0 as installed (modelopt/torch/speculative/config.py,
# plugins/hf_eagle.py, plugins/modeling_eagle.py, export/plugins/hf_spec_export.py).
# export_speculative_decoding(model, export_dir=...) writes exactly these two files for an
# unquantized head (EagleExporter.export); `lm_head.weight` is the target's when the head has no own
# (full draft vocabulary), and `d2t` (draft id -> target id offset, target = i + d2t[i]) is present
# when draft_vocab_size < vocab_size.
EAGLE3_EXPORT_FILES = ("config.json", "model.safetensors")  # architecture: EAGLE3_EXPORT_ARCHITECTURE above
# EagleConfig.eagle_use_torch_compile defaults to True: 143 s first step then 2.65 s/step on CPU vs
# ~0.05 s eager (reference/cpu-stack.md §3); eagle_export_rope_scaling defaults to a yarn block the
# head was never trained with, so it is set to {} (export the rope the head was trained with).
EAGLE3_CPU_OVERRIDES = {"eagle_use_torch_compile": False, "eagle_export_rope_scaling": {}}

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
