"""perf.order: which half of a comparison goes out first, and the TTFT gap that going first makes.

The half sent second re-sends the prompts the first sent (KV-cache reuse, warm caches), so the
planned order must give each mode the first place equally often, and results.json must say whether
the order mattered. Everything here is read off the schedule and made-up records: no timing.
"""

from __future__ import annotations

import numpy as np
import pytest

from trtspec.perf.compare import comparisons, order_note, speedup_line
from trtspec.perf.load import block_schedule
from trtspec.perf.order import forward, order_label, ttft_gap
from trtspec.perf.schema import RequestRecord, Run
from trtspec.perf.stats import summarize


def firsts(blocks: int, points: int) -> list[bool]:
    """Per block of every load point, whether speculation went first (load.block_schedule's plan)."""
    out = []
    for point in range(points):
        sched = block_schedule(8 * blocks, blocks, point)
        out += [sched[2 * j][1] for j in range(blocks)]
    return out


@pytest.mark.parametrize("blocks, points", [(1, 2), (1, 4), (2, 1), (4, 1), (6, 3), (3, 2), (5, 2), (1, 6)])
def test_each_mode_goes_first_equally_often(blocks, points):
    """blocks 1 (two runs in a row) over an even number of load points, any even number of blocks
    at every load point, and an odd number over an even number of points: as often on first as off.
    The previous plan put speculation first at every load point and on the odd block's extra place."""
    f = firsts(blocks, points)
    assert sum(f) == len(f) - sum(f)
    if blocks % 2 == 0:  # balanced within every load point, not only over them
        assert all(sum(f[p * blocks:(p + 1) * blocks]) == blocks // 2 for p in range(points))


def test_the_order_alternates_block_to_block_and_point_to_point_and_the_sweep_follows_it():
    assert [[on for _, on, _ in block_schedule(1, 1, p)] for p in range(3)] == [[True, False], [False, True],
                                                                                [True, False]]
    assert [on for _, on, _ in block_schedule(6, 3, 1)] == [False, True, True, False, False, True]
    assert [forward(p, j) for p in (0, 1) for j in range(3)] == [True, False, True, False, True, False]
    sched = block_schedule(7, 3, 1)  # the same requests in both halves of every block
    assert all(a[0] == b[0] and a[2] == b[2] and a[1] != b[1] for a, b in zip(sched[::2], sched[1::2]))


def simulated(blocks: int, order_s: float, spec_extra_s: float, point: int = 0, per_block: int = 4, seed: int = 0):
    """Interleaved c = 1 runs per the schedule: each prompt's TTFT (its own length, lognormal) plus
    speculation's draft context phase (`spec_extra_s`) plus, for the half sent second, `order_s`
    (negative: a prefix-cache hit); returns (spec records, base records, spec's sent_first)."""
    rng = np.random.default_rng(seed)
    base_ttft = rng.lognormal(np.log(0.2), 0.5, size=blocks * per_block)
    recs: dict[bool, list[RequestRecord]] = {True: [], False: []}
    sent_first: list[bool] = []
    for j, on, sent in block_schedule(blocks * per_block, blocks, point):
        second = len(recs[not on]) > len(recs[on])  # the other half already sent block j
        if on:
            sent_first.append(not second)
        for i in sent:
            ttft = base_ttft[i] + (spec_extra_s if on else 0.0) + (order_s if second else 0.0) \
                + rng.normal(0, 0.005)
            recs[on].append(RequestRecord(index=len(recs[on]), prompt_id=f"p{i}", start_s=float(i), status="ok",
                                          ttft_s=ttft, e2e_s=ttft + 1.0, itl_s=0.03, output_tokens=32, block=j))
    return recs[True], recs[False], sent_first


def test_the_gap_is_the_orders_and_not_speculations_own_ttft():
    """A draft context phase adds 30 ms to every speculative TTFT; a cache hit takes 40 ms off the
    half sent second. First minus second is +40 ms whichever mode went first more often, and 0 when
    there is no cache: speculation's 30 ms cancels between the two orders."""
    for blocks, point in ((4, 0), (3, 0), (3, 1)):
        spec, base, first = simulated(blocks, -0.040, 0.030, point)
        gap, ci = ttft_gap(spec, base, first)
        assert gap == pytest.approx(0.040, abs=0.005) and ci.low > 0.02 and ci.high < 0.06
    spec, base, first = simulated(4, 0.0, 0.030)
    gap, ci = ttft_gap(spec, base, first)
    assert abs(gap) < 0.005 and ci.low < 0 < ci.high


def test_one_order_only_gives_no_gap():
    """With one block (or every block in one order) speculation's TTFT and the order's are one number."""
    spec, base, first = simulated(4, -0.040, 0.030)
    assert ttft_gap(spec, base, [True] * 4) == (None, None)
    unblocked = [r.model_copy(update={"block": None}) for r in spec]
    assert ttft_gap(unblocked, base, first) == (None, None)
    assert ttft_gap(spec, base, None) == (None, None)


def runs(spec, base, first) -> list[Run]:
    def run(recs, on, sent_first):
        return Run(workload="chat", speculation=on, concurrency=1, started_at="t", completed=True, requests=recs,
                   summary=summarize(recs), sent_first=sent_first)
    return [run(spec, True, first), run(base, False, None if first is None else [not f for f in first])]


def test_comparisons_record_the_order_and_say_when_the_gap_is_measurable():
    spec, base, first = simulated(4, -0.040, 0.030)
    (c,) = comparisons(runs(spec, base, first))
    assert c.order == order_label(first) == "on,off|off,on|on,off|off,on"
    assert c.order_ttft_gap_s == pytest.approx(0.040, abs=0.005) and c.order_ttft_gap_ci_s.low > 0
    assert "the order mattered (speculation went first in 2 of 4 blocks)" in speedup_line(c)
    assert order_note(c) in speedup_line(c)
    spec, base, first = simulated(4, 0.0, 0.030)
    (c,) = comparisons(runs(spec, base, first))
    assert c.order_ttft_gap_ci_s.low < 0 < c.order_ttft_gap_ci_s.high
    assert order_note(c) is None and "order" not in speedup_line(c)


def test_results_without_an_order_still_compare():
    """results.json written before the order was recorded: no order, no gap, the row as before."""
    spec, base, first = simulated(2, -0.040, 0.030)
    (c,) = comparisons(runs(spec, base, None))
    assert (c.order, c.order_ttft_gap_s, c.order_ttft_gap_ci_s) == (None, None, None)
    assert "order" not in c.model_dump_json(by_alias=True)  # nor fields in the file


def test_report_html_says_when_the_order_mattered():
    from trtspec.perf.report import render_report
    from trtspec.perf.schema import PerfResults, Settings

    def results(order_s):
        spec, base, first = simulated(4, order_s, 0.030)
        rs = runs(spec, base, first)
        settings = Settings(url="127.0.0.1:8001", model="generate", workloads={"chat": "mt-bench"}, concurrency=[1],
                            requests=16, warmup=0, timeout_s=60, max_tokens=32, baseline=True, seed=0, blocks=4)
        return PerfResults(created="t", trtspec_version="0", settings=settings, completed=True, runs=rs,
                           comparisons=comparisons(rs))
    assert "the order mattered (speculation went first in 2 of 4 blocks)" in render_report(results(-0.040))
    assert "the order mattered" not in render_report(results(0.0))
