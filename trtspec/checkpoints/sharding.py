"""Tensor-parallel split and merge rules of the TRT-LLM checkpoint format.

The converter splits full tensors into `rank{r}.safetensors`; the runtime merges them back. Both
use the same rules so they cannot drift apart:

- column-parallel linears (qkv, mlp.fc, mlp.gate, EAGLE drafter fc): split the output dim (0);
- row-parallel linears (attention.dense, mlp.proj): split the input dim (1);
- qkv: q, k and v are split separately per rank and concatenated again; when there are fewer
  kv heads than ranks each kv head is duplicated so every rank owns one (TRT-LLM `dup_kv_weight`);
- vocab tensors (lm_head, a parallel vocab_embedding): zero-padded to a multiple of tp rows, then
  split along dim 0 (`pad_vocab_size`);
- everything else (norms, q/k layernorms) is replicated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import TrtspecError
from ..upstream import trtllm


def pad_vocab_size(vocab_size: int, tp: int) -> int:
    return -(-vocab_size // tp) * tp


@dataclass(frozen=True)
class Shard:
    kind: str  # "replicate" | "col" | "row" | "qkv" | "vocab"
    num_heads: int = 0  # qkv only
    num_kv_heads: int = 0
    head_size: int = 0

    def rank_shape(self, shape: tuple[int, ...], tp: int) -> tuple[int, ...]:
        if tp == 1 or self.kind == "replicate":
            return tuple(shape)
        if self.kind == "vocab":
            return (pad_vocab_size(shape[0], tp) // tp, *shape[1:])
        if self.kind == "col":
            return (shape[0] // tp, *shape[1:])
        if self.kind == "row":
            return (shape[0], shape[1] // tp)
        kv_heads = trtllm.kv_heads_per_rank(self.num_kv_heads, tp)
        return ((self.num_heads // tp + 2 * kv_heads) * self.head_size, *shape[1:])


def check_tp(num_heads: int, num_kv_heads: int, intermediate: int, tp: int, where: str) -> None:
    """The divisibility TRT-LLM requires for a tensor-parallel split."""
    if num_heads % tp:
        raise TrtspecError(f"{where}: num_attention_heads={num_heads} is not divisible by tp={tp}")
    if num_kv_heads >= tp and num_kv_heads % tp or num_kv_heads < tp and tp % num_kv_heads:
        raise TrtspecError(f"{where}: num_key_value_heads={num_kv_heads} and tp={tp}: one must divide the other")
    if intermediate % tp:
        raise TrtspecError(f"{where}: intermediate_size={intermediate} is not divisible by tp={tp}")


def split(t: torch.Tensor, shard: Shard, rank: int, tp: int) -> torch.Tensor:
    """The slice of full tensor `t` that rank `rank` of `tp` holds."""
    if tp == 1 or shard.kind == "replicate":
        return t
    if shard.kind == "vocab":
        padded = pad_vocab_size(t.shape[0], tp)
        if padded != t.shape[0]:
            t = torch.cat([t, t.new_zeros((padded - t.shape[0], *t.shape[1:]))])
        return t.chunk(tp, dim=0)[rank]
    if shard.kind == "col":
        return t.chunk(tp, dim=0)[rank]
    if shard.kind == "row":
        return t.chunk(tp, dim=1)[rank]
    hd, nh, nkv = shard.head_size, shard.num_heads, shard.num_kv_heads
    q, k, v = t.split([nh * hd, nkv * hd, nkv * hd], dim=0)
    q = q.chunk(tp, dim=0)[rank]
    if nkv >= tp:
        k, v = k.chunk(tp, dim=0)[rank], v.chunk(tp, dim=0)[rank]
    else:  # each kv head is shared by tp // nkv consecutive ranks
        head = rank // (tp // nkv)
        k, v = k[head * hd:(head + 1) * hd], v[head * hd:(head + 1) * hd]
    return torch.cat([q, k, v], dim=0)


def merge(parts: list[torch.Tensor], shard: Shard) -> torch.Tensor:
    """Inverse of `split` over all ranks (vocab tensors keep their padding rows)."""
    tp = len(parts)
    if tp == 1 or shard.kind == "replicate":
        return parts[0]
    if shard.kind in ("vocab", "col"):
        return torch.cat(parts, dim=0)
    if shard.kind == "row":
        return torch.cat(parts, dim=1)
    hd, nh, nkv = shard.head_size, shard.num_heads, shard.num_kv_heads
    kv_per_rank = trtllm.kv_heads_per_rank(nkv, tp)
    pieces = [p.split([nh // tp * hd, kv_per_rank * hd, kv_per_rank * hd], dim=0) for p in parts]
    owners = range(tp) if nkv >= tp else range(0, tp, tp // nkv)  # drop duplicated kv heads
    q = torch.cat([p[0] for p in pieces])
    k = torch.cat([pieces[r][1] for r in owners])
    v = torch.cat([pieces[r][2] for r in owners])
    return torch.cat([q, k, v], dim=0)
