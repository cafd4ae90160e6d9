"""SIGTERM during `trtspec run` takes Ctrl-C's path.

Why: the tritonserver the serve stage starts (and a trtllm-build) runs in a session of its own, so
no signal sent to the run reaches it, and Python's default SIGTERM ends the process without running
a `finally`: a `kill`, `timeout` or a cancelled CI job would leave the server running with no parent.
Raised as KeyboardInterrupt, SIGTERM unwinds like Ctrl-C: the server is stopped, the stage stays
recorded as interrupted (or failed, where the stage turns the interrupt into its error).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def sigterm_as_interrupt():
    """While the block runs, SIGTERM raises KeyboardInterrupt (main thread only: signal handlers
    cannot be set elsewhere, and are not called there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
