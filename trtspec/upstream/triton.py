"""The pinned Triton TensorRT-LLM backend (DESIGN.md "Pinned upstream"): model configs, parameters, launching.

Pinned release: TensorRT-LLM 1.2.x (the last release line with `trtllm-build` engines), served by the
Triton TensorRT-LLM backend that ships with it (`NVIDIA/TensorRT-LLM:triton_backend/`, container
`nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3`, whose Dockerfile pins TENSORRTLLM_VER=1.2.1).

Where the facts come from (reference/triton.md, read from upstream sources; no template text is
copied into the project, only the names, types and shapes below):
- `tensorrt_llm` inputs / outputs: the v0.19.0 template of `tensorrtllm_backend` (§1.2, §1.3) with
  the 1.x changes listed in §0.1: `min_length` -> `min_tokens`, `random_seed` -> `seed`, new inputs
  `return_num_input_tokens` / `return_num_output_tokens`, new outputs `num_input_tokens` /
  `num_output_tokens`, and `prompt_embedding_table` typed by a placeholder (we fill it with the
  engine dtype). Checked against the `triton_backend` template of TensorRT-LLM 1.x.
  `prompt_ignore_length` (TRT-LLM PR #13633, 2026-04) is later than 1.2.1 and is not included.
- Parameter keys and how the C++ backend parses each (`model_state.cc`, `model_instance_state.cc`,
  §1.1): numbers and booleans go through `std::stoi` / `std::stof` / the True/False set inside a
  `try`, so an empty string is the documented default; lists (`gpu_device_ids`,
  `participant_ids`) are split on `;` with `std::getline`, so an empty string gives no entries
  (= unset); `tokenizer_dir`, `guided_decoding_backend`, `xgrammar_tokenizer_info_path` must exist
  as keys (read outside any `try`); `gpt_model_type` must be a valid batching type;
  `eagle_choices` / `medusa_choices` are parsed by `csvStrToVecVecInt`, which accepts only the
  brace form `{0},{0,1}` (§3.5).

`tests/upstream/test_triton.py` cross-checks these tables against the v0.19.0 reference templates
when `/work/shared/reference/upstream-triton` is present (and skips otherwise); nothing here reads
that directory at run time.
"""

from __future__ import annotations

from typing import NamedTuple

from .trtllm import EAGLE3_LAYERS_FIELD, LLMAPI_ATTENTION_WINDOW_KEY

TRITON_CONTAINER = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"
BACKEND = "tensorrtllm"

# The stock tritonserver inside that container and the executor worker the backend spawns in
# orchestrator mode (a literal absolute path in the upstream template).
CONTAINER_TRITONSERVER = "/opt/tritonserver/bin/tritonserver"
EXECUTOR_WORKER_PATH = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"


class Tensor(NamedTuple):
    name: str
    data_type: str  # a model_config_pb2.DataType name
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None  # `reshape: { shape: [ ] }` is ()
    optional: bool = False
    ragged: bool = False  # allow_ragged_batch


def _scalar(name: str, dtype: str, optional: bool = True) -> Tensor:
    """The common `dims: [ 1 ]`, `reshape: { shape: [ ] }` request scalar."""
    return Tensor(name, dtype, (1,), (), optional)


# Placeholders for data types that the generator fills per deployment.
LOGITS_DTYPE = "${logits_datatype}"
ENCODER_FEATURES_DTYPE = "${encoder_input_features_data_type}"
PROMPT_TABLE_DTYPE = "${prompt_embedding_table_data_type}"

