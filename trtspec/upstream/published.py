"""Published speculative-decoding setups and how their benchmark tools count: the facts behind
comparing the step-time model with published numbers (scripts/bench_published_setups.py) and the
per-framework step overheads of tuning/gpus.py. Read, with their sources, in TensorRT-LLM's and
SGLang's pull requests and code; kept apart from upstream.trtllm, which holds what trtspec writes
and serves.
"""

# One-model EAGLE-3 (TensorRT-LLM PR 5146, "Pytorch path add spec dec param to attention op", the
# recipe behind landscape.md A6): speculative_config {decoding_type: Eagle, max_draft_len: 3,
# eagle3_one_model: true}, cuda_graph_config batch sizes [1, 2, 3, 4], disable_overlap_scheduler:
# true ("seeing accuracy drop if false"), `trtllm-bench throughput --backend pytorch --max_batch_size 4
# --max_num_tokens 3072 --dataset aa_gen_16k_1k_apr22.txt`; the result is "tps/user speedup over
# regular decoding" at "conc=4". The drafting loop runs inside the target's forward (and CUDA graph):
# no separate launch per level. The prompt length is not stated: the dataset's name (aa_gen_16k_1k)
# suggests 16k, but the quoted settings likely admit at most 3072 (PYTORCH_PROMPT_CAPPED_WITHOUT_CHUNKING
# below; the quoted YAML sets no enable_chunked_prefill and the stored PR text is cut off after
# --dataset, so a --enable_chunked_context there is not excluded). input_tokens is ASSUMED 1024: the
# same dataset family (aa_gen_16k_1k_apr30_no_system_prompt) in an NVIDIA engineer's trtllm-bench
# scripts for Llama 4 Maverick + EAGLE-3 (sbatch files in the code index, repository not named there)
# sizes max_num_tokens as INPUT_SEQ_LENGTH 1024 + OUTPUT_SEQ_LENGTH 2048 = 3072, the PR's number, and
# passes --streaming, not --enable_chunked_context. output_tokens 1024: the dataset's name.
EAGLE3_ONE_MODEL_RECIPE_PR5146 = {"max_draft_len": 3, "disable_overlap_scheduler": True,
                                  "cuda_graph_batch_sizes": (1, 2, 3, 4), "max_batch_size": 4,
                                  "max_num_tokens": 3072, "input_tokens": 1024, "output_tokens": 1024}
# trtllm-bench's per-user output throughput counts the context phase: tensorrt_llm/bench/benchmark/
# utils/asynchronous.py (LlmManager._process_single_request) stamps a request's start before
# generate_async and its end at the final response, and without --streaming records no first-token
# time, so bench/dataclasses/statistics.py's RequestRecord has time_to_first_token 0 and every
# per-request throughput is output tokens / end-to-end latency; bench/dataclasses/reporting.py
# prints it as "Per User Output Throughput [w/ ctx]" ("Output Throughput includes context/first
# token"). At concurrency 4 (max_batch_size 4) a request's latency also holds the context phases of
# the requests that join the batch while it decodes (in-flight batching runs their chunks in the
# same iterations), or, with no concurrency limit, the queue ahead of it. With --streaming it also
# prints "Per User Output Speed" = 1 / TPOT, decode only; which of the two PR 5146 quotes is not in
# its stored text. Read for A6 (scripts/bench_published_setups.py).
TRTLLM_BENCH_PER_USER_INCLUDES_CONTEXT = True
# Without chunked prefill the LLM API refuses a prompt longer than max_num_tokens: "The sum of prompt
# length (...), query length (...) should not exceed max_num_tokens (...)" (LLM._check_arguments in
# tensorrt_llm/llmapi/llm.py; TensorRT-LLM's own test_max_num_token_check). Not in every version: the
# stored llm.py of commit 00966934 returns from _check_arguments early for the pytorch backend, so for
# PR 5146's (mid-2025) version this is a likelihood, not a fact. trtllm-bench's
# --enable_chunked_context defaults to off (bench/benchmark/throughput.py).
PYTORCH_PROMPT_CAPPED_WITHOUT_CHUNKING = True
# The PyTorch backend's overlap scheduler (docs: torch/features/overlap_scheduler) runs step n's CPU
# work (stop criteria, responses, scheduling the next batch) while the GPU runs step n + 1; "Enabled
# by default". With it disabled (A6's speculative run) that host time is exposed in every step.
OVERLAP_SCHEDULER_DEFAULT = True
# SGLang (not TensorRT-LLM, but the other framework the published rows ran on; kept here with the
# other upstream step facts). server_args.py of early 2025: speculative_num_steps 5,
# speculative_eagle_topk 8, speculative_num_draft_tokens 64, and for EAGLE "the radix cache, chunked
# prefill, and overlap scheduler are disabled". sglang PR 4716 (EAGLE-3 for Llama-3.3-70B): "It may
# be worth to shard self.fc, as currently it doesn't get the benefits of TP" (fc replicated per rank).
# EAGLEWorker (speculative/eagle_worker.py, and PR 21599's walk-through): draft (multi-step, one CUDA
# graph), verify (target, tree mask), forward_draft_extend_after_decode (drafter on the accepted
# tokens), each its own replay, with the accepted lengths read on the host in between.
SGLANG_EAGLE_DEFAULTS_2025 = (5, 8, 64)  # (num_steps, topk, num_draft_tokens)
SGLANG_EAGLE_OVERLAP_SCHEDULER = False
SGLANG_EAGLE3_FC_SHARDED = False
