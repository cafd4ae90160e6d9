"""The decoding loop, written once, as a step iterator over a ragged batch of prompts.

    for rows in decode(target, prompts, max_new_tokens, eos_ids, proposer, accept):
        for row in rows:     # one RowStep per request still running: row.index, row.tokens, row.step, ...

    prefill the prompts; the first token is accept(empty proposal, prefill logits)
    while a request is running:
        proposal = proposer.propose(rows)            # draft tokens on a tree (a chain is a tree)
        logits, hidden = target([root, nodes...])    # one forward, tree mask, depth positions
        acceptances = accept(proposal, logits)       # path kept + the target's bonus token
        commit each path in the target cache; emit (cut at max_new_tokens / eos); count what was
        emitted (stats.py); yield the step
        proposer.update(rows, acceptances, hidden)

min_tokens: before the accept rule reads the target's logits, the eos ids' logits are -inf at
every entry whose output index is below the request's min_tokens (`mask_eos`; TensorRT-LLM's
rule per verified position, as its PyTorch sampler applies it; the engine's kernel masks a whole
verify step that starts below min_tokens: upstream/sampling.py), so no rule can emit an eos there and every rule, greedy or sampled,
is lossless with respect to that masked target. Draft logits are not masked: a drafted eos at a
masked position is simply rejected (p = 0 there). Bad words are masked the same way, per verified
entry with the context of its own path, and stop words end a request at the token completing one,
also mid-step (words.py; `words` below).

Plain decoding is the same loop without a proposer (`NoProposer`: the empty tree, one T=1 forward
per step). Batch generation (`generate`, `generate_batch`), acceptance profiling and the cpu-flavor
Triton models (one request, streamed) all consume this iterator, so they run the same steps and
report the same metrics. The accept rule is a parameter and sees the proposal (draft tokens and
draft logits) and the target's logits; each RowStep hands both back, which is what a sampling rule
and its tests need.

With `batch_invariant` the prefill runs each row alone and every verify block one row and one
token at a time (model.forward_stepwise): each logit is then computed with the arithmetic of a
one-token decode of a batch of one, so greedy speculation reproduces plain greedy bit for bit on
quantized checkpoints too, where a block's different GEMM rounding, through FP8 activation
quantization, can flip near-ties (README, "Speculation on FP8 checkpoints"). It costs the
speedup: K+1 target forwards per step instead of one, and no batching.

On a GPU (device.py) a step reads the device once: the accept rule's read of the target's logits
(greedy: the argmax of each verified entry; sampled rules: the logits), after the verify forward
and the proposer's drafts are queued. The proposers' own reads, where they need one, are noted
in their modules (EAGLE-2 reads each level's top-k to grow its tree).

Also here: `verify_external`, a target step on draft tokens that come from outside (TensorRT-LLM's
`draft_tokens_external`): prompt + draft in one causal forward, then the same accept rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Iterator

import torch

from ..errors import TrtspecError
from .batch import Request, active_rows, make_requests
from .device import to_device
from .model import Decoder, forward_stepwise, prefill
from .accept import Key, accept_greedy
from .speculative import AcceptRule, Acceptance, NoProposer, Proposal, Proposer, empty_proposal
from .stats import GenerationResult, RequestStats, Step, counted_step
from .tree import chain
from .words import NO_WORDS, Words, mask_bad_words


@dataclass(frozen=True)
class RowStep:
    """What one target forward did for one request. `tokens`, `done` and `finish_reason` are as of
    this step; `stats` is the request's running metrics object (the same one at every step)."""
    index: int  # the request's position in the batch (prompt order)
    tokens: list[int]  # emitted by this step, after the max_new_tokens / eos cut
    done: bool
    finish_reason: str | None  # eos | stop | length once done
    stats: RequestStats
    step: Step | None  # accepted / offered of a verification; None for the prefill and plain decoding
    logits: torch.Tensor  # [N+1, V] the target logits the accept rule read (after the root, each node)
    draft_logits: torch.Tensor | None  # [N, V] the draft distribution of each node, if the proposer keeps it