# `tensorrt_llm` inputs of the pinned release, in template order.
TENSORRT_LLM_INPUTS: tuple[Tensor, ...] = (
    Tensor("input_ids", "TYPE_INT32", (-1,), None, True, True),
    Tensor("encoder_input_features", ENCODER_FEATURES_DTYPE, (-1, -1), None, True, True),
    _scalar("encoder_output_lengths", "TYPE_INT32"),
    _scalar("input_lengths", "TYPE_INT32", optional=False),
    _scalar("request_output_len", "TYPE_INT32", optional=False),
    _scalar("num_return_sequences", "TYPE_INT32"),
    Tensor("draft_input_ids", "TYPE_INT32", (-1,), None, True, True),
    Tensor("decoder_input_ids", "TYPE_INT32", (-1,), None, True, True),
    _scalar("decoder_input_lengths", "TYPE_INT32"),
    Tensor("draft_logits", LOGITS_DTYPE, (-1, -1), None, True, True),
    _scalar("draft_acceptance_threshold", "TYPE_FP32"),
    _scalar("end_id", "TYPE_INT32"),
    _scalar("pad_id", "TYPE_INT32"),
    Tensor("stop_words_list", "TYPE_INT32", (2, -1), None, True, True),
    Tensor("bad_words_list", "TYPE_INT32", (2, -1), None, True, True),
    Tensor("embedding_bias", "TYPE_FP32", (-1,), None, True, True),
    _scalar("beam_width", "TYPE_INT32"),
    _scalar("temperature", "TYPE_FP32"),
    _scalar("runtime_top_k", "TYPE_INT32"),
    _scalar("runtime_top_p", "TYPE_FP32"),
    _scalar("runtime_top_p_min", "TYPE_FP32"),
    _scalar("runtime_top_p_decay", "TYPE_FP32"),
    _scalar("runtime_top_p_reset_ids", "TYPE_INT32"),
    _scalar("len_penalty", "TYPE_FP32"),
    _scalar("early_stopping", "TYPE_BOOL"),
    _scalar("repetition_penalty", "TYPE_FP32"),
    _scalar("min_tokens", "TYPE_INT32"),
    _scalar("beam_search_diversity_rate", "TYPE_FP32"),
    _scalar("presence_penalty", "TYPE_FP32"),
    _scalar("frequency_penalty", "TYPE_FP32"),
    _scalar("seed", "TYPE_UINT64"),
    _scalar("return_log_probs", "TYPE_BOOL"),
    _scalar("return_context_logits", "TYPE_BOOL"),
    _scalar("return_generation_logits", "TYPE_BOOL"),
    _scalar("return_perf_metrics", "TYPE_BOOL"),
    _scalar("return_num_input_tokens", "TYPE_BOOL"),
    _scalar("return_num_output_tokens", "TYPE_BOOL"),
    _scalar("exclude_input_in_output", "TYPE_BOOL"),
    _scalar("stop", "TYPE_BOOL"),
    _scalar("streaming", "TYPE_BOOL"),
    Tensor("prompt_embedding_table", PROMPT_TABLE_DTYPE, (-1, -1), None, True, True),
    Tensor("prompt_table_extra_ids", "TYPE_UINT64", (-1,), None, True, True),
    _scalar("prompt_vocab_size", "TYPE_INT32"),
    Tensor("cross_attention_mask", "TYPE_BOOL", (-1, -1), None, True, True),
    Tensor("mrope_rotary_cos_sin", "TYPE_FP32", (-1,), None, True),
    Tensor("mrope_position_deltas", "TYPE_INT64", (1,), None, True),
    _scalar("lora_task_id", "TYPE_UINT64"),
    Tensor("lora_weights", "TYPE_FP16", (-1, -1), None, True, True),
    Tensor("lora_config", "TYPE_INT32", (-1, 3), None, True, True),
    Tensor("context_phase_params", "TYPE_UINT8", (-1,), None, True, True),
    Tensor("skip_cross_attn_blocks", "TYPE_BOOL", (1,), None, True, True),
    Tensor("retention_token_range_starts", "TYPE_INT32", (-1,), None, True, True),
    Tensor("retention_token_range_ends", "TYPE_INT32", (-1,), None, True, True),
    Tensor("retention_token_range_priorities", "TYPE_INT32", (-1,), None, True, True),
    Tensor("retention_token_range_durations_ms", "TYPE_INT32", (-1,), None, True, True),
    Tensor("retention_decode_priority", "TYPE_INT32", (1,), None, True, True),
    Tensor("retention_decode_duration_ms", "TYPE_INT32", (1,), None, True, True),
    Tensor("guided_decoding_guide_type", "TYPE_STRING", (1,), None, True, True),
    Tensor("guided_decoding_guide", "TYPE_STRING", (1,), None, True, True),
    Tensor("lookahead_window_size", "TYPE_INT32", (1,), None, True, True),
    Tensor("lookahead_ngram_size", "TYPE_INT32", (1,), None, True, True),
    Tensor("lookahead_verification_set_size", "TYPE_INT32", (1,), None, True, True),
)

