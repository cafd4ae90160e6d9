"""TensorRT-LLM 1.2.x: the checkpoint format, `trtllm-build`'s defaults and rules, runtime memory facts.

Every fact names where it comes from: a section of the project's TRT-LLM reference
(`reference/trtllm.md`, read from the TensorRT-LLM sources) and, where we read the source itself,
the file. When the pinned TensorRT-LLM moves, this is the module to re-check.
"""

from __future__ import annotations

# --- Version --------------------------------------------------------------------------------
# trtllm-build and the EAGLE-1/2 engine flow (EagleForCausalLM) are removed after 1.2.x (§1.1);
# build.sh refuses anything else because defaults and accepted keys drift between versions (§0, §9.1).
TRTLLM_VERSION = "1.2"
TRTLLM_VERSION_PREFIX = f"{TRTLLM_VERSION}."
TRTLLM_VERSION_LABEL = f"{TRTLLM_VERSION}.x"
TRTLLM_BUILD = "trtllm-build"
# The GPU architecture the plans are written for: H100/H200 are SM90 (Hopper). FP8 context FMHA
# needs SM >= 89 (§7.2); SM >= 100 refuses INT8 KV / weight-only / SmoothQuant (§7.2).
SM_VERSION = 90

# --- Checkpoint format (§2) -------------------------------------------------------------------
# HF `architectures[0]` -> (TRT-LLM `architecture`, family). TRT-LLM's MODEL_MAP maps Mistral onto
# its LLaMA implementation; Qwen2/Qwen3 share QWenForCausalLM and differ by `qwen_type`.
HF_ARCHITECTURES = {
    "LlamaForCausalLM": ("LlamaForCausalLM", "llama"),
    "MistralForCausalLM": ("MistralForCausalLM", "mistral"),
    "Qwen2ForCausalLM": ("Qwen2ForCausalLM", "qwen2"),
    "Qwen3ForCausalLM": ("Qwen3ForCausalLM", "qwen3"),
}
# Mistral's sliding window is a runtime setting in TensorRT-LLM, not a build one: LLaMAConfig.
# from_hugging_face drops HF's `sliding_window`, and the LLaMA example README runs Mistral-7B-v0.1
# "with sliding window/cache size 4096" as `run.py --max_attention_window_size=4096`
# (examples/models/core/llama/README.md, the Mistral section). A served engine gets it as the
# tensorrt_llm model's `max_attention_window_size` parameter (a template key, upstream.triton; one
# value, as upstream's fill_template examples pass it), a PyTorch-backend LLM as
# `kv_cache_config.max_attention_window` ([W], a list of at least one entry; llmapi/llm_args.py
# KvCacheConfig, whose None means max_seq_len: _torch/pyexecutor/resource_manager.py). trtspec keeps
# `sliding_window` in the checkpoint config.json it writes so that the window reaches the serving
# config; PretrainedConfig takes an unknown key as an attribute with a warning (models/
# modeling_utils.py, "Implicitly setting ..."), which no LLaMA layer reads. Whether the engine flow's
# speculative modes take a window below max_seq_len is UNVERIFIED. What the window saves is priced
# where it is spent: each query reads at most W cached positions (tuning.cost, ModelShape.attention_window),
# and a sequence holds at most kv_tokens_per_sequence tokens (builders.memory).
SLIDING_WINDOW_CONFIG_KEY = "sliding_window"
LLMAPI_ATTENTION_WINDOW_KEY = "max_attention_window"
# `Mapping(**d)` rejects unknown keys and the accepted set drifted across versions: write only these.
MAPPING_KEYS = ("world_size", "tp_size", "pp_size")


