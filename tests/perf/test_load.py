"""perf.load: what a run and its warm-up send, and the open loop's work per arrival."""

import asyncio

import pytest

from trtspec.perf.client import Result, ServerGone
from trtspec.perf.load import Plan, Prompt, StreamPool, open_loop, warmup_plan


def test_the_warm_up_sends_the_prompts_a_run_sends_last():
    """A server that reuses KV across requests must not serve the first measured requests from the
    warm-up's prefill: the warm-up takes the prompt list from its end, the run from its start."""
    prompts = [Prompt(str(i), object()) for i in range(5)]
    plan = Plan(prompts, requests=3, duration_s=None, timeout_s=9.0, counted=True)
    warm = warmup_plan(plan, 2)
    assert [p.id for p in warm.prompts[:warm.requests]] == ["4", "3"]
    assert not {p.id for p in warm.prompts[:2]} & {p.id for p in plan.prompts[:plan.requests]}
    assert (warm.duration_s, warm.timeout_s, warm.counted) == (None, 9.0, True)


class InstantStream:
    """A stream whose requests end at once (the failing one, if any, as a lost server)."""

    sent = 0

    def __init__(self, fail_at: int | None = None):
        self.fail_at = fail_at

    async def send(self, request, prompt_id, timeout_s, counted) -> Result:
        InstantStream.sent += 1
        await asyncio.sleep(0)
        if InstantStream.sent == self.fail_at:
            raise ServerGone("gone")
        return Result(prompt_id, 0.0)

    def close(self) -> None:
        pass


class InspectedTask(asyncio.Task):
    """A task that counts how often anything asks whether it is done."""

    asked = 0

    def done(self) -> bool:
        InspectedTask.asked += 1
        return super().done()


def open_loop_run(n: int, rate: float, fail_at: int | None = None) -> list[Result]:
    plan = Plan([Prompt(str(i), object()) for i in range(7)], n, None, 9.0, True)
    results: list[Result] = []

    async def run() -> None:
        asyncio.get_running_loop().set_task_factory(lambda loop, coro, **kw: InspectedTask(coro, loop=loop, **kw))
        await open_loop(StreamPool(lambda: InstantStream(fail_at)), plan, rate, 0, results)

    InstantStream.sent = InspectedTask.asked = 0
    asyncio.run(run())
    return results


def test_the_open_loop_does_constant_work_per_arrival():
    """Each arrival used to ask every earlier request whether it had failed: n^2 / 2 questions for n
    arrivals (2 million at 2000), enough for the client to fall behind the arrivals it times at high
    rates. Now a request that ends reports itself: a few questions per request, however many came
    before. (A rate no client keeps up with: every arrival is due at once, all n in flight.)"""
    for n in (200, 800):
        results = open_loop_run(n, 1e9)
        assert len(results) == n and InstantStream.sent == n
        assert InspectedTask.asked <= 4 * n, (n, InspectedTask.asked)


def test_a_lost_server_ends_the_open_loops_arrivals():
    """The request that finds the server gone stops the arrivals (and is raised), as before."""
    with pytest.raises(ServerGone):
        open_loop_run(40, 50.0, fail_at=2)
    assert InstantStream.sent < 40