TENSORRT_LLM_OUTPUTS: tuple[Tensor, ...] = (
    Tensor("output_ids", "TYPE_INT32", (-1, -1)),
    Tensor("sequence_length", "TYPE_INT32", (-1,)),
    Tensor("cum_log_probs", "TYPE_FP32", (-1,)),
    Tensor("output_log_probs", "TYPE_FP32", (-1, -1)),
    Tensor("context_logits", LOGITS_DTYPE, (-1, -1)),
    Tensor("generation_logits", LOGITS_DTYPE, (-1, -1, -1)),
    Tensor("batch_index", "TYPE_INT32", (1,)),
    Tensor("sequence_index", "TYPE_INT32", (1,)),
    Tensor("context_phase_params", "TYPE_UINT8", (-1,)),
    Tensor("kv_cache_alloc_new_blocks", "TYPE_INT32", (1,)),
    Tensor("kv_cache_reused_blocks", "TYPE_INT32", (1,)),
    Tensor("kv_cache_alloc_total_blocks", "TYPE_INT32", (1,)),
    Tensor("arrival_time_ns", "TYPE_INT64", (1,)),
    Tensor("first_scheduled_time_ns", "TYPE_INT64", (1,)),
    Tensor("first_token_time_ns", "TYPE_INT64", (1,)),
    Tensor("last_token_time_ns", "TYPE_INT64", (1,)),
    Tensor("acceptance_rate", "TYPE_FP32", (1,)),
    Tensor("total_accepted_draft_tokens", "TYPE_INT32", (1,)),
    Tensor("total_draft_tokens", "TYPE_INT32", (1,)),
    Tensor("num_input_tokens", "TYPE_INT32", (1,)),
    Tensor("num_output_tokens", "TYPE_INT32", (1,)),
)

# Parameter keys of `tensorrt_llm`, in template order. `enable_trt_overlap` is commented out in
# some 1.x revisions and active in others; the C++ backend reads it inside a `try` either way, so
# we always write it (false).
TENSORRT_LLM_PARAMETERS: tuple[str, ...] = (
    "max_beam_width", "FORCE_CPU_ONLY_INPUT_TENSORS", "gpt_model_type", "gpt_model_path", "encoder_model_path",
    "max_tokens_in_paged_kv_cache", "max_attention_window_size", "sink_token_length", "batch_scheduler_policy",
    "kv_cache_free_gpu_mem_fraction", "cross_kv_cache_fraction", "kv_cache_host_memory_bytes",
    "kv_cache_onboard_blocks", "enable_trt_overlap", "exclude_input_in_output", "cancellation_check_period_ms",
    "stats_check_period_ms", "iter_stats_max_iterations", "request_stats_max_iterations", "enable_kv_cache_reuse",
    "normalize_log_probs", "enable_chunked_context", "gpu_device_ids", "participant_ids", "num_nodes",
    "lora_cache_optimal_adapter_size", "lora_cache_max_adapter_size", "lora_cache_gpu_memory_fraction",
    "lora_cache_host_memory_bytes", "lora_prefetch_dir", "decoding_mode", "executor_worker_path",
    "lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size", "medusa_choices",
    "eagle_choices", "gpu_weights_percent", "enable_context_fmha_fp32_acc", "multi_block_mode", "cuda_graph_mode",
    "cuda_graph_cache_size", "speculative_decoding_fast_logits", "tokenizer_dir", "guided_decoding_backend",
    "xgrammar_tokenizer_info_path",
)

