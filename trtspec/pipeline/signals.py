"""SIGTERM during `trtspec run` takes Ctrl-C's path.

Why: the tritonserver the serve stage starts (and a trtllm-build) runs in a session of its own, so
no signal sent to the run reaches it, and Python's default SIGTERM ends the process without running
a `finally`: a `kill`, `timeout` or a cancelled CI job would leave the server running with no parent.
Raised as KeyboardInterrupt, SIGTERM unwinds like Ctrl-C: the server is stopped, the stage stays
recorded as interrupted (or failed, where the stage turns the interrupt into its error).

Inside an event loop (perf's gRPC client) the interrupt must not be raised where the signal lands:
that is often a grpc.aio callback, which swallows the exception ("Exception ignored in
CallbackWrapper.functor_run") and leaves its channel broken, so the run hung or crashed with the
server still running (seen in CI). There SIGTERM does what asyncio.run does for Ctrl-C: its main
task is cancelled from the loop, between callbacks.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from contextlib import contextmanager


def _interrupt(signum, frame):
    ctrl_c = signal.getsignal(signal.SIGINT)
    if callable(ctrl_c) and ctrl_c is not signal.default_int_handler:
        # asyncio.run's own Ctrl-C handler (it installs one over the default while it runs): it
        # cancels the main task from the loop and asyncio.run then raises KeyboardInterrupt
        return ctrl_c(signal.SIGINT, frame)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no event loop: raising here is Ctrl-C's path
        raise KeyboardInterrupt(f"signal {signum}") from None
    # a loop without asyncio.run's handler (the parent ignored SIGINT, so asyncio.run did not take
    # it over): raise from a callback of the loop's own, which asyncio lets through and after which
    # asyncio.run cancels the tasks
    loop.call_soon_threadsafe(_raise_interrupt, signum)


def _raise_interrupt(signum):
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
