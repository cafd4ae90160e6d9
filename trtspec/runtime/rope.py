"""Rotary position embeddings (gpt-neox / HF-Llama "rotate_half" layout).

TRT-LLM writes `position_embedding_type: rope_gpt_neox` for every family we run: the head is split
into two halves, not interleaved pairs. Frequencies follow HF `modeling_rope_utils` exactly (float32
`inv_freq`, the same llama3 smoothing) so that logits match transformers to ~1e-6, not ~1e-3.

Positions are passed explicitly per token (`[B, T]`): rows of a ragged batch sit at different
offsets, and tree nodes take `root position + depth`, not their index in the block.
"""

from __future__ import annotations

import math

import torch

from ..errors import TrtspecError


def inv_freq(head_size: int, theta: float, scaling: dict | None) -> torch.Tensor:
    """Inverse frequencies [head_size // 2] in float32, after RoPE scaling."""
    freq = 1.0 / (theta ** (torch.arange(0, head_size, 2, dtype=torch.int64).float() / head_size))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type")) or "default"
    if kind == "default":
        return freq
    if kind == "linear":
        return freq / float(scaling["factor"])
    if kind == "llama3":
        return _llama3(freq, scaling)
    raise TrtspecError(f"rotary_scaling type {kind!r} is not supported by the runtime "
                       "(supported: default, linear, llama3)")


def _llama3(freq: torch.Tensor, s: dict) -> torch.Tensor:
    """Llama 3.1 scaling: long wavelengths divided by `factor`, short ones kept, a smooth blend between
    (HF `_compute_llama3_parameters`, same operation order)."""
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_len = float(s["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > low_wavelen, freq / factor, freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, blended, scaled)


def cos_sin(freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [B, T, head_size] for integer positions [B, T] (angles in float32)."""
    angles = positions.float()[..., None] * freq  # [B, T, hd/2]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, heads, T, hd] by cos/sin [B, T, hd]."""
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
