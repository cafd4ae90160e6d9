"""perf.parity: the two-sample tests of the sampled-output distribution check, against scipy, and
their power: the same distribution passes, a shifted one fails."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from trtspec.perf.parity import ALPHA, chi2_homogeneity, gamma_q, ks_2samp, word_counts

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("a, x", [(0.5, 0.1), (1.0, 1.0), (3.5, 2.0), (10.0, 25.0), (24.5, 20.0), (2.0, 0.0)])
def test_gamma_q_is_the_chi_square_survival_function(a, x):
    assert gamma_q(a, x) == pytest.approx(stats.chi2.sf(2 * x, 2 * a), rel=1e-9, abs=1e-12)


def test_ks_2samp_matches_scipys_asymptotic_test():
    rng = np.random.default_rng(0)
    for shift in (0.0, 0.3, 1.0):
        a, b = rng.normal(0, 1, 120), rng.normal(shift, 1, 90)
        d, p = ks_2samp(a, b)
        ref = stats.ks_2samp(a, b, method="asymp")
        assert d == pytest.approx(ref.statistic, abs=1e-12)
        assert p == pytest.approx(ref.pvalue, abs=0.02)  # Stephens' correction vs scipy's exact-n formula
    assert ks_2samp([3, 3, 3], [3, 3]) == (0.0, 1.0)


@pytest.mark.parametrize("n", [1000, 2500])
def test_ks_p_of_a_tiny_distance_between_large_runs_is_one(n):
    """Two large runs whose lengths differ in one request: D = 1/(2n), lambda ~0.01, where
    Kolmogorov's series does not converge in its 100 terms (its partial sum read 0.87 at n=2500)."""
    a = [10] * n + [20] * n
    b = [10] * n + [20] * (n - 1) + [21]
    d, p = ks_2samp(a, b)
    assert d == pytest.approx(stats.ks_2samp(a, b, method="asymp").statistic)
    assert p == pytest.approx(stats.ks_2samp(a, b, method="asymp").pvalue, abs=1e-6)


def test_chi2_homogeneity_matches_scipy_and_detects_a_shift():
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(8)]
    p = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.06, 0.05, 0.04])
    a = Counter(rng.choice(words, 2000, p=p))
    b = Counter(rng.choice(words, 1500, p=p))
    stat, dof, pv = chi2_homogeneity(a, b)
    table = np.array([[a[w] for w in words], [b[w] for w in words]])
    ref = stats.chi2_contingency(table, correction=False)
    assert stat == pytest.approx(ref.statistic) and dof == ref.dof and pv == pytest.approx(ref.pvalue)
    assert pv >= ALPHA
    q = p.copy()
    q[0], q[1] = 0.2, 0.3  # what a lossy accept rule does: probability moved between tokens
    c = Counter(rng.choice(words, 1500, p=q))
    assert chi2_homogeneity(a, c)[2] < ALPHA


def test_word_counts_keep_the_top_words_and_pool_the_rest():
    counts = word_counts(["a b a c", None, "a d e"], top=2)
    assert counts == {"a": 3, "b": 1, "": 3}
    stat, dof, _ = chi2_homogeneity(Counter(counts), Counter(word_counts(["a b a c", "a d e"], top=2)))
    assert stat == pytest.approx(0.0) and dof == 2