# How the C++ backend reads each key (for the validator): kind, and whether "" means "use the default".
PARAM_KIND: dict[str, str] = {
    "max_beam_width": "int", "FORCE_CPU_ONLY_INPUT_TENSORS": "str", "gpt_model_type": "batching",
    "gpt_model_path": "path", "encoder_model_path": "optional_path", "max_tokens_in_paged_kv_cache": "int",
    "max_attention_window_size": "int_list", "sink_token_length": "int", "batch_scheduler_policy": "policy",
    "kv_cache_free_gpu_mem_fraction": "fraction", "cross_kv_cache_fraction": "fraction",
    "kv_cache_host_memory_bytes": "int", "kv_cache_onboard_blocks": "bool", "enable_trt_overlap": "bool",
    "exclude_input_in_output": "bool", "cancellation_check_period_ms": "int", "stats_check_period_ms": "int",
    "iter_stats_max_iterations": "int", "request_stats_max_iterations": "int", "enable_kv_cache_reuse": "bool",
    "normalize_log_probs": "bool", "enable_chunked_context": "bool", "gpu_device_ids": "id_lists",
    "participant_ids": "id_lists", "num_nodes": "int", "lora_cache_optimal_adapter_size": "int",
    "lora_cache_max_adapter_size": "int", "lora_cache_gpu_memory_fraction": "fraction",
    "lora_cache_host_memory_bytes": "int", "lora_prefetch_dir": "optional_path", "decoding_mode": "decoding_mode",
    "executor_worker_path": "str", "lookahead_window_size": "int", "lookahead_ngram_size": "int",
    "lookahead_verification_set_size": "int", "medusa_choices": "choices", "eagle_choices": "choices",
    "gpu_weights_percent": "fraction", "enable_context_fmha_fp32_acc": "bool", "multi_block_mode": "bool",
    "cuda_graph_mode": "bool", "cuda_graph_cache_size": "int", "speculative_decoding_fast_logits": "bool",
    "tokenizer_dir": "str", "guided_decoding_backend": "guided_backend", "xgrammar_tokenizer_info_path": "str",
}
# Read outside any try/catch: the key must exist (an empty value is fine).
REQUIRED_PARAMETER_KEYS = ("gpt_model_type", "tokenizer_dir", "guided_decoding_backend",
                           "xgrammar_tokenizer_info_path")
BATCHING_TYPES = ("V1", "v1", "inflight_batching", "inflight_fused_batching")
SCHEDULER_POLICIES = ("max_utilization", "guaranteed_no_evict")
DECODING_MODES = ("top_k", "top_p", "top_k_top_p", "beam_search", "medusa", "redrafter", "lookahead", "eagle")
BOOL_STRINGS = ("True", "true", "TRUE", "1", "False", "false", "FALSE", "0")
TRUE_STRINGS = ("True", "true", "TRUE", "1")
# Structural placeholders of the template (protobuf fields, must be filled for the file to parse).
STRUCTURAL_PLACEHOLDERS = ("triton_backend", "triton_max_batch_size", "decoupled_mode",
                           "max_queue_delay_microseconds", "max_queue_size", "encoder_input_features_data_type",
                           "logits_datatype", "prompt_embedding_table_data_type")

# Differences between the v0.19.0 reference templates and the pinned 1.x release (for the
# cross-check test; §0.1 of the reference).
RENAMED_SINCE_V0_19 = {"min_length": "min_tokens", "random_seed": "seed"}
INPUTS_ADDED_SINCE_V0_19 = ("return_num_input_tokens", "return_num_output_tokens")
OUTPUTS_ADDED_SINCE_V0_19 = ("num_input_tokens", "num_output_tokens")
PARAMETERS_ADDED_SINCE_V0_19 = ("enable_trt_overlap",)  # commented out in v0.19.0
DTYPE_PLACEHOLDERS_ADDED_SINCE_V0_19 = {"prompt_embedding_table": PROMPT_TABLE_DTYPE}  # TYPE_FP16 in v0.19.0

