"""SIGTERM as Ctrl-C (trtspec.pipeline.signals), in this process: outside an event loop it raises
KeyboardInterrupt where it lands; inside one it must not, since the callback it lands in may swallow
it (grpc.aio's do, which left `trtspec run` hung or crashed with its server running)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from trtspec.pipeline.signals import sigterm_as_interrupt


def test_outside_an_event_loop_sigterm_raises_keyboard_interrupt_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="signal 15"):
        with sigterm_as_interrupt():
            signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


def _run_with_sigterm_in_a_callback() -> dict:
    """asyncio.run of a task waiting on a long sleep, while a loop callback that swallows every
    exception (as grpc.aio's callback wrapper does) receives SIGTERM mid-way."""
    seen = {"swallowed": None, "task": None, "callback_finished": False}

    def callback():
        try:
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside the callback
            sum(range(10_000))
            seen["callback_finished"] = True
        except BaseException as e:  # noqa: BLE001 - what grpc's wrapper does
            seen["swallowed"] = repr(e)

    async def main():
        asyncio.get_running_loop().call_later(0.05, callback)
        try:
            await asyncio.sleep(3)  # the old handler: swallowed, the task sleeps on
            seen["task"] = "slept on"
        except asyncio.CancelledError:
            seen["task"] = "cancelled"
            raise

    with pytest.raises(KeyboardInterrupt):
        with sigterm_as_interrupt():
            asyncio.run(main())
    return seen


@pytest.mark.timeout(20)
def test_inside_asyncio_run_sigterm_cancels_the_main_task_as_ctrl_c_does():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    seen = _run_with_sigterm_in_a_callback()
    assert seen == {"swallowed": None, "task": "cancelled", "callback_finished": True}


@pytest.mark.timeout(20)
def test_with_ctrl_c_ignored_sigterm_still_stops_the_loop_between_callbacks():
    """A parent that ignores SIGINT (a background job of a script) keeps asyncio.run from taking
    Ctrl-C over; SIGTERM is raised from a loop callback of its own instead, and asyncio.run then
    cancels the task."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        seen = _run_with_sigterm_in_a_callback()
    finally:
        signal.signal(signal.SIGINT, old)
    assert seen == {"swallowed": None, "task": "cancelled", "callback_finished": True}


@pytest.mark.timeout(60)
def test_a_second_interrupt_while_the_server_stops_kills_it(tmp_path, monkeypatch):
    """The first Ctrl-C/SIGTERM stops the server gracefully (drain, exit timeout); a second one
    landing in that wait must not leave it running: the stop goes on with no grace (SIGKILL to the
    group) and the interrupt propagates. A real process group stands in for tritonserver and a stub."""
    import subprocess
    from types import SimpleNamespace

    from trtspec.pipeline.stages import stop_server
    from trtspec.triton_repo.serve import CpuServer

    server = CpuServer(tmp_path)
    server.proc = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 60 & wait"], start_new_session=True)
    server.workdir, server.ready = tmp_path / "work", True
    server.workdir.mkdir()

    def second_interrupt():
        raise KeyboardInterrupt("signal 15")
    monkeypatch.setattr(server, "drain", second_interrupt)
    ctx = SimpleNamespace(server=server)
    pgid = server.proc.pid
    with pytest.raises(KeyboardInterrupt):
        stop_server(ctx)
    assert _live_members(pgid) == []  # killed (a reparented zombie may linger until init reaps it)
    assert ctx.server is None and not (tmp_path / "work").exists()


def _live_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that are not zombies (/proc/PID/stat: state, then pgrp)."""
    out = []
    for d in os.listdir("/proc"):
        try:
            fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(d))
    return out