# Attention heads on one of tp ranks. Query heads are split evenly: both flows assert
# "num_attention_heads must be divisible by tp_size" (engine: tensorrt_llm/layers/attention.py
# Attention.__init__), and trtspec refuses the rest (checkpoints.sharding.check_tp). KV heads are
# ceil(num_kv_heads / tp_size): fewer KV heads than ranks are replicated (the converters'
# dup_kv_weight, §2.4), so each rank holds one and the KV cache per token per rank stops shrinking at
# tp = num_kv_heads (engine: the same Attention.__init__; PyTorch backend:
# tensorrt_llm/_torch/pyexecutor/resource_manager.py KVCacheManager.num_kv_heads_per_layer).
def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    return -(-num_kv_heads // tp)


# Pipeline parallelism (engine flow). The decoder layers split evenly over the pp stages, the first
# num_layers % pp stages taking one more (tensorrt_llm/mapping.py MappingBase.pp_layers, a
# torch.tensor_split, @b35ac1b6 1.2.0rc2; the C++ runtime's ModelConfig getFirstLocalLayer / getNbLayers
# split the same way, so a rank's KV cache holds its stage's layers only). Rank r is on stage
# r // (tp x cp) (MpiTopology.pp_rank, same file). The models build the vocab embedding on the first stage
# only and ln_f + lm_head on the last (models/llama/model.py, read in a stored 0.x version; the 1.x
# deepseek/grok/gpt-oss models use the same is_first_pp_rank / is_last_pp_rank split), EAGLE's
# eagle_nets on the last too (models/eagle/model.py @89fd9b74).
def pp_layers(num_layers: int, pp: int, stage: int) -> range:
    base, extra = divmod(num_layers, pp)
    first = stage * base + min(stage, extra)
    return range(first, first + base + (1 if stage < extra else 0))


def pp_stage(rank: int, tp: int, cp: int = 1) -> int:
    return rank // (tp * cp)


# TRT-LLM parameter dtypes as written in config.json.
DTYPES = ("float16", "bfloat16", "float32")
# Bytes per element of each (what memory estimates and the step-time model read weights and KV in).
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# --- Quantization (§3) ------------------------------------------------------------------------
# `QuantConfig(**d)` rejects unknown keys as well (§3.1).
QUANT_CONFIG_KEYS = (
    "quant_algo", "kv_cache_quant_algo", "group_size", "smoothquant_val", "clamp_val",
    "use_meta_recipe", "has_zero_point", "pre_quant_scale", "exclude_modules",
)
# Quantized checkpoints trtspec writes and validates (§3.2; all run on H100 / SM90).
TRTSPEC_QUANT_ALGOS = ("FP8", "W8A8_SQ_PER_CHANNEL", "W8A16", "W4A16_AWQ")
# The weight formats H100 plans accept (§3.2).
SUPPORTED_QUANT_ALGOS = (
    None, "FP8", "W8A16", "W4A16", "W4A16_AWQ",
    "W8A8_SQ_PER_CHANNEL", "W8A8_SQ_PER_TENSOR_PLUGIN", "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN",
    "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN", "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN",
)
SMOOTHQUANT_PREFIX = "W8A8_SQ"
BLACKWELL_ONLY_ALGOS = ("NVFP4", "W4A8_NVFP4_FP8", "W4A8_MXFP4_FP8", "W4A8_MXFP4_MXFP8", "W4A16_MXFP4")
# KV_CACHE_QUANT_ALGO_LIST minus NVFP4 (SM100 only) (§3.2).
KV_CACHE_QUANT_ALGOS = ("FP8", "INT8")
# QuantConfig.group_size default (§3.1), also ModelOpt's INT4_AWQ_CFG block size.
AWQ_DEFAULT_GROUP_SIZE = 128
# quantize() skips the modules whose full name matches one of `exclude_modules` with
# fnmatch.fnmatchcase (quantization/quantize.py quantize_layers); when `exclude_modules` is None
# these defaults apply, an explicit list replaces them (§3.3, §9.13).
DEFAULT_EXCLUDE_MODULES = (
    "*lm_head", "*router", "*vocab_embedding", "*position_embedding", "*block_embedding", "*shared_expert_gate",
)

# --- PyTorch backend: ModelOpt unified HF checkpoints (#15 item 5) ------------------------------
# Read from NVIDIA/TensorRT-LLM as stored in the code index (the repository is too large to fetch
# here, and the 1.2 release branch itself could not be read, so "same in 1.2.x" is UNVERIFIED):
# _torch/modules/linear.py @00bbf71e; _torch/attention_backend/trtllm.py in two versions (@00bede19,
# an older one, and a newer one) that agree on the FP8 KV scale below; _torch/model_config.py and
# _torch/models/modeling_speculative.py in several stored versions that agree on what is cited.
# The PyTorch/LLM-API backend loads a directory with `hf_quant_config.json` as a ModelOpt
# checkpoint, and that file wins over config.json's `quantization_config` (which it reads only
# when hf_quant_config.json is absent): _torch/model_config.py ModelConfig.from_pretrained.
HF_QUANT_CONFIG_FILE = "hf_quant_config.json"
# ModelConfig.load_modelopt_quant_config reads exactly these keys of its `quantization` object
# into QuantConfig (other keys are ignored, unlike the engine flow's QuantConfig(**d)).
HF_QUANT_CONFIG_KEYS = ("quant_algo", "kv_cache_quant_algo", "group_size", "exclude_modules")
# The weight formats the PyTorch backend's Linear runs (_torch/modules/linear.py get_quant_method:
# FP8QDQ, FP8 rowwise, FP8 block scales, NVFP4, W4A8 NVFP4/MXFP4, weight-only, W4A16/W4A8 AWQ).
# There is no SmoothQuant (W8A8_SQ_*) linear method: SmoothQuant is engine-flow only.
PYTORCH_QUANT_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_BLOCK_SCALES", "NVFP4", "W4A8_NVFP4_FP8",
                       "W4A8_MXFP4_FP8", "W4A8_MXFP4_MXFP8", "W8A16", "W4A16", "W4A16_AWQ", "W4A8_AWQ")