# The genai-perf release `trtspec perf --export-genai-perf` writes commands for and that the facts below
# were read from: PyPI `genai-perf==0.0.16`, built from perf_analyzer branch r25.08 @2586c440 (it drives
# perf_analyzer 2.51, the binary the tritonclient==2.51.0 wheel ships; scripts/bench_genai_perf.py).
GENAI_PERF_VERSION = "0.0.16"

# genai-perf 0.0.16's `--backend tensorrtllm` payload (perf_analyzer branch r25.08 @2586c440, the 0.0.16
# release, genai_perf/inputs/converters/tensorrtllm_converter.py `_add_request_params`; unchanged on
# main @263c5f6e, 2025-12-15; reference triton.md §5.3): with a user-set `--output-tokens-mean`,
# `--output-tokens-mean-deterministic` adds `min_length` = [that request's max_tokens], the 0.x name
# of what 1.x calls min_tokens (RENAMED_SINCE_V0_19). Its tensorrtllm_engine converter sends the
# same `min_length` beside request_output_len.
GENAI_PERF_MIN_TOKENS_INPUT = "min_length"

# Engine dtype (config.json) -> Triton data type, for the prompt-table placeholder.
ENGINE_DTYPE_TO_TRITON = {"float16": "TYPE_FP16", "bfloat16": "TYPE_BF16", "float32": "TYPE_FP32"}

# ---- llmapi (PyTorch / LLM API backend: all_models/llmapi/tensorrt_llm) --------------------------
# config.pbtxt: `backend: "python"`, no max_batch_size (the model.yaml `triton_config` decides),
# inputs `text_input` + `sampling_param_*`; model.py (shipped by TensorRT-LLM, not by us) builds
# `LLM(**model.yaml minus triton_config)`.
# The request scalars its helpers.py turns into SamplingParams (get_sampling_params_from_request:
# `sampling_param_<arg>` -> <arg>; `sampling_param_stop` is read as a tensor beside them), read at
# NVIDIA/TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/1/helpers.py @0df60f9a and the
# earliest version the code index holds; every stored TensorRT-LLM version names `best_of`. v0.19.0's
# `sampling_param_beam_width` was renamed `sampling_param_best_of` in tensorrtllm_backend c2e65b8
# (2025-05-13, "Update TensorRT-LLM backend", config.pbtxt and helpers.py), before the backend moved
# into TensorRT-LLM 1.x. `return_perf_metrics` (and a `stop` BOOL input) are in the stored template
# @c8c6df08; whether 1.2.x has them is UNVERIFIED, so the config we write does not declare them.
LLMAPI_SAMPLING_PARAM_ARGS = ("best_of", "temperature", "top_k", "top_p", "frequency_penalty", "presence_penalty",
                              "max_tokens", "seed", "exclude_input_from_output", "return_perf_metrics")
