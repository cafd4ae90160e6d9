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