# FP8 (FP8QDQLinearMethod, linear.py): per linear `weight` float8_e4m3fn [out, in],
# `weight_scale` float32 scalar, `input_scale` float32 scalar (static per-tensor activation
# scale; absent = dynamic per-tensor). y = cublas_scaled_mm(fp8(x / input_scale), weight,
# input_scale, weight_scale, out_dtype=model dtype) + bias.
# Fused q/k/v (and gate/up) take input_scale = max and weight_scale = max over the parts, and each
# part is requantized: fp8 -> model dtype, * own scale, / max scale -> fp8 (rescale_fused_weights).
HF_FP8_LINEAR_TENSORS = ("weight", "weight_scale", "input_scale")
# KV-cache scales ModelOpt writes next to the projections: `...self_attn.k_proj.k_scale`,
# `...v_proj.v_scale` (float32 scalars, amax / 448). The PyTorch backend loads them into
# qkv_proj.kv_scales only for the NVFP4 KV cache; for an FP8 KV cache its TrtllmAttention passes
# kv_cache_scaling_factor = 1.0 (attention_backend/trtllm.py: "modules/attention.py only assigns
# forward_args.kv_scale_* for fp4 KV cache"), i.e. K and V are cast to FP8 unscaled.
HF_KV_SCALE_TENSORS = ("k_proj.k_scale", "v_proj.v_scale")
PYTORCH_FP8_KV_CACHE_SCALE = 1.0
# LLM API KvCacheConfig.dtype defaults to "auto": "follow checkpoint metadata" (llmapi/llm_args.py),
# so model.yaml needs no KV setting for a checkpoint whose hf_quant_config.json names an FP8 KV cache.
LLMAPI_KV_CACHE_DTYPE = "auto"
# EAGLE-3 drafter: the backend opens speculative_model_dir with ModelConfig.from_pretrained, so a
# drafter directory's own hf_quant_config.json is read (its linears run the format it names), and
# the drafter's kv_cache_quant_algo is then overwritten with the target's (one KV cache):
# _torch/models/modeling_speculative.py, the one-model EAGLE-3 path. End to end with an FP8
# target it is reported broken upstream (open issue below); not verified on a GPU here.
EAGLE3_FP8_TARGET_ISSUE = "https://github.com/NVIDIA/TensorRT-LLM/issues/7842"