LLMAPI_RENAMED_SINCE_V0_19 = {"sampling_param_beam_width": "sampling_param_best_of"}
LLMAPI_INPUTS: tuple[Tensor, ...] = (
    Tensor("text_input", "TYPE_STRING", (-1,)),
    Tensor("streaming", "TYPE_BOOL", (1,), None, True),
    Tensor("sampling_param_best_of", "TYPE_INT32", (1,), None, True),
    Tensor("sampling_param_temperature", "TYPE_FP32", (1,), None, True),
    Tensor("sampling_param_top_k", "TYPE_INT32", (1,), None, True),
    Tensor("sampling_param_top_p", "TYPE_FP32", (1,), None, True),
    Tensor("sampling_param_frequency_penalty", "TYPE_FP32", (1,), None, True),
    Tensor("sampling_param_presence_penalty", "TYPE_FP32", (1,), None, True),
    Tensor("sampling_param_max_tokens", "TYPE_INT32", (1,), None, True),
    Tensor("sampling_param_stop", "TYPE_STRING", (-1,), None, True),
    Tensor("sampling_param_seed", "TYPE_UINT64", (1,), None, True),
    Tensor("sampling_param_exclude_input_from_output", "TYPE_BOOL", (1,), None, True),
    Tensor("return_finish_reason", "TYPE_BOOL", (1,), None, True),
    Tensor("return_stop_reason", "TYPE_BOOL", (1,), None, True),
    Tensor("return_cumulative_logprob", "TYPE_BOOL", (1,), None, True),
)
LLMAPI_OUTPUTS: tuple[Tensor, ...] = (
    Tensor("text_output", "TYPE_STRING", (-1,)),
    Tensor("finish_reason", "TYPE_STRING", (-1,)),
    Tensor("stop_reason", "TYPE_STRING", (-1,)),
    Tensor("cumulative_logprob", "TYPE_FP32", (-1,)),
)
# What the llmapi model streams (LLMAPI_MODEL_DIR's model.py `_create_response`, read at commits
# 044a90d2 and, in tensorrtllm_backend, dbae4e88): every response's text_output is
# `CompletionOutput.text`, the whole completion so far (tensorrt_llm/executor/result.py: `text_diff`
# is the new part), with no token ids or counts. generate forwards the new suffix and counts tokens
# itself (models/generate.py _llmapi).
LLMAPI_TEXT_IS_CUMULATIVE = True
# Each llmapi model is its own LLM() (its own executor process) on the GPU, and KvCacheConfig's
# free_gpu_memory_fraction ("Default is 90%", llmapi/llm_args.py; upstream.trtllm
# KV_CACHE_FREE_GPU_MEMORY_FRACTION) is a share of the memory free when that LLM sizes its KV cache:
# with the default, the first model takes 90% and the next cannot load its weights. model.yaml
# carries `kv_cache_config: {free_gpu_memory_fraction: ...}` for an LLM argument like any other.
LLMAPI_KV_CACHE_CONFIG = "kv_cache_config"
LLMAPI_FREE_GPU_MEMORY_FRACTION = "free_gpu_memory_fraction"
# model.yaml: keys map to `LLM()` arguments; `speculative_config` is a *DecodingConfig mapping with
# `decoding_type`, `max_draft_len` and `speculative_model_dir`. INFERRED for 1.2.x (no llm_args.py
# could be tied to a 1.2 tag; the tensorrtllm_backend pins of 1.2.0rc0..rc7 and v1.2.1 are not in the
# code index): an EAGLE-3 head is `decoding_type: Eagle` on the PyTorch backend. EagleDecodingConfig
# ran EAGLE-3 there (eagle3_one_model) before TensorRT-LLM PR 10124 (opened 2025-12-18, after
# 1.2.0rc6) added `Eagle3` / Eagle3DecodingConfig and kept `Eagle` as a deprecated spelling that
# PyTorch converts with a warning; the 1.2.0rc0 docs index lists no Eagle3DecodingConfig; PR 5146's
# one-model recipe and NVIDIA's DGX Spark playbook on the 1.2.0rc6 and 1.3.0rc12 containers write
# `Eagle` for EAGLE-3 heads. So `Eagle` loads on both sides of the change, `Eagle3` likely not on
# 1.2.x. `speculative_model_dir` likewise: PR 10099 renamed it `speculative_model` and kept it as an
# alias. Check on a 1.2.x host: `python -c "import tensorrt_llm.llmapi as m; print(hasattr(m,
# 'Eagle3DecodingConfig'))"`.
LLMAPI_MODEL_FILE = "model.yaml"
LLMAPI_DECODING_EAGLE3 = "Eagle"
LLMAPI_DECODING_DRAFT_TARGET = "DraftTarget"
LLMAPI_SPEC_MODEL_KEY = "speculative_model_dir"
# TensorRT-LLM ships the model code, not trtspec: the files of this directory of its 1.2 sources go into
# each llmapi model's 1/. model.py reads its request tensors through `from helpers import ...`
# (get_sampling_params_from_request, get_streaming_from_request, ...; model.py @044a90d2, helpers.py
# @0df60f9a sits beside it), so model.py alone does not load; upstream's docs/llmapi.md copies the directory.
LLMAPI_MODEL_DIR = "triton_backend/all_models/llmapi/tensorrt_llm/1"
LLMAPI_MODEL_FILES = ("model.py", "helpers.py")
# NGramDecodingConfig (llmapi/llm_args.py, 1.2 line; upstream.trtllm NGRAM_* has the semantics):
# decoding_type "NGram", max_draft_len, and the pool settings under these names.
LLMAPI_DECODING_NGRAM = "NGram"
LLMAPI_NGRAM_KEYS = {"max_matching_ngram_size": "max_matching_ngram_size", "keep_all": "is_keep_all",
                     "use_oldest": "is_use_oldest", "public_pool": "is_public_pool"}
