"""The flavors a repository is written for, by name, and the old name of one of them.

    trtllm    TensorRT-LLM's C++ backend on engines (the H100 host)
    llmapi    TensorRT-LLM's LLM API (PyTorch backend) on HF weights (the H100 host)
    pytorch   trtspec's own PyTorch runtime on checkpoints, in Triton's python backend: on the
              CPU, or on a GPU when `triton.device` names one

`cpu` is what the pytorch flavor was called while it only ran on the CPU; it stays accepted
wherever a flavor is read (recipes, flags, the manifests of repositories written before), and a
repository keeps the spelling it was requested with in its manifest, so tools that read `cpu`
there keep working. Code that branches on the flavor compares `canonical(flavor)`. Light: no imports.
"""

from __future__ import annotations

TRTLLM, LLMAPI, PYTORCH = "trtllm", "llmapi", "pytorch"
ALIASES = {"cpu": PYTORCH}
# Every name a flavor may be given by, in the order refusals list them (the long-known names first).
FLAVORS = (TRTLLM, LLMAPI, *ALIASES, PYTORCH)


def canonical(flavor: str | None) -> str | None:
    """The flavor's own name (`cpu` -> `pytorch`)."""
    return ALIASES.get(flavor, flavor)


def is_pytorch(flavor: str | None) -> bool:
    """Whether `flavor` (either spelling) serves trtspec's runtime in the python backend."""
    return canonical(flavor) == PYTORCH


def in_flight_batching(flavor: str | None) -> bool:
    """Whether the server steps its requests together (TensorRT-LLM's executor: in-flight batching,
    each iteration one forward over every active request, their context phases mixed in), or serves
    each request on its own (the pytorch flavor: one worker thread per request, batch 1). Recorded
    in the routing, so that `perf --sweep` results say how their requests shared the engine
    (trtspec.tuning.calibrate prices them by it)."""
    return canonical(flavor) in (TRTLLM, LLMAPI)
