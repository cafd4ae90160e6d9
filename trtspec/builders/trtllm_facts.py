"""TensorRT-LLM 1.2.x engine-build facts the planner relies on, in one place.

Every fact names where it comes from: a section of the project's TRT-LLM reference
(`reference/trtllm.md`, read from the TensorRT-LLM sources) and, where we read the source itself,
the file. When the pinned TensorRT-LLM moves, this is the module to re-check; nothing else in
`trtspec.builders` hard-codes a TensorRT-LLM default, limit or name.
"""

from __future__ import annotations

# --- Version --------------------------------------------------------------------------------
# trtllm-build and the EAGLE-1/2 engine flow are removed after 1.2.x (§1.1); build.sh refuses
# anything else because defaults and accepted keys drift between versions (§0, §9.1).
TRTLLM_VERSION_PREFIX = "1.2."
TRTLLM_VERSION_LABEL = "1.2.x"
TRTLLM_BUILD = "trtllm-build"
# The GPU architecture the plans are written for: H100/H200 are SM90 (Hopper). FP8 context FMHA
# needs SM >= 89 (§7.2); SM >= 100 refuses INT8 KV / weight-only / SmoothQuant (§7.2).
SM_VERSION = 90

# --- Defaults that drifted across versions: always passed explicitly (§9.15, §7.1) -------------
TOKENS_PER_BLOCK = 32            # 1.x default; 0.9-0.12 used 64 (§7.1)
KV_CACHE_TYPE = "paged"          # --kv_cache_type unset means paged in 1.x; --paged_kv_cache is deprecated (§7.1)
# --use_paged_context_fmha and --use_fp8_context_fmha default to enable in 1.x, disable before
# (§7.1); the planner always writes one or the other.

# --- trtllm-build CLI defaults we override (§7.1, commands/build.py, builder.py BuildConfig) ----
CLI_MAX_BATCH_SIZE = 2048        # far beyond what a KV cache at max_seq_len holds on one H100
CLI_MAX_NUM_TOKENS = 8192
# check_max_num_tokens() (_common.py) warns above this: no expected gain, risk of TensorRT
# tensor-volume errors at run time.
MAX_NUM_TOKENS_ADVISED = 16384
TIMING_CACHE_DEFAULT = "model.cache"  # relative to the CWD, not --output_dir (§7.1, §9.14)

# --- Plugins per quantization (§3.4, §7.1, §7.2) ----------------------------------------------
# gemm_plugin 'auto' = the model dtype. It drives the non-quantized GEMMs (lm_head, and every GEMM
# of a bf16/fp16 model) through cuBLASLt. With FP8 weights, 'auto' keeps the FP8 GEMMs on
# TensorRT's own FP8 kernels: FP8Linear routes through the plugin only for gemm_plugin == 'fp8'
# (quantization/layers.py FP8Linear.forward), and NVIDIA's FP8 guide recommends against the fp8
# GEMM plugin (docs/source/performance/fp8-quantization.md, "we recommend disabling the gemm plugin
# for fp8"). Weight-only / groupwise / SmoothQuant GEMM plugins are switched on by build() from the
# checkpoint's quant mode; there are no flags for them (§7.1).
GEMM_PLUGIN = "auto"
GPT_ATTENTION_PLUGIN = "auto"    # required for paged KV and speculative decoding (§7.1)
# build() keeps FP8 context FMHA only for these weight formats, on SM >= 89 (§7.2, builder.py).
FP8_CONTEXT_FMHA_ALGOS = ("FP8", "W4A8_AWQ", "NVFP4")
# trtllm-build forces use_fused_mlp off unless quant_algo is one of these (§7.1, commands/build.py).
FUSED_MLP_ALGOS = (None, "FP8", "MIXED_PRECISION")

