"""Which half of a comparison goes out first, and whether going first or second mattered.

Why: the half sent second re-sends the prompts the first just sent, so whatever a server carries
from one request to the next favours it: KV-cache block reuse of the shared prefixes (TensorRT-LLM's
enable_kv_cache_reuse, which trtspec's draft-target and n-gram repositories turn on for the target,
whose KV both modes share; the LLM API's block reuse, on by default) shortens its context phases, and
so do warm allocators and caches. A speedup whose baseline always went second reads low (the
previous order: on, off at every load point, and an odd number of blocks ending on, off too).

So the order alternates from block to block and from load point to load point (`forward`): with
any even number of blocks each mode goes first equally often at every load point, and with one
block (two runs in a row) it does over an even number of load points, workloads counted in turn.

And it is measured: per load point with both orders, the mean TTFT of the half sent first minus
that of the half sent second over the interleaved pairs (`ttft_gap`). A pair's difference holds the
order's effect plus speculation's own on TTFT (a draft model's context phase), with opposite signs
in the two orders, so each order's mean is taken and the two averaged: speculation's part cancels,
whatever the counts. With one order only (blocks 1) the two are not separable and no gap is given.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .bootstrap import BOOT_REPS, BOOT_SEED, interval, resample, widen
from .schema import Interval, RequestRecord
from .stats import NO_DIFFERENCE, pair_up, verdict


def forward(point: int, block: int) -> bool:
    """Whether block `block` of the `point`-th load point (counted over the invocation's workloads
    in turn) sends its halves in their forward order: speculation on, then off (the sweep's
    settings cheapest first). Alternates along both (module docstring)."""
    return (point + block) % 2 == 0


def order_label(sent_first: Sequence[bool]) -> str:
    """'on,off|off,on|...': the order of each block, from the speculative run's `sent_first`."""
    return "|".join("on,off" if first else "off,on" for first in sent_first)


def ttft_gap(spec: Sequence[RequestRecord], base: Sequence[RequestRecord], sent_first: Sequence[bool] | None
             ) -> tuple[float | None, Interval | None]:
    """(mean TTFT first minus second in seconds, its 95% interval) over the pairs of interleaved
    runs (stats.pair_up); `sent_first`: per block, whether the speculative half went first. The
    bootstrap resamples each order's pairs apart (perf.bootstrap's seeded resampling and small-sample
    widening, per order); (None, None) without two timed pairs in each order."""
    pairs = pair_up(spec, base) if sent_first else None
    groups: dict[bool, list[float]] = {True: [], False: []}
    for s, b in pairs or []:
        if s.ttft_s is not None and b.ttft_s is not None and s.block < len(sent_first):
            first = sent_first[s.block]
            groups[first].append((s.ttft_s - b.ttft_s) if first else (b.ttft_s - s.ttft_s))
    if min(len(g) for g in groups.values()) < 2:
        return None, None
    rng = np.random.default_rng(BOOT_SEED)
    means, spread = [], np.zeros(BOOT_REPS)
    for g in groups.values():
        d = np.asarray(g, dtype=np.float64)
        means.append(d.mean())
        spread += widen(d.size) * (d[resample(d.size, BOOT_REPS, rng)].mean(axis=1) - d.mean())
    gap = float(np.mean(means))
    return gap, interval(gap + spread / 2)


def gap_note(gap_s: float | None, ci: Interval | None, order: str | None) -> str | None:
    """What the perf line and the report say when the order's TTFT gap is measurable (its interval
    excludes 0), else None; `order`: `order_label`'s."""
    if gap_s is None or verdict(ci, 0.0, "later", "earlier") in (None, NO_DIFFERENCE):
        return None
    blocks = (order or "").split("|")
    return (f"mean TTFT sent first - sent second {gap_s * 1e3:+.1f} ms [{ci.low * 1e3:+.1f}, {ci.high * 1e3:+.1f}]: "
            f"the order mattered (speculation went first in {blocks.count('on,off')} of {len(blocks)} blocks)")
