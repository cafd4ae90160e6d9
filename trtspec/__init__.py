"""trtspec: speculative decoding for TensorRT-LLM on H100.

Stages (one sub-package each): checkpoints (HF -> TRT-LLM checkpoint), calib (ModelOpt PTQ),
builders (trtllm-build plans), runtime (PyTorch executor of TRT-LLM checkpoints), workloads,
tuning, triton_repo, perf.
"""

__version__ = "0.1.0"