# RotaryScalingType (tensorrt_llm/functional.py): the `rotary_scaling` types a checkpoint's config
# may name. Older versions look the name up as it is and refuse anything else ("Unsupported rotary
# scaling type"); later ones also map transformers' "default" to none. Null is none in all, so an
# unscaled RoPE is written as null (checkpoints/config_fields.py).
ROTARY_SCALING_TYPES = ("none", "linear", "dynamic", "longrope", "llama3", "yarn", "mrope")

# --- Speculative decoding (§1.2, §4, §5.1, §7.2) -------------------------------------------------
# The PyTorch backend (the LLM API's, the llmapi flavor's) has no EAGLE-1 drafter and no EAGLE tree:
# its "Eagle" decoding type is EAGLE-3, drafting a chain (§1's mode table; _torch/speculative/
# interface.py's SpeculativeDecodingMode: MTP, EAGLE3, EAGLE3_ONE_MODEL, NGRAM, DRAFT_TARGET, ...).
# trtspec's modes it serves:
PYTORCH_SPEC_MODES = ("eagle3", "draft-target", "ngram")
SPEC_MODE_EAGLE = "eagle"
SPEC_MODE_DRAFT_TOKENS_EXTERNAL = "draft_tokens_external"
# EagleForCausalLM subclasses TRT-LLM's LLaMA model (§4.7): only Llama-type bases can carry an
# EAGLE-1 head, and its drafter nets are LLaMA decoders (models/eagle/model.py).
EAGLE_ARCHITECTURE = "EagleForCausalLM"
EAGLE_NET_ARCHITECTURE = "LlamaForCausalLM"
EAGLE_BASE_FAMILIES = ("llama", "mistral")
# Config keys / tensor names that mark EAGLE-3 (no TRT engine flow, §1.2, §9.2).
EAGLE3_MARKER_KEYS = ("draft_vocab_size", "eagle_aux_hidden_state_layer_ids", "eagle3")
EAGLE3_MARKER_TENSORS = ("d2t", "t2d")
# EAGLE engine limits: builder.py build() asserts max_batch_size <= 512 and max_draft_len <= 256.
EAGLE_MAX_BATCH_SIZE = 512
EAGLE_MAX_DRAFT_LEN_LIMIT = 256
# Converter defaults (examples/eagle/convert_checkpoint.py).
EAGLE_DEFAULT_MAX_DRAFT_LEN = 63
EAGLE_DEFAULT_NUM_LAYERS = 4
EAGLE_DEFAULT_MAX_NON_LEAVES = 10
# What EagleConfig (models/eagle/config.py @0382a8ac) assumes when an EAGLE config.json omits a field:
# max_draft_len 63 and max_non_leaves_per_layer 10 (the converter's), but num_eagle_layers 1, not 4.
# A null is passed through as None (build() then fails), so only absence means the default.
EAGLE_CONFIG_DEFAULT_NUM_LAYERS = 1
# Medusa's mc_sim_7b_63 tree: TRT-LLM's default `eagle_choices` (63 nodes, depth 4).
MC_SIM_7B_63 = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0],
    [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0],
    [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5],
    [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9],
    [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0],
    [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
]
# EagleForCausalLM.prepare_inputs() sizes its inputs from the checkpoint's max_draft_len whatever
# --max_draft_len says (models/eagle/model.py), so the build must use the checkpoint value.
# The draft-target README's typical draft lengths are 4-10; §7.4's example target uses 8.
DTM_DEFAULT_MAX_DRAFT_LEN = 8
# The draft-target README's support matrix (examples/draft_target_model/README.md @567239fc):
# "FP16 / BF16 / FP8 (both draft and target model)". Other weight formats (SmoothQuant, weight-only,
# AWQ) build, but are not exercised there.
DTM_SUPPORTED_QUANT_ALGOS = (None, "FP8")
# build() adds max_draft_len to max_seq_len for every speculative mode, and num_eagle_layers on
# top for EAGLE (§4.5, builder.py); it raises max_num_tokens to max_batch_size*(max_draft_len+1).
# For EAGLE, paged context FMHA is forced on ("Paged Context FMHA is required for EAGLE").
# INT8 KV disables paged context FMHA ("doesn't work with int8 kv cache currently"), and FP8 KV
# without FP8 weights disables it too (§7.2), which breaks EAGLE and draft-target KV reuse.
# gather_context_logits with max_draft_len > 0 is a hard error in trtllm-build (§5.1).

