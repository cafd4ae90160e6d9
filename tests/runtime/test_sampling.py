"""Sampling primitives (trtspec/runtime/sampling.py) against transformers' logits warpers, and the
keyed draws' independence and uniformity."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from scipy.stats import kstest
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from trtspec.options import Sampling
from trtspec.runtime.sampling import ACCEPT, DRAFT, TARGET, draw, kernel_probs, probs, uniform


def warped(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """transformers' order: temperature, top-k, top-p, then softmax."""
    x = TemperatureLogitsWarper(s.temperature)(None, logits.clone())
    if s.top_k:
        x = TopKLogitsWarper(s.top_k)(None, x)
    if s.top_p < 1:
        x = TopPLogitsWarper(s.top_p)(None, x)
    return x.softmax(-1)


@pytest.mark.parametrize("s", [Sampling(temperature=0.7), Sampling(temperature=1.3, top_k=20),
                               Sampling(temperature=0.9, top_p=0.8), Sampling(temperature=1.0, top_k=50, top_p=0.5)],
                         ids=lambda s: s.label())
def test_probs_equal_transformers_warpers(s, device):
    logits = torch.randn(16, 300, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    assert torch.allclose(probs(logits.to(device), s).cpu(), warped(logits, s), atol=1e-12)


def test_greedy_is_the_one_hot_argmax():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(1))
    p = probs(logits, Sampling(temperature=0.0))
    assert torch.equal(p.argmax(-1), logits.argmax(-1)) and torch.equal(p.sum(-1), torch.ones(4, dtype=p.dtype))


def test_keyed_draws_are_uniform_and_independent_of_each_other():
    u = [uniform(3, n, TARGET) for n in range(20000)]
    assert kstest(u, "uniform").pvalue > 1e-3
    v = [uniform(3, n, DRAFT) for n in range(20000)]
    assert abs(float(torch.corrcoef(torch.tensor([u, v]))[0, 1])) < 0.03
    assert uniform(3, 7, ACCEPT) == uniform(3, 7, ACCEPT) != uniform(4, 7, ACCEPT)


def test_draw_is_the_inverse_cdf_and_never_picks_a_zero():
    p = torch.tensor([0.0, 0.25, 0.0, 0.75, 0.0])
    assert [draw(p, u) for u in (0.0, 0.2499, 0.25, 0.99999999)] == [1, 1, 3, 3]
    counts = torch.bincount(torch.tensor([draw(p, uniform(0, n, TARGET)) for n in range(8000)]), minlength=5)
    assert counts[0] == counts[2] == counts[4] == 0 and abs(int(counts[3]) / 8000 - 0.75) < 0.02


@pytest.mark.parametrize("bad", [{"temperature": -0.1}, {"temperature": float("nan")}, {"top_p": 0.0},
                                 {"top_p": 1.5}, {"top_k": -1}, {"seed": -2}])
def test_settings_out_of_range_are_refused(bad):
    with pytest.raises(ValidationError):
        Sampling(**bad)


@pytest.mark.parametrize("s", [Sampling(temperature=0.9, top_p=0.8), Sampling(temperature=1.0, top_k=50, top_p=0.5),
                               Sampling(temperature=1.3, top_k=20)], ids=lambda s: s.label())
def test_kernel_probs_are_the_engine_kernels_draw(s):
    """kernel_probs = P(TensorRT-LLM's C++ kernel returns x) (upstream.sampling ENGINE_TOP_P_TRUNCATES):
    P' = u * top_p over the top-k renormalised, first token in descending order whose cumulative
    probability reaches P'; integrated over u exactly (the token changes only at cumulative masses)."""
    logits = torch.randn(4, 60, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 3
    base = probs(logits, s.model_copy(update={"top_p": 1.0}))
    for row, p in zip(kernel_probs(logits, s), base):
        sorted_p, order = p.sort(descending=True)
        cum = sorted_p.cumsum(0)
        edges = torch.cat([torch.zeros(1, dtype=cum.dtype), cum.clamp(max=s.top_p)]) / s.top_p  # u at which the token changes
        want = torch.zeros_like(p).scatter(0, order, edges[1:] - edges[:-1])
        assert torch.allclose(row, want, atol=1e-12) and abs(float(row.sum()) - 1) < 1e-12
    assert torch.allclose(kernel_probs(logits, s.model_copy(update={"top_p": 1.0})), base, atol=1e-12)


@pytest.mark.parametrize("t", [1e-5, 1e-200, 1e-310, 5e-324])
def test_a_tiny_temperature_is_the_argmax_without_nan(t):
    """Any T > 0 the settings accept, subnormal included, gives the argmax's one-hot (logits / T
    alone overflows to inf there and softmax gives NaN); masked (-inf) logits stay at 0."""
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 3
    logits[:, :5] = float("-inf")
    want = torch.nn.functional.one_hot(logits.argmax(-1), 40).double()
    for s in (Sampling(temperature=t), Sampling(temperature=t, top_k=7, top_p=0.3)):
        assert torch.equal(probs(logits, s), want) and torch.equal(kernel_probs(logits, s), want)