def _emit(requests: list[Request], rows: torch.Tensor, proposal: Proposal, logits: torch.Tensor,
          accepted: list[Acceptance], verify: bool) -> list[RowStep]:
    """Emit the accepted tokens (cut at max_new_tokens / eos), then record the step's metrics as
    TensorRT-LLM counts them: what the step emitted (stats.py, counted_step)."""
    out = []
    for i, (b, a) in enumerate(zip(rows.tolist(), accepted)):
        r = requests[b]
        before = len(r.output)
        r.emit(a.tokens)
        step = counted_step(a.step, len(r.output) - before if r.done else None) if verify else None
        r.stats.target_calls += 1
        if step is not None:
            r.stats.steps.append(step)
        out.append(RowStep(b, r.output[before:], r.done, r.finish_reason, r.stats, step, logits[i],
                           None if proposal.logits is None else proposal.logits[i]))
    return out


def mask_eos(reqs: list[Request], rows: torch.Tensor, proposal: Proposal, logits: torch.Tensor) -> torch.Tensor:
    """logits [b', N+1, V] with each row's eos ids at -inf at the entries (root, then each node at
    its depth) whose output index is below its min_tokens; the same tensor when there are none."""
    if not any(reqs[b].eos_masked(0) for b in rows.tolist()):  # the usual case: nothing to mask
        return logits
    hits = [(i, n, e) for i, b in enumerate(rows.tolist())
            for n, depth in enumerate(proposal.tree_for(i).depth) if reqs[b].eos_masked(depth)
            for e in reqs[b].eos_ids if e < logits.shape[-1]]
    if not hits:
        return logits
    index = tuple(torch.tensor(x, device=logits.device) for x in zip(*hits))
    return logits.index_put(index, torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device))


def mask_rules(reqs: list[Request], rows: torch.Tensor, proposal: Proposal, logits: torch.Tensor) -> torch.Tensor:
    """The target's logits as the accept rule must read them: eos masked below min_tokens, bad
    words banned (words.py)."""
    return mask_bad_words(reqs, rows, proposal, mask_eos(reqs, rows, proposal, logits))


def _keys(reqs: list[Request], rows: torch.Tensor) -> list[Key]:
    """Each row's draw key: its seed and the output position its root's next token takes."""
    return [Key(reqs[b].seed, len(reqs[b].output)) for b in rows.tolist()]


def decode(target: Decoder, prompts: list[list[int]], max_new_tokens: int, eos_ids=None,
           proposer: Proposer | None = None, accept: AcceptRule = accept_greedy,
           batch_invariant: bool = False, seed: int = 0, min_tokens: int = 0,
           words: Words = NO_WORDS) -> Iterator[list[RowStep]]:
    """Yield, per target forward (the prefill first), one RowStep per request still running.
    Finished rows drop out of the batch; their cache rows stay put. batch_invariant: see the
    module docstring. seed: request i draws with seed + i (accept.py, sampling.py). min_tokens:
    no request ends on an eos before that many output tokens (module docstring). words: every
    request's stop and bad token sequences (words.py)."""
    verify = proposer is not None
    proposer = proposer if verify else NoProposer()
    reqs = make_requests(prompts, max_new_tokens, eos_ids, target.vocab_size, proposer.max_positions, seed,
                         min_tokens, words)
    capacity = max(len(p) for p in prompts) + max_new_tokens + proposer.max_block + 1
    cache = target.new_cache(len(reqs), capacity)
    rows = torch.arange(len(reqs))
    logits, hidden, _ = prefill(target, cache, rows, [r.prompt for r in reqs], batch_invariant)
    forward = partial(forward_stepwise, target) if batch_invariant else target.forward
    first = empty_proposal(len(reqs))
    logits = mask_rules(reqs, rows, first, logits[:, None])
    yield _emit(reqs, rows, first, logits, accept(first, logits, _keys(reqs, rows)), verify=False)
    proposer.start(reqs, rows, hidden)
    while len(rows := active_rows(reqs)):
        proposal = proposer.propose(reqs, rows)
        roots = torch.tensor([[reqs[b].output[-1]] for b in rows.tolist()])
        block = torch.cat([to_device(roots, target.device), to_device(proposal.tokens, target.device)], dim=1)
        logits, hidden = forward(block, cache, rows=rows,
                                 pos_offsets=proposal.positions(), block_mask=proposal.block_mask())
        logits = mask_rules(reqs, rows, proposal, logits)
        accepted = accept(proposal, logits, _keys(reqs, rows))
        for b, a in zip(rows.tolist(), accepted):
            cache.commit(b, a.path)
        yield _emit(reqs, rows, proposal, logits, accepted, verify)
        proposer.update(reqs, rows, accepted, hidden)


