"""Where the runtime computes: a device (or a list of devices, one model placed layer by layer) and
a compute dtype.

    devices = resolve("cuda:0,cuda:1", "profile.device")   # [device(cuda:0), device(cuda:1)]
    dtype = compute_dtype(None, devices, "profile.dtype")   # float32 on CPU, bfloat16 on a GPU
    layer_weights = move(layer_weights, devices[0])         # every tensor of a weights dataclass

The text form (`cpu`, `cuda`, `cuda:N`, comma-separated for several) is what the options models
validate (runtime/options.py, no torch there); this module checks it against the torch at hand and
names the field on failure. Host bookkeeping (each KV-cache row's committed length, trees, request
tokens) stays on the CPU: it is what the loop branches on, and keeping it there means no GPU
round trip to decide a slot index. What the GPU computes on (weights, caches, masks, RoPE tables,
slot and row indices of a forward) is moved to it once per forward, without waiting
(`to_device`).
"""

from __future__ import annotations

import dataclasses

import torch

from ..checkpoints.writer import TORCH_DTYPES
from ..errors import TrtspecError


def resolve(device: str | list | tuple | torch.device, field: str = "device") -> list[torch.device]:
    """The devices named by `device` ('cpu', 'cuda', 'cuda:N', a comma-separated list of those, or
    a list), checked against this torch: a GPU that is not there is refused naming `field`."""
    names = device.split(",") if isinstance(device, str) else list(device) if isinstance(device, (list, tuple)) \
        else [device]
    out = []
    for name in names:
        try:
            d = torch.device(name.strip() if isinstance(name, str) else name)
        except (RuntimeError, ValueError):
            raise TrtspecError(f"{field}: {name!r} is not a device (expected cpu, cuda or cuda:N)") from None
        if d.type not in ("cpu", "cuda"):
            raise TrtspecError(f"{field}: {name!r} is not a device the runtime runs on (expected cpu, cuda or cuda:N)")
        if d.type == "cuda":
            if not torch.cuda.is_available():
                raise TrtspecError(f"{field}: {name!r} but torch sees no CUDA device (torch {torch.__version__})")
            d = torch.device("cuda", torch.cuda.current_device() if d.index is None else d.index)
            if d.index >= torch.cuda.device_count():
                raise TrtspecError(f"{field}: {name!r} but torch sees {torch.cuda.device_count()} CUDA device(s)")
        out.append(d)
    if not out:
        raise TrtspecError(f"{field}: no device given")
    return out


def compute_dtype(name: str | None, devices: list[torch.device], field: str = "dtype") -> torch.dtype:
    """The compute dtype: `name` (float32 | bfloat16 | float16), else float32 on a CPU (the
    reference executor's numerics, compared with transformers to 1e-4) and bfloat16 on a GPU (what
    a model that fills an H100 is served in)."""
    if name is None:
        return torch.bfloat16 if any(d.type == "cuda" for d in devices) else torch.float32
    if name not in TORCH_DTYPES:
        raise TrtspecError(f"{field}: {name!r} is not one of {', '.join(TORCH_DTYPES)}")
    return TORCH_DTYPES[name]


def move(obj, device: torch.device):
    """`obj` with every tensor in it on `device`: a tensor, a (nested) dataclass of weights
    (LayerWeights, quant.Linear, KVQuant, ...), a list or tuple of those; anything else as is."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: move(getattr(obj, f.name), device)
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, (list, tuple)):
        return type(obj)(move(o, device) for o in obj)
    return obj


def to_device(t: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """A host index/mask tensor on `device` without waiting for the GPU (a host-to-device copy from
    pageable memory is staged before it returns, so the source may change afterwards)."""
    if t is None or t.device == device:
        return t
    return t.to(device, non_blocking=True)


def synchronize(device: torch.device) -> None:
    """Wait for `device`'s queued work (timing a GPU needs it; a CPU computes eagerly)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe(devices: list[torch.device]) -> str:
    """Human text for the cost table's `device`: the GPU's name, or the CPU and its threads."""
    parts = []
    for d in dict.fromkeys(devices):
        if d.type == "cuda":
            parts.append(f"{torch.cuda.get_device_name(d)} ({d}, CUDA {torch.version.cuda})")
        else:
            parts.append(f"cpu, {torch.get_num_threads()} threads")
    return f"torch {torch.__version__} " + " + ".join(parts)
