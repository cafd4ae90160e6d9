"""N-gram drafting in the llmapi flavor: the NGramDecodingConfig each served setting gets.

The pool is one per request (`is_public_pool: false`), the pool trtspec profiles (tuning/
ngram_profile.py: a public pool makes a request's drafts depend on its neighbours, which no
per-workload profile states); keep-all and use-oldest are written as the runtime runs them, and
max_matching_ngram_size always explicitly (one 1.x llm_args.py has no usable default for it:
upstream.trtllm NGRAM). max_draft_len is a per-model LLM() setting, so each distinct (K, n) the
tuning chose is its own model, `tensorrt_llm_k<K>_n<n>` (K = 0: no speculative_config).
"""

from __future__ import annotations

from ..upstream import trtllm as upstream
from ..upstream.triton import LLMAPI_DECODING_NGRAM, LLMAPI_NGRAM_KEYS
from .contracts import TENSORRT_LLM


def model_name(k: int, n: int | None) -> str:
    return f"{TENSORRT_LLM}_k{k}" + (f"_n{n}" if k and n is not None else "")


def speculative_config(k: int, n: int) -> dict:
    """model.yaml's speculative_config for K drafts with patterns of up to n tokens."""
    keys = LLMAPI_NGRAM_KEYS
    return {"decoding_type": LLMAPI_DECODING_NGRAM, "max_draft_len": k, keys["max_matching_ngram_size"]: n,
            keys["keep_all"]: upstream.NGRAM_DEFAULT_KEEP_ALL, keys["use_oldest"]: upstream.NGRAM_DEFAULT_USE_OLDEST,
            keys["public_pool"]: False}