def generate(target: Decoder, prompts: list[list[int]], max_new_tokens: int, eos_ids=None,
             proposer: Proposer | None = None, accept: AcceptRule = accept_greedy,
             batch_invariant: bool = False, seed: int = 0, min_tokens: int = 0,
             words: Words = NO_WORDS) -> list[GenerationResult]:
    """Run `decode` to the end; results in prompt order."""
    outputs: list[list[int]] = [[] for _ in prompts]
    last: dict[int, RowStep] = {}
    for rows in decode(target, prompts, max_new_tokens, eos_ids, proposer, accept, batch_invariant, seed, min_tokens,
                       words):
        for row in rows:
            outputs[row.index] += row.tokens
            last[row.index] = row
    return [GenerationResult([int(t) for t in p], out, last[i].finish_reason, last[i].stats)
            for i, (p, out) in enumerate(zip(prompts, outputs))]


def one_request(steps: Iterator[list[RowStep]]) -> Iterator[RowStep]:
    """The steps of a batch of one, one RowStep each (what a streaming server sends)."""
    for (row,) in steps:
        yield row


@torch.inference_mode()
def verify_external(target: Decoder, prompt: list[int], draft: list[int], max_new_tokens: int, eos_ids=(),
                    accept: AcceptRule = accept_greedy, key: Key = Key(0, 0),
                    draft_logits: torch.Tensor | None = None, min_tokens: int = 0,
                    words: Words = NO_WORDS) -> RowStep:
    """A `draft_tokens_external` target step: prompt + draft (a chain) in one causal forward, the
    accept rule on the logits after the last prompt token and after each draft token. The RowStep's
    tokens are the accepted drafts + the target's next token, cut at max_new_tokens and eos; its
    step counts what was emitted (stats.py). key: the request's seed and the output position of the
    token after `prompt` (sampling rules); draft_logits [K, V]: the distribution the draft sampled
    each token from (TensorRT-LLM's `draft_logits`, for rejection sampling). min_tokens: eos masked
    below that output index and `words` applied, as in `decode`."""
    if not prompt:  # the first draft token is checked against the logits after the last prompt token
        raise TrtspecError("prompt (input_ids): empty; draft tokens are verified against the logits after its last "
                           "token")
    req = make_requests([prompt + draft], max_new_tokens, eos_ids, target.vocab_size, len(draft),
                        min_tokens=min_tokens, words=words)[0]
    req.prompt = req.prompt[:len(prompt)]  # checked as one sequence; emit() counts after the prompt
    logits, _ = target.forward(torch.tensor([prompt + draft]), target.new_cache(1, len(prompt) + len(draft)))
    proposal = Proposal(chain(len(draft)), torch.tensor([draft], dtype=torch.long),
                        None if draft_logits is None else draft_logits[None], sampled=draft_logits is not None)
    logits = mask_rules([req], torch.arange(1), proposal, logits[:, len(prompt) - 1:])
    return _emit([req], torch.arange(1), proposal, logits, accept(proposal, logits, [key]), verify=True)[0]