# --- Quantization the H100 plans accept (§3.2) -------------------------------------------------
SUPPORTED_QUANT_ALGOS = (
    None, "FP8", "W8A16", "W4A16", "W4A16_AWQ",
    "W8A8_SQ_PER_CHANNEL", "W8A8_SQ_PER_TENSOR_PLUGIN", "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN",
    "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN", "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN",
)
SMOOTHQUANT_PREFIX = "W8A8_SQ"
BLACKWELL_ONLY_ALGOS = ("NVFP4", "W4A8_NVFP4_FP8", "W4A8_MXFP4_FP8", "W4A8_MXFP4_MXFP8", "W4A16_MXFP4")
SUPPORTED_KV_ALGOS = (None, "FP8", "INT8")  # KV_CACHE_QUANT_ALGO_LIST minus NVFP4 (§3.2)
# quantize() default when exclude_modules is None; an explicit list replaces it (§3.3).
DEFAULT_EXCLUDE_MODULES = ("*lm_head", "*router", "*vocab_embedding", "*position_embedding",
                           "*block_embedding", "*shared_expert_gate")
DEFAULT_GROUP_SIZE = 128  # QuantConfig.group_size (§3.1)

# --- Speculative decoding (§1.2, §4.4-4.5, §5.1, §7.2) -----------------------------------------
SPEC_MODE_EAGLE = "eagle"
SPEC_MODE_DRAFT_TOKENS_EXTERNAL = "draft_tokens_external"
EAGLE_MAX_BATCH_SIZE = 512       # builder.py build(): assert max_batch_size <= 512 for EAGLE
EAGLE_MAX_DRAFT_LEN = 256        # builder.py build(): assert max_draft_len <= 256 for EAGLE
# EagleForCausalLM.prepare_inputs() sizes its inputs from the checkpoint's max_draft_len whatever
# --max_draft_len says (models/eagle/model.py), so the build must use the checkpoint value.
# The draft-target README's typical draft lengths are 4-10; §7.4's example target uses 8.
DTM_DEFAULT_MAX_DRAFT_LEN = 8
# build() adds max_draft_len to max_seq_len for every speculative mode, and num_eagle_layers on
# top for EAGLE (§4.5, builder.py); it raises max_num_tokens to max_batch_size*(max_draft_len+1).
# For EAGLE, paged context FMHA is forced on ("Paged Context FMHA is required for EAGLE").
# INT8 KV disables paged context FMHA ("doesn't work with int8 kv cache currently"), and FP8 KV
# without FP8 weights disables it too (§7.2), which breaks EAGLE and draft-target KV reuse.
# gather_context_logits with max_draft_len > 0 is a hard error in trtllm-build (§5.1).
# Architectures that can carry an EAGLE-1 head: EagleForCausalLM subclasses LLaMA (§4.7).
EAGLE_ARCHITECTURE = "EagleForCausalLM"
# Config keys / architecture spellings that mark EAGLE-3 (no TRT engine flow, §1.2, §9.2).
EAGLE3_MARKER_KEYS = ("draft_vocab_size", "eagle_aux_hidden_state_layer_ids", "eagle3")
EAGLE3_MARKER_TENSORS = ("d2t", "t2d")

# SpeculativeDecodingMode is an IntFlag (models/modeling_utils.py): NONE=1, DRAFT_TOKENS_EXTERNAL=2,
# MEDUSA=4, LOOKAHEAD_DECODING=8, EXPLICIT_DRAFT_TOKENS=16, EAGLE=32 (later members are appended).
# BuildConfig.to_dict() leaves it as the enum, so the engine config.json holds the integer.
SPEC_MODE_FLAGS = {1: None, 2: "draft_tokens_external", 4: "medusa", 8: "lookahead_decoding",
                   16: "explicit_draft_tokens", 32: "eagle"}

# --- Runtime memory facts used by the estimate --------------------------------------------------
# Executor KvCacheConfig.free_gpu_memory_fraction and the Triton backend's
# kv_cache_free_gpu_mem_fraction default: the KV pool takes this share of the memory left after
# the engine is loaded. Draft-target on one GPU: give each engine about half (§5.2).
KV_CACHE_FREE_GPU_MEMORY_FRACTION = 0.9
# Total device memory as nvidia-smi reports it (MiB) for the SXM 80 GB H100 and the 141 GB H200.
GPU_MEMORY_MIB = {"h100": 81559, "h200": 143771}
GPU_NAMES = {"h100": "NVIDIA H100 80GB (SM90)", "h200": "NVIDIA H200 141GB (SM90)"}

# Our runner's per-engine limit (not an upstream fact): a 70B engine takes tens of minutes on an H100.
DEFAULT_BUILD_TIMEOUT_S = 3 * 3600
