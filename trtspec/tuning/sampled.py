"""Profiles at temperature T > 0: which output the profiler decodes, and what its replay predicts.

The estimator (exact_match, the rule of the PyTorch backend's two-model paths and of trtspec's own
runtime by default). Every random draw of a request is keyed by (seed, output position)
(trtspec/runtime/sampling.py), so under exact_match a speculative run with ANY draft length K or
tree emits exactly the sequence x that plain sampling emits for the same seed: each verify step
samples the target at output position n from the same logits (the prefix is x_1..x_{n-1} whenever
the step reaches that node) with the same uniform, and keeps a draft token iff it equals that sample.
So at state t (prefix + x_1..x_t) the step accepts exactly the run of agreement between the draft's
proposals and x:

- draft-target: the draft's argmax teacher-forced along x (its proposals are made from the true
  prefix while they agree), i.e. `match_lengths` of the greedy profiler applied to x;
- EAGLE: the tree's candidate ranks of x_{t+1}, x_{t+2}, ... along x, i.e. `rank_paths` applied to x.

The profiler therefore decodes each prompt once by plain sampling (target only, one token per
forward), runs the same single teacher-forced draft pass as for greedy, and the replay of any K or
tree over those lists is the acceptance that K or tree has under exact_match *for that seed*,
exactly (tests/tuning/test_sampled.py checks it step for step against real speculative decoding).
Averaged over prompts and seeds it is an unbiased estimate of E[AL]; `samples_per_prompt` seeds
per prompt shrink the sampling part of the variance. Cost: as a greedy profile (one sampled decode
of max_new_tokens + max_k + 1 tokens and one draft pass per sample), times samples_per_prompt.

Seeds: sample j of a workload, repetition r, draws with seed `sampling.seed + r * n + j` (n samples),
which is the seed a batch of all of them gets from generate_batch; each profile sample records it.

The other rules (profile.accept_rule):
- greedy (EAGLE through Triton, the one-model EAGLE-3 path: upstream.sampling.PATH_RULES) ignores
  the request's temperature: the greedy profile IS the prediction (exact);
- exact_match_resample (engine-flow draft-target without draft logits): the same acceptance test
  (accept d with probability p(d | prefix) at each position along the path), but after a miss the
  engine emits a fresh draw of p rather than the sample that missed, so the emitted sequence is not
  plain sampling: the states it visits are distributed slightly differently (the rejected token can
  be drawn again). The profile decodes with the engine kernels' draws (at top_p < 1 a truncated
  top-p law, runtime.sampling.kernel_probs, not p), so the acceptance test is the engine's, and is
  otherwise the exact_match one: an APPROXIMATION, recorded as `estimator: approximate` in
  measurement_conditions;
- rejection_sampling (draft-target with draft logits: the draft SAMPLES d ~ q and d is kept with
  probability min(1, p(d)/q(d))): UNBIASED (`estimator: unbiased`: exact in law, not per seed).
  At one position the joint law of (kept?, emitted token y) is P(kept, y) = min(p, q)(y) and
  P(rejected, y) = max(0, p - q)(y), so the emitted y follows p (lossless) and, given y,
  P(kept | y) = min(1, q(y) / p(y)). The step's next position conditions on the emitted prefix
  either way (kept: the draft continues from it; rejected: the next step starts from it; a bonus
  token is a plain sample of p). Hence (emitted sequence, kept indicators) has the law of: x by
  plain sampling, and independently given x, b_n ~ Bernoulli(min(1, q_n(x_n) / p_n(x_n))) with p_n,
  q_n the target's and the draft's filtered distributions after x_<n. The profiler computes these
  from one teacher-forced pass of each model along x, draws b_n with keyed uniforms (seed,
  position, ACCEPT) and stores their runs as match_lengths: the same replay and tuner apply, and
  averaged over seeds AL(K) is unbiased (E_x[min(1, q/p)] = sum min(p, q) = 1 - TV(p, q), Leviathan
  et al.'s alpha). Chains only (EAGLE trees have no rejection rule). Cost: one extra target pass.
- typical_acceptance (EAGLE engines outside Triton) has no one-pass replay here: refused with an
  error naming profile.accept_rule.
At greedy settings (T = 0 or top_k 1) every rule is greedy and the profile is the greedy one.
"""

from __future__ import annotations

import torch

from ..errors import TrtspecError
from ..options import GREEDY_SAMPLING, Sampling
from ..runtime.draft_target import as_draft_ids
from ..runtime.generate import Models, generate_batch
from ..runtime.sampling import ACCEPT, probs, uniform
from ..runtime.stats import GenerationResult
from ..upstream import sampling as upstream

# exact: the replay is the rule's AL for each seed; unbiased: equal in law (in expectation over
# seeds); approximate: the visited states' law differs from the rule's (module docstring).
ESTIMATORS = {upstream.GREEDY.name: "exact", upstream.EXACT_MATCH.name: "exact",
              upstream.REJECTION.name: "unbiased", upstream.EXACT_MATCH_RESAMPLE.name: "approximate"}
