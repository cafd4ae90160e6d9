"""A model too large for one GPU, placed layer by layer over several (pipeline placement, not
tensor parallelism: one layer's weights stay whole on one device, and a forward walks the devices
in turn, moving the activations at each boundary).

    plan = plan_layers([bytes of layer 0, ...], devices, first_extra=embed bytes, last_extra=head bytes)
    plan.layers[i]   # the device of layer i (its weights and its KV cache)
    plan.stages[i]   # the index of that device in plan.devices: a forward moves where it changes

Layers are contiguous runs split so that each device holds about the same weight bytes, counting
the embedding on the first device and the final norm + lm_head on the last, which is where they
go. Only torch moves tensors; the runtime runs the same code on one device or several (a list of
"cpu" devices computes exactly what one CPU does, which is how the tests exercise it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Placement:
    devices: tuple[torch.device, ...]  # the devices in forward order
    stages: tuple[int, ...]  # the index in `devices` of each decoder layer's device

    @property
    def layers(self) -> tuple[torch.device, ...]:  # the device of each decoder layer
        return tuple(self.devices[s] for s in self.stages)

    @property
    def first(self) -> torch.device:  # the embedding, and the forward's inputs
        return self.devices[0]

    @property
    def last(self) -> torch.device:  # the final norm, lm_head, and the forward's outputs
        return self.devices[-1]


def plan_layers(layer_bytes: list[int], devices: list[torch.device], first_extra: int = 0,
                last_extra: int = 0) -> Placement:
    """Split the layers (weight bytes each) into contiguous runs over `devices`, near-equal bytes
    per device, `first_extra` (the embedding) counted on the first device and `last_extra` (ln_f,
    lm_head) on the last: a layer goes to the device whose equal share of the whole its midpoint
    falls in. Monotone, so each device holds one contiguous run (possibly none, when a layer is
    larger than a share or there are more devices than layers)."""
    devices = [torch.device(d) for d in devices]
    n, total = len(devices), first_extra + sum(layer_bytes) + last_extra
    owner, before = [], first_extra
    for size in layer_bytes:
        mid = before + size / 2
        owner.append(min(n - 1, int(mid * n // total)) if total else 0)
        before += size
    return Placement(tuple(devices), tuple(owner))