# N-gram drafting, PyTorch backend (read in NVIDIA/TensorRT-LLM's indexed sources; #15 item 3):
# - llmapi/llm_args.py, the 1.2-line version (its MTP config warns the flag "will do nothing in
#   release 1.3"): NGramDecodingConfig(decoding_type "NGram"; max_draft_len required > 0 by
#   validate_ngram_config; max_matching_ngram_size: PositiveInt = 2; is_keep_all = True;
#   is_use_oldest = True; is_public_pool = True); linear chain only (max_total_draft_tokens =
#   max_draft_len); supports_backend == "pytorch". The earlier 1.1-era version declares
#   `max_matching_ngram_size: int = 0` (no usable default), older ones 4 (prompt_lookup_num_tokens=2)
#   or 3, so trtspec always writes the value explicitly. Whether 1.2.1 is byte-identical: unverified.
# - _torch/speculative/ngram.py NGramPoolManager.get_draft_tokens (1.x versions, e.g. @02499765):
#   pool update from prefix[start_index:], pattern sizes min(n, len(prefix) - 1)..1, match = the up
#   to max_draft_len following tokens; a pattern's matches are replaced when new (or, keep_all off,
#   when the new match is longer than the oldest kept), else a new distinct match is appended after
#   dropping the kept matches shorter than it; query the longest pattern ending the prefix, oldest
#   ([0]) or newest ([-1]) match, cut at prompt + max_new_tokens - 1 - len(prefix); start_index =
#   max(0, len(prefix) - (max_draft_len + n - 1)); no match -> [] (empty draft). Private pools are
#   dropped when their request completes; the public pool is never pruned. INFERRED from that code:
#   a pattern's oldest match is always one of its longest, so is_keep_all=False changes nothing.
# - NGramDrafter.prepare_draft_tokens drafts for generation requests only (the first token comes
#   from the context phase), and the 1.x py_executor then calls Drafter.pad_draft_tokens_for_cuda_graph
#   unconditionally: every draft is padded to max_draft_len with token id 0, which the target
#   verifies (a step is always max_draft_len + 1 tokens) and TorchSampler's exact match could accept
#   when the target's own next token is 0. trtspec's runtime pads with dead nodes instead (same block
#   width, never accepted): the profiled AL equals the served one except at such id-0 tokens.
# - Engine flow, examples/ngram/run_dtm_ngram.py @77bcb5a5 (`--ngram_config "[max_draft_len,
#   max_matching_ngram_size, [gpus]]"` on a draft_tokens_external target): its NgramPool is
#   per request (no public pool), replaces a pattern's match whenever the kept one is shorter than
#   max_draft_len, does not cut drafts at the last position, and drafts [end_id] when nothing
#   matches. trtspec's trtllm flavor orchestrates with the PyTorch backend's pool rules above (one
#   semantics for profile, llmapi, trtllm and cpu flavors), not with that example's.
NGRAM_DEFAULT_MAX_MATCHING_NGRAM_SIZE = 2
NGRAM_DEFAULT_KEEP_ALL = True
NGRAM_DEFAULT_USE_OLDEST = True
NGRAM_DEFAULT_PUBLIC_POOL = True

