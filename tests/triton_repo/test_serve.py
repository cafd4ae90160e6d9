"""`trtspec serve` exits with tritonserver's own status (the live shutdown tests are in
tests/integration/test_triton_shutdown.py)."""

from __future__ import annotations

import signal

import pytest

from trtspec.triton_repo.serve import exit_status


@pytest.mark.parametrize("code, status", [(0, 0), (1, 1), (-signal.SIGKILL, 137), (-signal.SIGABRT, 134),
                                          (None, 1)])
def test_exit_status_is_tritonservers(code, status):
    assert exit_status(code) == status
