"""The config of every model of a repository, per flavor (ModelConfig messages, see configs.py).

Decisions, and why:
- `tensorrt_llm*` (trtllm flavor) carry every input, output and parameter of the pinned template
  (trtspec.upstream.triton), with every value written: no `${...}` is left, because an unfilled structural
  placeholder does not parse and an unfilled parameter means "default" only by accident of the C++
  parsing. Where the default is what we want, we write the value the backend would pick, or "" where
  the backend's parser documents "" as unset (numbers, lists; see trtspec.upstream.triton).
- They are decoupled (streaming and batch > 1 need it, reference §4.4) with exclude_input_in_output
  true (`generate` and `spec_decode` work on new tokens only) and KV-cache reuse on for draft-target
  (each round re-sends the prefix; reuse is what makes that cheap, §3.2).
- Memory: several TensorRT-LLM models on one GPU (draft + target, or EAGLE profiles) each size their
  KV pool from the memory free *when they load*; we give each an explicit
  max_tokens_in_paged_kv_cache from the builders' memory estimate (the pool left after every
  engine's weights, activations and runtime overhead, on the tightest GPU each uses), so the split
  does not depend on load order, and a kv_cache_free_gpu_mem_fraction that still reaches those tokens
  when the model loads last (0.9 for a model alone on its GPUs; memory.py).
- Our python models (preprocessing, postprocessing, spec_decode, generate, cpu tensorrt_llm*) are
  decoupled where they stream and use worker threads for concurrency (one instance each);
  preprocessing/postprocessing get `--instances` instances.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import contracts as c
from .configs import fill_dtype, model_config
from .models.serving_rules import braces
from ..upstream.trtllm import KV_CACHE_FREE_GPU_MEMORY_FRACTION
from ..upstream.triton import (BACKEND, ENGINE_DTYPE_TO_TRITON, ENCODER_FEATURES_DTYPE, EXECUTOR_WORKER_PATH,
                               LLMAPI_INPUTS, LLMAPI_OUTPUTS, LOGITS_DTYPE, PROMPT_TABLE_DTYPE, TENSORRT_LLM_INPUTS,
                               TENSORRT_LLM_OUTPUTS, TENSORRT_LLM_PARAMETERS)



@dataclass
class ModelFiles:
    """One model directory: its config and the files of version 1 ({relative path: text})."""
    name: str
    kind: str  # preprocessing | postprocessing | generate | spec_decode | tensorrtllm | cpu_llm | llmapi
    config: object
    comment: str = ""
    files: dict[str, str] = field(default_factory=dict)


def dtypes_for(engine_dtype: str) -> dict[str, str]:
    return {LOGITS_DTYPE: "TYPE_FP32", ENCODER_FEATURES_DTYPE: "TYPE_FP16",
            PROMPT_TABLE_DTYPE: ENGINE_DTYPE_TO_TRITON.get(engine_dtype, "TYPE_FP16")}


def tensorrtllm_parameters(*, engine_dir: str, tokenizer_dir: str, kv_tokens: int | None, kv_reuse: bool,
                           decoding_mode: str, eagle_choices: list | None, gpu_device_ids: str,
                           attention_window: int | None = None,
                           kv_fraction: float = KV_CACHE_FREE_GPU_MEMORY_FRACTION) -> dict[str, str]:
    """Every parameter key of the pinned template, in template order, with its value.
    kv_tokens / kv_fraction: the model's KV pool as the repository's memory plan sizes it (memory.py).
    attention_window: the model's sliding window (deploy.attention_window), as TensorRT-LLM runs
    Mistral-7B-v0.1 (upstream.trtllm SLIDING_WINDOW_CONFIG_KEY)."""
    values = {
        "max_beam_width": "1",
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": engine_dir,
        "encoder_model_path": "",  # decoder-only: the backend treats a missing path as unset
        "max_tokens_in_paged_kv_cache": "" if kv_tokens is None else str(kv_tokens),
        "max_attention_window_size": str(attention_window or ""),  # unset = the engine's max_seq_len
        "sink_token_length": "",
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": f"{kv_fraction:g}",
        "cross_kv_cache_fraction": "",  # encoder-decoder only
        "kv_cache_host_memory_bytes": "0",
        "kv_cache_onboard_blocks": "true",
        "enable_trt_overlap": "false",
        "exclude_input_in_output": "true",
        "cancellation_check_period_ms": "100",
        "stats_check_period_ms": "100",
        "iter_stats_max_iterations": "1000",
        "request_stats_max_iterations": "0",
        "enable_kv_cache_reuse": "true" if kv_reuse else "false",
        "normalize_log_probs": "true",
        "enable_chunked_context": "false",
        "gpu_device_ids": gpu_device_ids,
        "participant_ids": "",  # leader / spawning orchestrator: assigned automatically
        "num_nodes": "1",
        "lora_cache_optimal_adapter_size": "8",
        "lora_cache_max_adapter_size": "64",
        "lora_cache_gpu_memory_fraction": "0.05",
        "lora_cache_host_memory_bytes": "1073741824",
        "lora_prefetch_dir": "",
        "decoding_mode": decoding_mode,
        "executor_worker_path": EXECUTOR_WORKER_PATH,
        "lookahead_window_size": "",
        "lookahead_ngram_size": "",
        "lookahead_verification_set_size": "",
        "medusa_choices": "",
        "eagle_choices": braces(eagle_choices) if eagle_choices else "",
        "gpu_weights_percent": "1.0",
        "enable_context_fmha_fp32_acc": "false",
        "multi_block_mode": "true",
        "cuda_graph_mode": "false",
        "cuda_graph_cache_size": "0",
        "speculative_decoding_fast_logits": "false",
        "tokenizer_dir": tokenizer_dir,
        "guided_decoding_backend": "",
        "xgrammar_tokenizer_info_path": "",
    }
    assert tuple(values) == TENSORRT_LLM_PARAMETERS
    return values


def tensorrtllm_model(name: str, max_batch_size: int, engine_dtype: str, params: dict[str, str],
                      comment: str) -> ModelFiles:
    d = dtypes_for(engine_dtype)
    cfg = model_config(name, BACKEND, max_batch_size, [fill_dtype(t, d) for t in TENSORRT_LLM_INPUTS],
                       [fill_dtype(t, d) for t in TENSORRT_LLM_OUTPUTS], decoupled=True, parameters=params,
                       dynamic_batching={"preferred_batch_size": [max_batch_size],
                                         "max_queue_delay_microseconds": 0, "max_queue_size": 0})
    return ModelFiles(name, "tensorrtllm", cfg, comment, {".gitkeep": ""})


def cpu_llm_model(name: str, max_batch_size: int, checkpoint_dir: str, role: str, eagle_choices: list | None,
                  concurrency: int, comment: str, lazy_load: bool) -> ModelFiles:
    params = {"checkpoint_dir": checkpoint_dir, "role": role, "eagle_choices": braces(eagle_choices) if eagle_choices
              else "", "exclude_input_in_output": "true", "lazy_load": "true" if lazy_load else "false",
              "max_concurrency": str(concurrency), "torch_threads": "1"}
    cfg = model_config(name, "python", max_batch_size, c.CPU_LLM_INPUTS, c.CPU_LLM_OUTPUTS, decoupled=True,
                       parameters=params)
    return ModelFiles(name, "cpu_llm", cfg, comment)


def preprocessing_model(max_batch_size: int, tokenizer_dir: str, instances: int) -> ModelFiles:
    cfg = model_config(c.PREPROCESSING, "python", max_batch_size, c.PRE_INPUTS, c.PRE_OUTPUTS,
                       instance_count=instances,
                       parameters={"tokenizer_dir": tokenizer_dir, "add_special_tokens": "true"})
    return ModelFiles(c.PREPROCESSING, "preprocessing", cfg, "text -> token ids (HF tokenizer)")


def postprocessing_model(max_batch_size: int, tokenizer_dir: str, instances: int) -> ModelFiles:
    cfg = model_config(c.POSTPROCESSING, "python", max_batch_size, c.POST_INPUTS, c.POST_OUTPUTS,
                       instance_count=instances,
                       parameters={"tokenizer_dir": tokenizer_dir, "skip_special_tokens": "true"})
    return ModelFiles(c.POSTPROCESSING, "postprocessing", cfg, "token ids -> text (HF tokenizer)")


def spec_decode_model(max_batch_size: int, concurrency: int, max_draft_len: int, engine: str,
                      target_ckpt: str | None = None, draft_ckpt: str | None = None,
                      sampling_params: dict[str, str] | None = None, drafter: str = "model",
                      heads: dict[str, str] | None = None) -> ModelFiles:
    """sampling_params: `draft_logits` (bls) / `accept_rule` (trtspec.runtime), see spec_decode.py.
    drafter: model (a draft model or head), ngram (drafts from a per-request n-gram pool, no draft
    model) or model,ngram (each request the one its route names). heads: more EAGLE-3 heads on the
    target by drafter name (triton_repo/heads.py), each request drafting with the one it names."""
    params = {"engine": engine, "target_model": c.TENSORRT_LLM, "draft_model": c.TENSORRT_LLM_DRAFT,
              "max_draft_len": str(max_draft_len), "max_concurrency": str(concurrency), **(sampling_params or {})}
    ngram = "ngram" in drafter.split(",")
    if drafter != "model":
        params["drafter"] = drafter
    if drafter == "ngram":
        params["draft_model"] = ""
    if engine == "trtspec.runtime":
        params.update(target_checkpoint=target_ckpt, draft_checkpoint=draft_ckpt or "", torch_threads="1")
    if heads:
        params["draft_heads"] = json.dumps(heads, sort_keys=True)
    inputs = (c.NGRAM_SPEC_INPUTS if ngram else c.SPEC_INPUTS) + ((c.HEAD_SPEC_INPUT,) if heads else ())
    cfg = model_config(c.SPEC_DECODE, "python", max_batch_size, inputs, c.SPEC_OUTPUTS, decoupled=True,
                       parameters=params)
    if drafter == "ngram":
        how = "BLS calls to tensorrt_llm" if engine == "bls" else "in-process on the checkpoint with trtspec.runtime"
        return ModelFiles(c.SPEC_DECODE, "spec_decode", cfg, f"n-gram speculative decoding, streamed ({how})")
    how = ("BLS calls to tensorrt_llm_draft and tensorrt_llm" if engine == "bls"
           else "in-process on the two checkpoints with trtspec.runtime")
    what = "draft-target" + (" and n-gram (per workload)" if ngram else "")
    return ModelFiles(c.SPEC_DECODE, "spec_decode", cfg, f"{what} speculative decoding, streamed ({how})")


def generate_model(max_batch_size: int, concurrency: int, routing_json: str, inputs=None, outputs=None,
                   llm_cancel_messages: bool = False, tokenizer_dir: str | None = None) -> ModelFiles:
    """llm_cancel_messages: the tensorrt_llm* models are trtspec's python stand-ins (cpu flavor),
    which take generate's cancel message (models/trtspec_triton_common.py CANCEL). tokenizer_dir
    (llmapi): the LLM API model returns text only, so generate counts its tokens with this one."""
    params = {"routing": routing_json, "max_concurrency": str(concurrency)}
    if llm_cancel_messages:
        params["llm_cancel_messages"] = "true"
    if tokenizer_dir is not None:
        params["tokenizer_dir"] = tokenizer_dir
    cfg = model_config(c.GENERATE, "python", max_batch_size, inputs or c.GENERATE_INPUTS,
                       outputs or c.GENERATE_OUTPUTS, decoupled=True, parameters=params)
    return ModelFiles(c.GENERATE, "generate", cfg, "front model: routes each request by workload to its tuned setting")


def llmapi_model(name: str, model_yaml: str) -> ModelFiles:
    """The upstream llmapi layout: config.pbtxt (python backend; batching and decoupling come from
    model.yaml's triton_config) + 1/model.yaml. model.py is TensorRT-LLM's own (see the README)."""
    cfg = model_config(name, "python", 0, LLMAPI_INPUTS, LLMAPI_OUTPUTS)
    return ModelFiles(name, "llmapi", cfg, "LLM API (PyTorch backend) model; speculative_config in 1/model.yaml",
                      {"model.yaml": model_yaml})
