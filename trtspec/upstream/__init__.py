"""Version-specific facts about the upstream projects trtspec targets, each stated once with its source.

Everything here was read from the pinned upstream sources (see the README's "Upstream pins") or the
project's references (`reference/trtllm.md`, `reference/triton.md`, read from those sources). When an
upstream version moves, this package is what to revisit; no other module hard-codes an upstream
default, limit or name.

- `trtllm`: TensorRT-LLM 1.2.x (the last release line with `trtllm-build` and the engine flow): the
  checkpoint format (architectures, QuantConfig, exclusion defaults, EAGLE limits and defaults), the
  `trtllm-build` defaults and rules the build plans rely on, and the runtime memory facts.
- `triton`: the Triton TensorRT-LLM backend shipped with that release (model configs, parameters,
  the llmapi model, launching).
- `sampling`: the rule each TensorRT-LLM 1.2.x path uses to accept a draft token at temperature > 0
  (greedy, exact match, rejection sampling, typical acceptance), its parameters, and the request
  fields the sampling settings travel in.
- `modelopt`: ModelOpt 0.47's quantized export (numeric ranges, KV scales).
- `published`: the recipes of published speculative-decoding results and how their benchmark tools
  count (what scripts/bench_published_setups.py and tuning/gpus.py compare against).
- `transformers`: the transformers release the HF side is read with, and the tokenizer files.

This module holds no facts itself.
"""
