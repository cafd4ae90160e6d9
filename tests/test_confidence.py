"""One 95% quantile: the tuner's "not distinguishable" and perf's intervals use the same z."""

import inspect

import pytest

from trtspec.confidence import Z95


def test_z95_is_the_normal_975_quantile():
    norm = pytest.importorskip("scipy.stats").norm
    assert Z95 == pytest.approx(norm.ppf(0.975), abs=1e-12)


def test_tuner_and_perf_read_the_one_constant():
    """select's noise tests default to it and perf.stats uses it; no module keeps its own copy."""
    from trtspec.perf import stats
    from trtspec.tuning import select

    for fn in (select.within_noise, select.indistinguishable, select.prompts_to_separate_from_off):
        assert inspect.signature(fn).parameters["z"].default is Z95, fn.__name__
    assert stats.Z95 is Z95


def test_pm_text_says_unknown_and_measured_zero_and_leaves_only_the_exact_bare():
    """The one ± rule: 95% half-width; '±?' unknown; a measured SE of 0 (prompts that agreed) is
    ±0.00, an estimate like any other; only a value exact by construction (exact=True) stands bare."""
    from trtspec.confidence import Z95, pm_text

    assert pm_text(0.1) == f" ±{Z95 * 0.1:.2f}" == " ±0.20"
    assert pm_text(None) == " ±?"
    assert pm_text(0.0) == " ±0.00"
    assert pm_text(0.0, exact=True) == pm_text(None, exact=True) == ""


def test_interval_text_is_the_interval_or_unknown():
    """The one interval-in-text rule the summary, the sweep lines and report.html share."""
    from types import SimpleNamespace

    from trtspec.confidence import interval_text

    ci = SimpleNamespace(low=0.0123, high=0.0456)
    assert interval_text(ci, ".1f", 1e3) == "[12.3, 45.6]"
    assert interval_text(SimpleNamespace(low=0.9, high=1.3), ".2f", suffix="x") == "[0.90x, 1.30x]"
    assert interval_text(None, ".2f") == "±?"
