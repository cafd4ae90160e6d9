"""The run-level guard around each measured run of `trtspec perf` (runner._measure, _measure_procs).

Why: every request is bounded by its own perf.timeout_s, so a run ends on its own; the guard only
trips on a bug or a stalled event loop, and then stops the run with a one-line error instead of
letting it hang forever (the cut run is kept, as for a lost server).
"""

from __future__ import annotations

import asyncio
import contextlib
import math

from ..errors import TrtspecError
from .load import Plan

RUN_GUARD_SLACK_S = 30.0


def guard_s(plan: Plan, concurrency, rate) -> float:
    """The longest a run may take: every request is bounded by its timeout, so this only trips on a bug
    or a stalled event loop; it keeps a run from hanging forever all the same."""
    if concurrency:
        busy = (plan.duration_s or 0) + math.ceil((plan.requests or 0) / concurrency) * plan.timeout_s
        return busy + plan.timeout_s + RUN_GUARD_SLACK_S
    arrivals = plan.duration_s if plan.duration_s else 3 * (plan.requests or 0) / rate + 20 / rate
    return arrivals + plan.timeout_s + RUN_GUARD_SLACK_S


@contextlib.asynccontextmanager
async def guard(seconds: float):
    """Cut the block after `seconds` with a one-line TrtspecError (the module docstring says why)."""
    try:
        if hasattr(asyncio, "timeout"):
            async with asyncio.timeout(seconds):
                yield
        else:  # Python 3.10: no run-level guard beyond the per-request timeouts
            yield
    except TimeoutError:
        raise TrtspecError(f"the run exceeded its {seconds:.0f} s guard (every request has a "
                           "perf.timeout_s, so the client stalled); stopped") from None