# SpeculativeDecodingMode is an IntFlag (models/modeling_utils.py): NONE=1, DRAFT_TOKENS_EXTERNAL=2,
# MEDUSA=4, LOOKAHEAD_DECODING=8, EXPLICIT_DRAFT_TOKENS=16, EAGLE=32 (later members are appended).
# BuildConfig.to_dict() leaves it as the enum, so the engine config.json holds the integer.
SPEC_MODE_FLAGS = {1: None, 2: "draft_tokens_external", 4: "medusa", 8: "lookahead_decoding",
                   16: "explicit_draft_tokens", 32: "eagle"}

# --- Defaults that drifted across versions: always passed explicitly (§9.15, §7.1) -------------
TOKENS_PER_BLOCK = 32            # 1.x default; 0.9-0.12 used 64 (§7.1)
KV_CACHE_TYPE = "paged"          # --kv_cache_type unset means paged in 1.x; --paged_kv_cache is deprecated (§7.1)
# --use_paged_context_fmha and --use_fp8_context_fmha default to enable in 1.x, disable before
# (§7.1); the planner always writes one or the other.

# --- trtllm-build CLI defaults we override (§7.1, commands/build.py, builder.py BuildConfig) ----
CLI_MAX_BATCH_SIZE = 2048        # far beyond what a KV cache at max_seq_len holds on one H100
CLI_MAX_NUM_TOKENS = 8192
# check_max_num_tokens() (_common.py) warns above this: no expected gain, risk of TensorRT
# tensor-volume errors at run time. It also clips max_num_tokens to max_batch_size x max_seq_len and,
# with context FMHA on, raises it to tokens_per_block, for every build; _init_max_seq_len (builder.py)
# runs it before build() applies the speculative floor above, and clips max_input_len to max_seq_len.
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
# Gate/up GEMMs are fused only for these quant_algos. commands/build.py @65f1d153 main() sets use_fused_mlp
# False for any other quant_algo, but only in the kwargs that build_model() never reads; what holds is
# models/modeling_utils.py fuse_gate_mlp, which skips (leaves unfused) every GatedMLP whose fc is
# quantized with anything but FP8. The plan writes the flag off for the rest so the engine says so.
FUSED_MLP_ALGOS = (None, "FP8", "MIXED_PRECISION")

# --- Runtime memory facts used by the estimate --------------------------------------------------
# Executor KvCacheConfig.free_gpu_memory_fraction and the Triton backend's
# kv_cache_free_gpu_mem_fraction default: the KV pool takes this share of the memory left after
# the engine is loaded. Draft-target on one GPU: give each engine about half (§5.2).
KV_CACHE_FREE_GPU_MEMORY_FRACTION = 0.9
# Total device memory as nvidia-smi reports it (MiB) for the SXM 80 GB H100 and the 141 GB H200.
GPU_MEMORY_MIB = {"h100": 81559, "h200": 143771}
GPU_NAMES = {"h100": "NVIDIA H100 80GB (SM90)", "h200": "NVIDIA H200 141GB (SM90)"}

# KV-cache tokens one sequence holds under a sliding window W below the engine's max_seq_len, read in
# NVIDIA/TensorRT-LLM cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp as stored in the code index,
# in two generations (no commit tied to the v1.2.x tag, so which one 1.2.x ships is UNVERIFIED):
# - cyclic (older stored versions, e.g. @002ba6a7): a sequence's blocks are ceil((W + sink bubble
#   + temporary window) / tokens_per_block) (one block more only with beam search), the temporary
#   window being min(max_num_tokens, max_input_len - W) when paged context FMHA is on and
#   max_input_len > W, else 0 (BlockManager ctor's maxBlocksPerSeq; WindowBlockManager::
#   calculateTemporaryAttentionWindow in kvCacheManager.h);
# - linear (@b35ac1b6, PR #6768 "Support SWA KV cache"): the block table spans max_seq_len, the whole
#   prompt is allocated at addSequence, and while generating a front block is released once the
#   sequence holds W + tokens_per_block tokens (WindowBlockManager::adjustBlocksIfNeeded), so at
#   most ceil(W / tokens_per_block) + 1 blocks.
# Neither adds the draft length: draft tokens enter only the one-step lookahead
# (getNeededBlocksOneStep), and the window is clamped to max_seq_len, which already counts
# max_draft_len. The sink bubble is 0: no trtspec config sets sink_token_length. The scheduler's
# reservation (getRemainingBlocksToCompletion) uses min(prompt + output, W + temporary window).
# kv_tokens_per_sequence takes the larger of the two generations' peaks (INFERRED conservative reading).