SAMPLING_FIELDS = ("temperature", "top_k", "top_p")  # what a workload or a request may set; seeds are the profile's


def estimator(rule: str, sampling: Sampling) -> str:
    """'exact', 'unbiased' or 'approximate' (ESTIMATORS) for `rule` at `sampling`; errors name the field."""
    if rule not in {r.name for r in upstream.ACCEPT_RULES}:
        raise TrtspecError(f"profile.accept_rule: {rule!r} is not one of "
                           f"{', '.join(r.name for r in upstream.ACCEPT_RULES)}")
    if sampling.greedy:
        return "exact"
    if rule not in ESTIMATORS:
        raise TrtspecError(f"profile.accept_rule: {rule} at {sampling.label()} has no one-pass estimator "
                           f"(supported: {', '.join(ESTIMATORS)}); profile with one of those")
    return ESTIMATORS[rule]


def decode_settings(rule: str, sampling: Sampling) -> Sampling:
    """What the target decodes at to predict `rule` at `sampling`: greedy for the greedy rule."""
    return GREEDY_SAMPLING if rule == upstream.GREEDY.name else sampling


def with_overrides(base: Sampling, overrides: dict | None) -> Sampling:
    """`base` with a workload's or a request's own temperature / top_k / top_p (validated)."""
    if not overrides:
        return base
    return Sampling.model_validate(base.model_dump() | {k: v for k, v in overrides.items() if k in SAMPLING_FIELDS})


def _same(a: Sampling, b: Sampling) -> bool:
    return (a.greedy and b.greedy) or all(getattr(a, f) == getattr(b, f) for f in SAMPLING_FIELDS)


def decode_targets(models: Models, prompts: list[list[int]], max_new_tokens: int, settings: list[Sampling],
                   ignore_eos: bool = False, rule: str = upstream.EXACT_MATCH.name) -> list[GenerationResult]:
    """The target's own output for each prompt at its settings (greedy, or sampled with its seed):
    runs of consecutive prompts with the same settings and consecutive seeds decode as one batch
    (generate_batch seeds row i with seed + i). Results in prompt order. Under exact_match_resample
    the tokens are drawn as the engine's kernels draw the sample a draft is tested against
    (runtime.sampling.kernel_probs), so the first draft of each step is tested exactly; the rest of
    that rule stays approximate (module docstring)."""
    accept = rule if rule == upstream.EXACT_MATCH_RESAMPLE.name else upstream.EXACT_MATCH.name
    out: list[GenerationResult] = []
    start = 0
    while start < len(prompts):
        end, first = start + 1, settings[start]
        while end < len(prompts) and _same(settings[end], first) and (
                first.greedy or settings[end].seed == first.seed + (end - start)):
            end += 1
        out += generate_batch(models, prompts[start:end], max_new_tokens, mode="greedy", ignore_eos=ignore_eos,
                              sampling=GREEDY_SAMPLING if first.greedy else first,
                              accept=None if first.greedy else accept)
        start = end
    return out


def samples_drafts(rule: str, sampling: Sampling) -> bool:
    """Whether the draft samples its tokens under `rule` (rejection sampling at T > 0), so that its
    acceptance is alpha = 1 - TV(p, q) rather than agreement with x (module docstring)."""
    return rule == upstream.REJECTION.name and not sampling.greedy


@torch.inference_mode()
def rejection_agreement(models: Models, seq: list[int], prompt_len: int, sampling: Sampling) -> list[bool]:
    """agree[j] for j = 0..len(seq)-2 (a draft token proposed after s[..j] is kept, s[j+1] emitted):
    Bernoulli(min(1, q_j(s[j+1]) / p_j(s[j+1]))) with p_j, q_j the target's and the draft's filtered
    distributions after s[..j], drawn with the keyed uniform of s[j+1]'s output position (module
    docstring: the kept indicators' law given the emitted sequence)."""
    tokens = torch.tensor([seq])
    p_logits, _ = models.target.forward(tokens, models.target.new_cache(1, len(seq)))
    q_logits, _ = models.draft.forward(as_draft_ids(tokens, models.draft.vocab_size),
                                       models.draft.new_cache(1, len(seq)))
    vocab = min(p_logits.shape[-1], q_logits.shape[-1])  # the proposer's restriction (draft_target.py)
    nxt = tokens[0, 1:, None].to(p_logits.device)
    p = probs(p_logits[0, :-1], sampling).gather(-1, nxt)[:, 0]
    q = probs(q_logits[0, :-1, :vocab], sampling)
    q = torch.where(nxt[:, 0] < vocab, q.gather(-1, nxt.clamp(max=vocab - 1))[:, 0], torch.zeros_like(p))
    keep = torch.where(p > 0, (q / p).clamp(max=1.0), torch.zeros_like(p)).tolist()
    return [uniform(sampling.seed, j + 1 - prompt_len, ACCEPT) < a for j, a in enumerate(keep)]
