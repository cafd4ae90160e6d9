"""A preallocated KV cache for a batch of ragged sequences, with per-row lengths.

Layout per layer: `k[layer]`, `v[layer]` of shape [B, S, kv_heads, head_size], S fixed at creation
(max prompt + max new tokens + the largest speculative block), so memory is bounded up front.

Row b has `lens[b]` *committed* slots. A forward writes its T new tokens after them, at
`lens[b] + offset .. lens[b] + offset + T - 1`, where `offset` counts slots already written by
earlier uncommitted forwards (tree levels of the EAGLE drafter). Nothing past `lens[b]` is trusted
until it is committed:

- `advance(rows, n)`: the first n uncommitted slots become committed (prefill, greedy steps);
- `commit(b, kept)`: the uncommitted slots at block indices `kept` (root + accepted path of a
  verified tree) are moved to `lens[b]..` and committed; the rest is dropped;
- `rollback(b, n)`: forget all but the first n committed slots (a drafter after a rejection).

Stale data beyond `lens[b]` is never visible: `attention_mask` only shows a query the slots < lens[b]
plus the uncommitted slots its block mask allows, and later writes overwrite the stale slots. That
is also why right-padded ragged prefill is safe: pad tokens are written, then `lens` is set to the
true lengths and the padding is forgotten.

Devices: `k[layer]`, `v[layer]` live on their layer's device (`layer_devices`, one per layer: a
model placed over several GPUs keeps each layer's cache beside its weights); `lens` is host
bookkeeping on the CPU, so slot arithmetic and the capacity check never wait for a GPU. The row
and slot indices a forward writes through are moved to the device by the caller (model.py).
"""

from __future__ import annotations

import torch

from ..errors import TrtspecError
from .device import to_device


class KVCache:
    def __init__(self, num_layers: int, batch: int, capacity: int, kv_heads: int, head_size: int,
                 dtype: torch.dtype = torch.float32, layer_devices: tuple[torch.device, ...] | None = None,
                 stages: tuple[int, ...] | None = None):
        """stages: each layer's placement stage (placement.py); a forward moves its activations
        where the stage changes (default: one stage)."""
        shape = (batch, capacity, kv_heads, head_size)
        devices = layer_devices or (torch.device("cpu"),) * num_layers
        self.stages = stages or (0,) * num_layers
        self.k = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        self.v = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        self.lens = torch.zeros(batch, dtype=torch.long)
        self.capacity = capacity

    @property
    def batch(self) -> int:
        return self.lens.shape[0]

    def write_slots(self, rows: torch.Tensor, offset: int, T: int) -> torch.Tensor:
        """Slot index [b', T] of each new token of `rows`; fails cleanly instead of overrunning."""
        slots = self.lens[rows, None] + offset + torch.arange(T)
        if slots.numel() and int(slots.max()) >= self.capacity:
            raise TrtspecError(f"KV cache full: {int(slots.max()) + 1} slots needed, capacity {self.capacity}")
        return slots

    def write(self, layer: int, rows: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v [b', T, kv_heads, hd] at `slots` [b', T] of `rows`."""
        self.k[layer][rows[:, None], slots] = k
        self.v[layer][rows[:, None], slots] = v

    def read(self, layer: int, rows: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `length` slots of `rows`: k, v [b', length, kv_heads, hd]."""
        return self.k[layer][rows, :length], self.v[layer][rows, :length]

    def advance(self, rows: torch.Tensor, n: torch.Tensor | int) -> None:
        self.lens[rows] += n

    def commit(self, b: int, kept: list[int]) -> None:
        """Move uncommitted block slots `kept` (indices relative to lens[b], increasing) to lens[b]..
        and commit them. Trees are verified in one block; only the accepted path survives."""
        base = int(self.lens[b])
        src = torch.tensor(kept, dtype=torch.long) + base
        dst = torch.arange(len(kept)) + base
        if not torch.equal(src, dst):
            on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
            for cache in (self.k, self.v):
                for layer in cache:
                    if layer.device not in on:  # one copy of the indices per device, not per layer
                        on[layer.device] = (to_device(src, layer.device), to_device(dst, layer.device))
                    s, d = on[layer.device]
                    layer[b, d] = layer[b, s]  # gather first (advanced indexing copies): overlap-safe
        self.lens[b] = base + len(kept)

    def rollback(self, b: int, n: int) -> None:
        if n > int(self.lens[b]):
            raise ValueError(f"rollback to {n} beyond committed length {int(self.lens[b])}")
        self.lens[b] = n


def attention_mask(lens: torch.Tensor, block_mask: torch.Tensor, length: int,
                   positions: torch.Tensor | None = None, window: int | None = None) -> torch.Tensor:
    """Boolean mask [b', T, length]: query t of row b sees every committed slot s < lens[b], and the
    uncommitted slot lens[b] + j when block_mask[(b,) t, j] (block_mask is [T, W] or [b', T, W], W =
    uncommitted slots written so far including this block). With a sliding window, a query at
    position positions[b, t] sees only the slots s > position - window (transformers'
    sliding_window_overlay: kv_idx > q_idx - sliding_window; a slot's index is its position, see
    model.block_geometry)."""
    W = block_mask.shape[-1]
    slot = torch.arange(length, device=lens.device)
    rel = slot[None, :] - lens[:, None]  # [b', length]
    committed = rel < 0
    in_block = (rel >= 0) & (rel < W)
    bm = block_mask if block_mask.dim() == 3 else block_mask.expand(lens.shape[0], *block_mask.shape)
    idx = rel.clamp(0, W - 1)[:, None, :].expand(-1, bm.shape[1], -1)  # [b', T, length]
    block = torch.gather(bm, 2, idx) & in_block[:, None, :]
    mask = committed[:, None, :] | block
    if window is not None:
        mask = mask & (slot[None, None, :] > positions[:, :, None] - window)
    return mask


def causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()
