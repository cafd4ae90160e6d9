"""N-gram drafting profiled exactly: the runtime's own proposer replayed over the target's output.

An n-gram draft needs no model, only the committed sequence and the pool built from it; but the
pool depends on the step boundaries (each proposal rescans from where the last one stopped, with
an overlap, and the keep rule depends on the order of the scans), so the acceptance at state t is
not a function of t alone. What is known after one target decode is the committed sequence at
every state: greedily (and under exact_match at T > 0, keyed draws: sampled.py) a speculative run
of any K emits exactly the target's output x. So for each (n, K) the profiler runs
runtime.ngram.NGramProposer over x step by step as decode.py does: at state t (prompt + x_1..x_t,
from t = 1: the first token is the prefill's) it drafts d, the step accepts the longest prefix of d
equal to x_{t+1}, x_{t+2}, .. and moves to t + accepted + 1, until t reaches the recorded length.
No target call, no second pool: the proposer's own `draft` builds and queries the pool.

Pool: one per request (TensorRT-LLM `is_public_pool: false`). Upstream's default public pool makes a
request's drafts depend on which requests ran before it and beside it, which a per-workload profile
cannot state; trtspec profiles private pools (measurement_conditions.ngram_pool) and serves them
(model.yaml, and one pool per request in the trtllm and cpu flavors). The replay of a sample equals
generate_batch(mode="ngram", draft_len=K, ngram_size=n) on that prompt alone (a fresh proposer).

Drafts are cut at prompt + max_new_tokens - 1 as upstream cuts them, with the workload's
max_new_tokens; an output that ended at eos earlier ends its last step there: the step counts the
tokens it emits, the eos included, and no draft past it (runtime/stats.py counted_step).
"""

from __future__ import annotations

from typing import Sequence

from ..errors import TrtspecError
from ..runtime.batch import Request
from ..runtime.ngram import NGramProposer
from ..runtime.stats import Step, counted_step
from ..upstream import sampling as upstream_sampling
from .ngram_acceptance import Steps

POOL = "per-request"  # measurement_conditions.ngram_pool (module docstring)
# Drafts are tokens without a distribution: exact match (PyTorch backend, trtspec's runtime), or the
# engine flow's exact match with a fresh draw at the first miss (approximate: sampled.py).
RULES = (upstream_sampling.GREEDY.name, upstream_sampling.EXACT_MATCH.name,
         upstream_sampling.EXACT_MATCH_RESAMPLE.name)


def replay(prompt: Sequence[int], output: Sequence[int], k: int, n: int, max_new_tokens: int) -> Steps:
    """[[accepted, drafted], ...] per verify step of K = k, max_matching_ngram_size = n, one request."""
    proposer = NGramProposer(k, n, public_pool=False)
    request = Request(list(prompt), max_new_tokens)
    steps, t = [], 1
    while t < len(output):
        request.output = list(output[:t])
        draft = proposer.draft(0, request)
        accepted = 0
        while accepted < len(draft) and t + accepted < len(output) and draft[accepted] == output[t + accepted]:
            accepted += 1
        steps.append([counted_step(Step(accepted, 0), len(output) - t).accepted, len(draft)])
        t += accepted + 1
    return steps


def ngram_steps(prompt: Sequence[int], output: Sequence[int], sizes: Sequence[int], max_k: int,
                max_new_tokens: int) -> dict[str, list[Steps]]:
    """One sample's `ngram_steps`: {str(n): [steps of K = 1..max_k]}."""
    return {str(n): [replay(prompt, output, k, n, max_new_tokens) for k in range(1, max_k + 1)] for n in sizes}


def check_rule(rule: str) -> None:
    """N-gram drafts carry no distribution, so only the rules of RULES verify them."""
    if rule not in RULES:
        raise TrtspecError(f"profile.accept_rule: {rule} does not apply to n-gram drafts (no draft logits; "
                           f"they are verified by {' / '.join(RULES)})")
