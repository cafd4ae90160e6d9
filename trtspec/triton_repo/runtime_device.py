"""Where the pytorch flavor's models run trtspec's runtime: `triton.device`.

A model that runs the runtime in the python backend (cpu_llm, and spec_decode on engine
trtspec.runtime) gets, for a CUDA device, `instance_group { kind: KIND_GPU gpus: [N] }` and the
parameter `device` = cuda:N, which the model reads at initialize (trtspec_triton_common.load_device): it
loads the runtime there (runtime.generate.load_models(device=...)). For `cpu` the configs stay
exactly what they were (KIND_CPU, no parameter). Tokenizer and routing models (preprocessing,
postprocessing, generate) stay on the CPU: they do no tensor work.
"""

from __future__ import annotations

from ..errors import TrtspecError
from ..options import ONE_DEVICE
from .configs import pb
from .flavors import is_pytorch
from .render import ModelFiles


def gpu_index(device: str) -> int | None:
    """None for the CPU; the GPU index of `cuda` (0) or `cuda:N`."""
    m = ONE_DEVICE.fullmatch(device)
    if m is None:
        raise TrtspecError(f"triton.device: {device!r} is not a device (expected cpu, cuda or cuda:N)")
    return None if device == "cpu" else int(m.group(2) or 0)


def runs_runtime(model: ModelFiles) -> bool:
    """cpu_llm always; spec_decode when it decodes in-process (engine trtspec.runtime, not BLS)."""
    engine = model.config.parameters["engine"].string_value if model.kind == "spec_decode" else None
    return model.kind == "cpu_llm" or engine == "trtspec.runtime"


def place(files: list[ModelFiles], flavor: str, device: str) -> None:
    """Put the runtime models of `files` on `device` (module doc); the CPU leaves them as they are.
    The other flavors' models are TensorRT-LLM's, which place themselves: a device there is refused."""
    gpu = gpu_index(device)
    if gpu is not None and not is_pytorch(flavor):
        raise TrtspecError(f"triton.device: {device!r} applies to the pytorch flavor only (the {flavor} flavor's "
                           "TensorRT-LLM models are placed by TensorRT-LLM: gpu_device_ids, MPI ranks)")
    if gpu is None:
        return
    kind = pb().ModelInstanceGroup.Kind.KIND_GPU
    for model in (m for m in files if runs_runtime(m)):
        for group in model.config.instance_group:
            group.kind = kind
            group.gpus[:] = [gpu]
        model.config.parameters["device"].string_value = f"cuda:{gpu}"