# What model.yaml may carry. The LLM API models are StrictBaseModels (extra="forbid"): any other key
# fails LLM() when the model loads. Read in NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py, the
# 1.2-era version the code index holds (SaveState/AUTO decoding types, max_total_draft_tokens; no commit
# tied to a 1.2 tag): DecodingBaseConfig.from_dict maps decoding_type "Eagle", "NGram", "DraftTarget"
# (every stored 1.x version; "Draft_Target" is only the class's ClassVar, which from_dict does not
# accept) and pops it; EagleDecodingConfig.eagle3_one_model defaults True, so a one-model EAGLE-3
# needs no key. The llmapi model.py (@b35ac1b6, 1.2.0rc2) passes the yaml minus triton_config through
# llm_utils.update_llm_args_with_extra_dict (speculative_config -> DecodingBaseConfig.from_dict,
# kv_cache_config -> KvCacheConfig(**d)) to LLM(**args), and reads triton_config's decoupled and
# max_batch_size (both required) and cancellation_check_period_ms.
_SPEC_BASE_FIELDS = ("decoding_type", "max_draft_len", "max_total_draft_tokens", LLMAPI_SPEC_MODEL_KEY,
                     "max_concurrency", "load_format", "acceptance_window", "acceptance_length_threshold")
LLMAPI_SPEC_FIELDS = {
    LLMAPI_DECODING_EAGLE3: _SPEC_BASE_FIELDS + (
        "eagle_choices", "greedy_sampling", "posterior_threshold", "use_dynamic_tree", "dynamic_tree_max_topK",
        "num_eagle_layers", "max_non_leaves_per_layer", "eagle3_one_model", EAGLE3_LAYERS_FIELD),
    LLMAPI_DECODING_NGRAM: _SPEC_BASE_FIELDS + tuple(LLMAPI_NGRAM_KEYS.values()),
    LLMAPI_DECODING_DRAFT_TARGET: _SPEC_BASE_FIELDS,
}
LLMAPI_KV_CACHE_FIELDS = (
    "enable_block_reuse", "max_tokens", LLMAPI_ATTENTION_WINDOW_KEY, "sink_token_length",
    LLMAPI_FREE_GPU_MEMORY_FRACTION, "host_cache_size", "onboard_blocks", "cross_kv_cache_fraction", "secondary_offload_min_priority",
    "event_buffer_max_size", "attention_dp_events_gather_period_ms", "enable_partial_reuse", "copy_on_partial_reuse",
    "use_uvm", "max_gpu_total_bytes", "dtype", "mamba_ssm_cache_dtype", "tokens_per_block")

