"""perf.load: what a run and its warm-up send."""

from trtspec.perf.load import Plan, Prompt, warmup_plan


def test_the_warm_up_sends_the_prompts_a_run_sends_last():
    """A server that reuses KV across requests must not serve the first measured requests from the
    warm-up's prefill: the warm-up takes the prompt list from its end, the run from its start."""
    prompts = [Prompt(str(i), object()) for i in range(5)]
    plan = Plan(prompts, requests=3, duration_s=None, timeout_s=9.0, counted=True)
    warm = warmup_plan(plan, 2)
    assert [p.id for p in warm.prompts[:warm.requests]] == ["4", "3"]
    assert not {p.id for p in warm.prompts[:2]} & {p.id for p in plan.prompts[:plan.requests]}
    assert (warm.duration_s, warm.timeout_s, warm.counted) == (None, 9.0, True)
