"""Quality parity at temperature > 0: do speculative and baseline outputs follow one distribution?

Token equality is the check at temperature 0 (speculation is exact there). At T > 0 two lossless
deployments give different texts for the same prompt unless their random draws line up, so the
check is a distribution check on the two runs' outputs, with two-sample tests:
- output lengths (tokens per request): two-sample Kolmogorov-Smirnov, asymptotic p-value
  (Kolmogorov's series with Stephens' small-sample correction, as in Numerical Recipes' kstwo);
- word frequencies (whitespace-split words of the streamed texts; the `TOP_WORDS` most frequent of
  the two runs together, the rest pooled as one cell): chi-square test of homogeneity on the 2 x m
  table, p from the regularized upper incomplete gamma function.
A lossy rule (exact_match_resample, typical acceptance) shifts these distributions; a small p
(< ALPHA) says the speculative outputs differ from the baseline's. Both tests need samples: with
few requests they have little power, which the p-values say themselves. Implemented here (numpy and
math only) because scipy is a test dependency, not a runtime one; the tests compare with scipy.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

TOP_WORDS = 50
ALPHA = 0.01


def ks_2samp(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(D, p) of the two-sample Kolmogorov-Smirnov test."""
    x, y = np.sort(np.asarray(a, float)), np.sort(np.asarray(b, float))
    if not len(x) or not len(y):
        return 0.0, 1.0
    grid = np.concatenate([x, y])
    d = float(np.max(np.abs(np.searchsorted(x, grid, "right") / len(x) - np.searchsorted(y, grid, "right") / len(y))))
    ne = len(x) * len(y) / (len(x) + len(y))
    lam = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * d
    return d, _kolmogorov_q(lam)


def _kolmogorov_q(lam: float) -> float:
    """Kolmogorov's survival series. Under lam ~0.026 its terms do not shrink within 100 and a
    partial sum of the alternating ~2s is noise (0.87 at lam 0.01): that is Q ~ 1, as NR's probks
    returns when the series fails to converge."""
    if lam < 1e-3:
        return 1.0
    total, sign = 0.0, 1.0
    for k in range(1, 101):
        term = sign * 2.0 * math.exp(-2.0 * k * k * lam * lam)
        total += term
        if abs(term) < 1e-10 * max(total, 1e-300):
            break
        sign = -sign
    else:
        return 1.0
    return min(1.0, max(0.0, total))


def gamma_q(a: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(a, x) (series below a + 1, continued fraction above)."""
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        n = a
        for _ in range(1000):
            n += 1.0
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b, c, d = x + 1.0 - a, 1.0 / tiny, 1.0 / (x + 1.0 - a)
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_front) * h)


def chi2_homogeneity(a: Counter, b: Counter, top: int = TOP_WORDS) -> tuple[float, int, float]:
    """(chi-square, degrees of freedom, p) of 'a and b are samples of one categorical distribution',
    on the `top` most frequent categories of a + b and one pooled cell for the rest."""
    both = a + b
    keys = [k for k, _ in both.most_common(top + 1) if k][:top]  # "" is word_counts' pooled rest
    rows = np.array([[c[k] for k in keys] + [sum(c.values()) - sum(c[k] for k in keys)] for c in (a, b)], float)
    rows = rows[:, rows.sum(0) > 0]
    if rows.shape[1] < 2 or (rows.sum(1) == 0).any():
        return 0.0, 0, 1.0
    expected = rows.sum(1, keepdims=True) * rows.sum(0, keepdims=True) / rows.sum()
    stat = float(((rows - expected) ** 2 / expected).sum())
    dof = rows.shape[1] - 1
    return stat, dof, gamma_q(dof / 2.0, stat / 2.0)


def word_counts(texts: Iterable[str | None], top: int = 4 * TOP_WORDS) -> dict[str, int]:
    """Word frequencies of a run's outputs, the `top` most common kept (what results.json stores:
    enough for the TOP_WORDS cells of a comparison) and the rest summed under the empty word."""
    counts = Counter(w for t in texts if t for w in t.split())
    kept = dict(counts.most_common(top))
    rest = sum(counts.values()) - sum(kept.values())
    return {**kept, **({"": rest} if rest else {})}
