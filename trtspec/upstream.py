"""Version-specific facts about the upstream projects, in one place.

Everything here was read from the pinned upstream sources (see the README's "Upstream pins"):
TensorRT-LLM 1.2.x (the last release line with `trtllm-build` and the engine flow), ModelOpt 0.47,
transformers 4.57. When an upstream version changes, this is the module to revisit.
"""

TRTLLM_VERSION = "1.2"  # engine flow (trtllm-build, EagleForCausalLM) is removed after 1.2.x
MODELOPT_VERSION = "0.47.0"
TRANSFORMERS_VERSION = "4.57.6"

# HF `architectures[0]` -> (TRT-LLM `architecture`, family). TRT-LLM's MODEL_MAP maps Mistral onto
# its LLaMA implementation; Qwen2/Qwen3 share QWenForCausalLM and differ by `qwen_type`.
HF_ARCHITECTURES = {
    "LlamaForCausalLM": ("LlamaForCausalLM", "llama"),
    "MistralForCausalLM": ("MistralForCausalLM", "mistral"),
    "Qwen2ForCausalLM": ("Qwen2ForCausalLM", "qwen2"),
    "Qwen3ForCausalLM": ("Qwen3ForCausalLM", "qwen3"),
}
EAGLE_ARCHITECTURE = "EagleForCausalLM"
# EagleForCausalLM subclasses TRT-LLM's LLaMA model: only Llama-type bases can carry an EAGLE-1 head.
EAGLE_BASE_FAMILIES = ("llama", "mistral")

# `Mapping(**d)` rejects unknown keys and the accepted set drifted across versions: write only these.
MAPPING_KEYS = ("world_size", "tp_size", "pp_size")
# `QuantConfig(**d)` rejects unknown keys as well.
QUANT_CONFIG_KEYS = (
    "quant_algo", "kv_cache_quant_algo", "group_size", "smoothquant_val", "clamp_val",
    "use_meta_recipe", "has_zero_point", "pre_quant_scale", "exclude_modules",
)

# Quantized checkpoints trtspec writes and validates (trtllm.md §3.2; all run on H100 / SM90).
TRTSPEC_QUANT_ALGOS = ("FP8", "W8A8_SQ_PER_CHANNEL", "W8A16", "W4A16_AWQ")
TRTSPEC_KV_ALGOS = ("FP8", "INT8")  # KV_CACHE_QUANT_ALGO_LIST minus NVFP4 (SM100 only)
AWQ_DEFAULT_GROUP_SIZE = 128  # QuantConfig.group_size default and ModelOpt's INT4_AWQ_CFG block size
# quantize() excludes these when `exclude_modules` is None; an explicit list replaces them (§3.3).
TRTLLM_DEFAULT_EXCLUDE_MODULES = (
    "*lm_head", "*router", "*vocab_embedding", "*position_embedding", "*block_embedding", "*shared_expert_gate",
)
# ModelOpt 0.47's TRT-LLM export also writes separate k/v scales next to `kv_cache_scaling_factor`
# (a TRT-LLM 0.17 leftover, model_config_utils.split_config_and_weights). TRT-LLM 1.2 reads only
# the merged one; the others are extra tensors it warns about. We accept them when validating.
LEGACY_KV_SCALE_SUFFIXES = ("attention.k_cache_scaling_factor", "attention.v_cache_scaling_factor")
# ModelOpt clamps FP8 KV scales to >= 1.0 (export/quant_utils.get_kv_cache_scaling_factor: "we
# recommend default kv cache scaling factor to be 1"); we write what ModelOpt writes.
FP8_KV_SCALE_FLOOR = 1.0
FP8_E4M3_MAX = 448.0
INT8_MAX = 127.0
INT4_MAX = 7.0

# TRT-LLM parameter dtypes as written in config.json, and their torch names.
DTYPES = ("float16", "bfloat16", "float32")

# EAGLE engine limits (builder.py asserts) and converter defaults (examples/eagle/convert_checkpoint.py).
EAGLE_MAX_DRAFT_LEN_LIMIT = 256
EAGLE_DEFAULT_MAX_DRAFT_LEN = 63
EAGLE_DEFAULT_NUM_LAYERS = 4
EAGLE_DEFAULT_MAX_NON_LEAVES = 10

# Medusa's mc_sim_7b_63 tree: TRT-LLM's default `eagle_choices` (63 nodes, depth 4).
MC_SIM_7B_63 = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0],
    [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0],
    [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5],
    [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9],
    [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0],
    [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
]

# Files that travel with a checkpoint so later stages have a default tokenizer. TRT-LLM ignores them.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "generation_config.json",
)
