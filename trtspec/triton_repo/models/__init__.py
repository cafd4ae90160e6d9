"""Python-backend model sources, copied into generated repositories as `<model>/1/model.py`.

Each file is a complete Triton python model. `trtspec_triton_common.py` is copied next to each of
them (the python backend puts the version directory on sys.path). The trtllm-flavor models
(preprocessing, postprocessing, spec_decode in BLS mode, generate) import only numpy, json and
the standard library (plus transformers for the tokenizer), because they run inside the
TensorRT-LLM Triton container where trtspec is not installed; only the cpu-flavor code paths
import trtspec (cpu_llm.py, and spec_decode's in-process engine).

Nothing here is imported by trtspec itself: these modules import `triton_python_backend_utils`,
which exists only inside the python backend stub.
"""

SOURCES = {
    "preprocessing": "preprocessing.py",
    "postprocessing": "postprocessing.py",
    "generate": "generate.py",
    "spec_decode": "spec_decode.py",
    "cpu_llm": "cpu_llm.py",
}
COMMON = "trtspec_triton_common.py"