# ---- launching (reference §6.2) -----------------------------------------------------------------
# `scripts/launch_triton_server.py` get_cmd (NVIDIA/TensorRT-LLM triton_backend/scripts/, read @0a2e2c1f;
# tensorrtllm_backend 0b9d7d5 pins TENSORRTLLM_VER=1.2.1 and points its docs at this script): unless
# --no-mpi, `mpirun --allow-run-as-root` and per rank `-n 1 tritonserver ...
# --backend-config=python,shm-region-prefix-name=prefix<rank>_` (ranks joined by `:`). Leader mode: one
# rank per GPU of the engine (world size = TP x PP); ranks != 0 load only the TensorRT-LLM models.
# Orchestrator mode (TRTLLM_ORCHESTRATOR=1) is needed to serve several TensorRT-LLM models from one
# server (draft + target, or several EAGLE profiles): one tritonserver, world size 1, the backend spawns
# its executor workers.
MPIRUN = ("mpirun", "--allow-run-as-root")
ORCHESTRATOR_ENV = {"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1"}
# What launch_triton_server.py --multi-model adds for orchestrator mode on Triton newer than 24.06
# (add_multi_model_config, @0a2e2c1f): no pinned pool, no peer access, and a zero CUDA memory pool
# (`--cuda-memory-pool-byte-size=<gpu>:0`) on every GPU `nvidia-smi --list-gpus` lists, so the spawned
# executor processes, not tritonserver, hold the device memory. trtspec's container sees only the
# engine's GPUs (`docker --gpus device=...`), so zeroing those is zeroing every GPU, as upstream does.
ORCHESTRATOR_SERVER_FLAGS = ("--pinned-memory-pool-byte-size=0", "--enable-peer-access=false")
ORCHESTRATOR_CUDA_POOL_FLAG = "--cuda-memory-pool-byte-size={gpu}:0"
# A TensorRT-LLM model's `gpu_device_ids` (one instance) names exactly TP x PP x CP GPUs: the backend
# always passes num_nodes (default 1; model_instance_state.cc getParallelConfigFromParams @c8c6df08),
# and the executor then requires len(deviceIds) x num_nodes == tp x pp x cp (executorImpl.cpp
# initializeWorkers @b35ac1b6, 1.2.0rc2), so a TP-1 draft given the TP-2 target's "0,1" fails to load.
PYTHON_SHM_PREFIX = "prefix{rank}_"
# The LLM-API model (tensorrtllm_backend docs/llmapi.md @0b9d7d5, the 1.2.1 pairing): launched with the
# script's defaults, i.e. `mpirun --allow-run-as-root -n 1 tritonserver ...` (world size 1), whatever
# model.yaml's tensor_parallel_size: the LLM spawns its own TP/PP workers. model.py (@b35ac1b6,
# 1.2.0rc2) hands COMM_WORLD to the LLM when the MPI world is larger than 1 (`trtllm-llmapi-launch` under
# srun, the docs' multi-node path), with ranks > 0 parked in that model's initialize, which one
# repository of several LLM models cannot share; `--no-mpi` is the docs' multi-instance (count > 1) path.
LLMAPI_WORLD_SIZE = 1
# Tensor parallelism of an LLM-API model (model.yaml `tensor_parallel_size`, `pipeline_parallel_size`:
# LLM() arguments, reference/triton.md §3.7; py_executor_creator.py turns them into one Mapping,
# `llm_args.parallel_config.to_mapping()`, read @000429d5, a 1.2-era tree with max_total_draft_tokens).
# - The draft model of two-model speculation (DraftTarget) is a PyTorchModelEngine built with the
#   target's own `mapping` (same file): it runs at the target's tp on the target's GPUs; speculative_config
#   has no parallelism of its own. One-model EAGLE-3 runs the head inside the target's model (same mapping).
# - The PyTorch backend's Attention (_torch/modules/attention.py, read @00547a25, later than 1.2.1; the
#   rule is the engine flow's too) asserts num_attention_heads % tp == 0 and keeps ceil(kv_heads / tp)
#   KV heads per rank (upstream.trtllm kv_heads_per_rank): trtspec refuses what checkpoints.sharding
#   check_tp refuses for a TensorRT-LLM checkpoint.
# - Launched at world size 1 (LLMAPI_WORLD_SIZE), each LLM spawns its tp workers on the node it runs on,
#   rank r on local GPU r (INFERRED from Mapping's gpus_per_node; not read in 1.2.x): every LLM model of a
#   repository shares GPUs 0..tp-1. One node: at most LLMAPI_MAX_TP GPUs (an HGX H100/H200 board).
LLMAPI_TP_KEY = "tensor_parallel_size"
LLMAPI_PP_KEY = "pipeline_parallel_size"
LLMAPI_MAX_TP = 8
