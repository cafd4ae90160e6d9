"""The flavors a repository is written for, by name, and the old name of one of them.

    trtllm    TensorRT-LLM's C++ backend on engines (the H100 host)
    llmapi    TensorRT-LLM's LLM API (PyTorch backend) on HF weights (the H100 host)
    pytorch   trtspec's own PyTorch runtime on checkpoints, in Triton's python backend: on the
              CPU, or on a GPU when `triton.device` names one

`cpu` is what the pytorch flavor was called while it only ran on the CPU; it stays accepted
wherever a flavor is read (recipes, flags, the manifests of repositories written before), and a
repository keeps the spelling it was requested with in its manifest, so tools that read `cpu`
there keep working. Code that branches on the flavor compares `canonical(flavor)`. Light: imports
only upstream facts.
"""

from __future__ import annotations

from ..upstream.trtllm import PYTORCH_SPEC_MODES

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


def mode_refusal(flavor: str | None, mode: str) -> str | None:
    """Why `flavor` cannot serve a `mode` tuning (None when it can), as the `triton.flavor` error.
    One rule for the recipe's validation (before any stage runs) and make_repository (a direct
    `trtspec triton`): the engine flow has no EAGLE-3, and the PyTorch backend drafts EAGLE-3
    chains and no EAGLE-1 trees (upstream.trtllm.PYTORCH_SPEC_MODES)."""
    if canonical(flavor) == TRTLLM and mode == "eagle3":
        return "triton.flavor: an eagle3 tuning is served by the llmapi or cpu flavor (EAGLE-3 is not in the TensorRT engine flow)"
    if canonical(flavor) == LLMAPI and mode not in PYTORCH_SPEC_MODES:
        return (f"triton.flavor: llmapi's PyTorch backend drafts EAGLE-3 chains, draft models and n-grams, not "
                f"{mode} (EAGLE-1 trees): serve it with trtllm or cpu")
    return None