def kv_tokens_per_sequence(max_seq_len: int, window: int | None, max_input_len: int) -> int:
    """Most KV-cache tokens one sequence of an engine holds (see the fact above): max_seq_len without
    a window below it; else the whole longest prompt (its context phase) or the window plus one block,
    whichever is more, in whole blocks. max_input_len bounds both generations' context-phase peak."""
    if not window or window >= max_seq_len:
        return max_seq_len
    block = TOKENS_PER_BLOCK
    whole_blocks = -(-max(max_input_len, window) // block) * block
    return min(max_seq_len, max(whole_blocks, -(-window // block) * block + block))


# --- EAGLE-3 heads in the PyTorch backend (checkpoints/eagle3.py, runtime/eagle3.py) -----------
# Read in NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/speculative/eagle3.py @001e6700 (a 1.x version
# with "currently Eagle3 only supports linear tree"; the index holds no commit we could tie to the
# v1.2.x tag, so each fact below is from that file, cross-checked where noted against the newest
# stored modeling_speculative.py @00679c66; facts we could not check for 1.2 say UNVERIFIED).
# Default target layers whose outputs (hidden + residual, i.e. the residual stream after the layer)
# are captured when EagleDecodingConfig.eagle3_layers_to_capture is unset; <= 5 layers raise
# "Not enough hidden layers for default EAGLE3 capture" (Eagle3OneModelSpecMetadata.__post_init__).
# Note it is a tuple: 6 layers give (1, 2, 2) (three slots, one repeated), unlike ModelOpt's set.
def eagle3_default_capture(num_layers: int) -> tuple[int, ...]:
    return (1, num_layers // 2 - 1, num_layers - 4)


EAGLE3_MIN_LAYERS_FOR_DEFAULT = 6
# Whether 1.2 reads the head's own `eagle_config.eagle_aux_hidden_state_layer_ids`: UNVERIFIED (the
# spec metadata takes EagleDecodingConfig.eagle3_layers_to_capture: llmapi/llm_args.py
# EagleDecodingConfig and _torch/speculative/utils.py get_spec_metadata, versions read in the index,
# no commit tied to 1.2); the llmapi flavor writes the head's ids there only when they differ from
# the default, so both readings agree and a 1.2 without the field is never sent it needlessly.
EAGLE3_LAYERS_FIELD = "eagle3_layers_to_capture"
# Head config keys (modeling_speculative.py Eagle3DraftModel / Eagle3ForCausalLM @00679c66):
# `draft_vocab_size` is required in 1.2: the 1.2.0rc2 version (_torch/models/modeling_speculative.py
# @b35ac1b6, Eagle3ForCausalLM.__init__ / Eagle3DraftModel.__init__) reads
# `pretrained_config.draft_vocab_size` as an attribute, which a head config.json without the key lacks
# (AttributeError), and the two-model path picks the EAGLE-3 class only for a config that has it
# (_torch/models/modeling_auto.py AutoModelForCausalLM: hasattr(..., "draft_vocab_size")).
# A JSON null is read as vocab_size by both. Main (@00679c66) also takes a missing key as vocab_size,
# with a warning. `target_hidden_size` (the fc input is
# num_capture_layers * target_hidden_size; the head gets its own embed_tokens only when it differs
# from hidden_size, else the target's embedding is shared); `bias` (fc bias, default False);
# `num_hidden_layers` (decoder layers of the head: `midlayer`, a list when > 1).
EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "EAGLE3LlamaForCausalLM")
EAGLE3_DRAFT_VOCAB_KEY = "draft_vocab_size"  # required by 1.2 (see above)
EAGLE3_FC_BIAS_KEY = "bias"  # the fc is built Linear(..., bias=config.bias): an fc.bias tensor is read only then
# Tensor names: single-layer heads use `midlayer.*`; `layers.0.*` is renamed to `midlayer.*`
# (Eagle3ForCausalLM.load_weights) on main (@00679c66). 1.2-line note: the 1.2.0rc2 load_weights
# (@b35ac1b6) has no such rename (it only prefixes `model.`), so a `layers.0.*` head (ModelOpt 0.47's
# export) may not load there; whether 1.2.x final has the rename is UNVERIFIED, so train-draft writes
# `midlayer.*` (drafts/head.py), which both load. A head `lm_head` is
# loaded when present, else the target's
# (load_lm_head_from_target). `d2t` [draft_vocab] int offsets exist when draft_vocab_size !=
# vocab_size: target id = draft id + d2t[draft id] (Eagle3OneModelWorker.draft_decoder). `t2d` is
# not read.
# Layer (Eagle3DecoderLayer, first layer): residual = h; x = cat(input_layernorm(embeds),
# hidden_norm(h)) of width 2H into q/k/v (qkv in_features 2H); h = residual + o_proj(attn);
# h = h + mlp(post_attention_layernorm(h)); then norm(h) -> lm_head; the pre-norm h is what the next
# draft step gets as its hidden state (hidden_states_to_save). fc is applied only when the hidden
# width is not hidden_size (apply_eagle3_fc): the first draft forward gets fc(cat(aux)), later ones
# the head's own saved state.
# Drafting (Eagle3OneModelWorker.forward): a linear chain of max_draft_len argmax tokens; the first
# draft forward runs the pairs (token j+1, captured state j) for the accepted tokens, later ones one
# token each at position + 1. Greedy acceptance: cumprod(draft == target argmax).
EAGLE3_TREE = False  # "currently Eagle3 only supports linear tree" / "static tree" (is_spec_dec_tree False)

# --- FP8 GEMMs (#16 item 1, runtime/quant.py fp8_gemm) --------------------------------------------
# Read in the code index (facts only): tensorrt_llm/_torch/modules/linear.py FP8QDQLinearMethod.apply
# (NVIDIA/TensorRT-LLM, version stored in the index, no commit tied to 1.2): with a static
# input_scale the input is quantized by torch.ops.tensorrt_llm.static_quantize_e4m3_per_tensor(x,
# input_scale), then cublas_scaled_mm(q, weight.t(), scale_a=input_scale, scale_b=weight_scale,
# bias=None, out_dtype=model dtype) (cuda_scaled_mm for M <= 8 where enabled), and the bias is added
# to the output afterwards. The quantize kernel (cpp/tensorrt_llm/common/cudaFp8Utils.cu @106ff7ce,
# scaleMatrix / scaleMatrixPerTensorVec, QuantizeMode::PER_TENSOR) computes float(x) * (1 / s) and
# converts with __NV_SATFINITE, i.e. saturates to ±448 (e4m3's largest finite value). The runtime
# divides by s instead (x / s, as TensorRT's Quantize layer of the engine flow does); the two round
# differently only where x / s lies within a float32 ulp of an FP8 rounding boundary.
# cuBLASLt's FP8 GEMM behind torch._scaled_mm wants both dims of the weight divisible by 16 and the
# second operand column-major (torch's own checks, not TRT-LLM's); FP8 tensor cores exist from SM 8.9.

# --- Speculative step costs: what the cost model's EAGLE terms rest on (#16 item 4) -----------------
# (trtspec/tuning/cost.py, trtspec/tuning/gpus.py FRAMEWORKS, scripts/bench_published_setups.py.)
# EAGLE-3 fc on the first draft pass only: see "apply_eagle3_fc" in the block above (TensorRT-LLM
# _torch/models/modeling_speculative.py: "run a matmul to reduce the dimensionality of the hidden
# states on the first pass through the draft model"). The cost model reads fc on level 0 only.
EAGLE3_FC_FIRST_PASS = True
