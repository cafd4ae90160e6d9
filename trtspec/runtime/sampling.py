"""Sampling primitives: the filtered distribution of a logits row, and keyed random draws.

    p = probs(logits, sampling)              # softmax(logits / T), top-k, then top-p, renormalised
    u = uniform(seed, position, TARGET)      # one U[0, 1) per (request seed, output position, purpose)
    token = draw(p, u)                       # inverse CDF over the vocabulary order

Why keyed draws rather than a generator that advances: every random number a request uses is a pure
function of (seed, output position, purpose). The target's sample for output position n is then the
same whether it was drawn by plain decoding, by a verify step of K = 1 or of K = 7, or by the
profiler teacher-forcing the finished sequence. Two consequences we rely on:

- exact-match speculation (accept a draft token iff it equals the target's sample) emits exactly the
  plain sampled output for the same seed, whatever the draft or K: seeded runs are reproducible and
  the profiler (trtspec/tuning/profile.py) can replay AL(K) exactly from one sampled pass;
- the draws of different positions and purposes are independent U[0, 1) (splitmix64 of the key),
  which is all the losslessness arguments of the accept rules (accept.py) need.

TensorRT-LLM draws from curand states that advance per step instead, so its samples differ from ours
token for token; their distribution is the same, except that the engine's sampling kernels give the
top-p boundary token only the mass that reaches top_p (`kernel_probs`; upstream.sampling).
"""

from __future__ import annotations

import torch

from ..options import Sampling

# Purposes of a draw: one independent uniform each per (seed, output position).
TARGET, DRAFT, ACCEPT, RESIDUAL = range(4)

_MASK = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def uniform(seed: int, position: int, purpose: int) -> float:
    """U[0, 1) for the key (seed, output position, purpose): 53 random bits of a splitmix64 chain."""
    x = _splitmix64(_splitmix64(_splitmix64(seed) ^ position) ^ purpose)
    return (x >> 11) * (1.0 / (1 << 53))


def _tempered(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """softmax(logits / T) over the top_k most likely tokens (ties at the k-th value kept, as
    transformers' TopKLogitsWarper does), float64. The maximum is subtracted before dividing, so
    that a tiny T (any T > 0 the settings accept) gives the argmax's one-hot, not inf - inf = NaN."""
    logits = logits.double()
    logits = (logits - logits.amax(-1, keepdim=True)) / sampling.temperature
    if 0 < sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits.softmax(-1)


def _by_rank(p: torch.Tensor, f) -> torch.Tensor:
    """f(sorted p, mass ranked above each token) computed in descending order, back in vocabulary order."""
    sorted_p, order = p.sort(-1, descending=True)
    return torch.zeros_like(p).scatter(-1, order, f(sorted_p, sorted_p.cumsum(-1) - sorted_p))


def _one_hot_argmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double()


def probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The distribution `sampling` draws from, for each row of logits [..., V] (float64).

    Greedy settings give the one-hot of the argmax, so the accept rules need no special case. top-p
    keeps the most likely tokens up to and including the one whose cumulative probability first
    reaches top_p (transformers' TopPLogitsWarper keeps the same set, ties aside), renormalised."""
    if sampling.greedy:
        return _one_hot_argmax(logits)
    p = _tempered(logits, sampling)
    if sampling.top_p < 1.0:
        p = _by_rank(p, lambda sp, before: sp.masked_fill(before >= sampling.top_p, 0.0))
        p = p / p.sum(-1, keepdim=True)
    return p


def kernel_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """The distribution TensorRT-LLM's C++ sampling kernels draw from (upstream.sampling
    ENGINE_TOP_P_TRUNCATES): the same kept set as `probs`, but not renormalised over it: a token
    gets the part of its probability that lies below top_p in the descending cumulative order, /
    top_p. At top_p 1 it is `probs` itself (not recomputed: the cumulative sum's rounding would zero
    a far tail)."""
    if sampling.greedy or sampling.top_p >= 1.0:
        return probs(logits, sampling)
    top_p = sampling.top_p
    return _by_rank(_tempered(logits, sampling),
                    lambda sp, before: ((sp + before).clamp(max=top_p) - before.clamp(max=top_p)) / top_p)


def draw(p: torch.Tensor, u: float) -> int:
    """Inverse CDF: the first token whose cumulative probability exceeds u * total (p need not sum
    to 1). Zero-probability tokens are never drawn."""
    cdf = p.double().cumsum(-1)
    i = int(torch.searchsorted(cdf, torch.tensor([u * float(cdf[-1])], dtype=cdf.dtype), right=True))
    if i >= p.shape[-1] or p[i] <= 0:  # u * total rounded onto the end: the last possible token
        i = int(torch.nonzero(p > 0)[-1])
    return i
