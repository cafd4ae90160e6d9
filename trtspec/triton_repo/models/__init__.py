"""Python-backend model sources, copied into generated repositories as `<model>/1/model.py`.

Each file is a complete Triton python model. `trtspec_triton_common.py` (tensor and BLS helpers),
`trtspec_triton_pool.py` (the worker pool of the decoupled models) and `serving_rules.py` (band
choice, brace syntax, request bounds, acceptance) are copied next to each of them (the python
backend puts the version directory on sys.path). The trtllm-flavor models (preprocessing,
postprocessing, spec_decode in BLS mode, generate) import only numpy, json and the standard
library (plus transformers for the tokenizer), because they run inside the TensorRT-LLM Triton
container where trtspec is not installed; only the cpu-flavor code paths
import trtspec (cpu_llm.py, and spec_decode's in-process engine).

Nothing here is imported by trtspec itself except `serving_rules` (standard library only), which
perf, routing and the validator use so that they apply the rules the served models apply; the
others import `triton_python_backend_utils`, which exists only inside the python backend stub.
"""

SOURCES = {
    "preprocessing": "preprocessing.py",
    "postprocessing": "postprocessing.py",
    "generate": "generate.py",
    "spec_decode": "spec_decode.py",
    "cpu_llm": "cpu_llm.py",
}
COMMON = "trtspec_triton_common.py"
POOL = "trtspec_triton_pool.py"
RULES = "serving_rules.py"
WORD_RULES = "word_rules.py"  # stop / bad words and log probs, beside serving_rules
HELPERS = (COMMON, POOL, RULES, WORD_RULES)  # copied next to every model.py above
# n-gram repositories: the pool of trtspec/runtime/ngram_pool.py (plain Python), shipped as it is next
# to spec_decode, which imports it only when its `drafter` parameter is ngram.
NGRAM_POOL = "ngram_pool.py"
