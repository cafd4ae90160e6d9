"""Streaming decoding on `trtspec.runtime`, for the cpu flavor's python-backend models.

`trtspec.runtime.generate_batch` returns when every request is done; a Triton model streams, so
these generators yield after every target step. They reuse the runtime's pieces unchanged (the
`Decoder`, `prefill`, the draft-model and EAGLE proposers, `accept_greedy`, `Request.emit` for the
cuts at max_new_tokens / eos, `RequestStats` for the metrics) and repeat the runtime loops
(`greedy.generate_greedy`, `speculative.generate_speculative`) step for step for one request, so
each yields exactly the tokens the runtime would produce (tests/test_triton_cpu_engine.py checks
this against `generate_batch` for greedy, draft-target and EAGLE).

One request per generator and per KV cache: the serving models run one generator per request in
its own worker thread (torch releases the GIL in its kernels), which is what lets 8+ concurrent
streaming requests make progress together on a CPU. Batching concurrent requests into one ragged
batch would be faster on many cores; on the 2-core boxes this flavor targets the per-step Python
overhead dominates either way, and per-request caches keep cancellation and streaming simple.

Also here: `verify_draft`, the cpu stand-in for a `draft_tokens_external` target engine (the
`draft_input_ids` input of `tensorrt_llm`): one forward over prompt + draft tokens, greedy
acceptance, the accepted tokens plus the bonus token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from ..runtime.batch import active_rows, make_requests
from ..runtime.model import Decoder, prefill
from ..runtime.speculative import accept_greedy
from ..runtime.stats import RequestStats, Step


@dataclass
class Piece:
    """What one target step added: the new tokens (after the max_new_tokens / eos cut) and the
    request's metrics so far; `done` on the last piece, with `finish_reason` eos | length."""
    tokens: list[int]
    stats: RequestStats
    done: bool
    finish_reason: str | None


def _emit(req, new: list[int]) -> Piece:
    before = len(req.output)
    req.emit(new)
    return Piece(req.output[before:], req.stats, req.done, req.finish_reason)


def stream_greedy(model: Decoder, prompt: list[int], max_new_tokens: int, eos_ids=()) -> Iterator[Piece]:
    """`greedy.generate_greedy` for one prompt, one piece per generated token."""
    req = make_requests([prompt], max_new_tokens, eos_ids, model.vocab_size)[0]
    cache = model.new_cache(1, len(prompt) + max_new_tokens)
    rows = torch.arange(1)
    logits, _, _ = prefill(model, cache, rows, [req.prompt])
    while True:
        req.stats.target_calls += 1
        piece = _emit(req, [int(logits.argmax(-1)[0])])
        yield piece
        if piece.done:
            return
        step, _ = model.forward(torch.tensor([[req.output[-1]]]), cache, rows=rows)
        cache.advance(rows, 1)
        logits = step[:, -1]


def stream_speculative(target: Decoder, proposer, prompt: list[int], max_new_tokens: int,
                       eos_ids=()) -> Iterator[Piece]:
    """`speculative.generate_speculative` for one prompt: the prefill token, then one piece per
    verification step (accepted draft tokens + the bonus token)."""
    reqs = make_requests([prompt], max_new_tokens, eos_ids, target.vocab_size, proposer.max_positions)
    req = reqs[0]
    cache = target.new_cache(1, len(prompt) + max_new_tokens + proposer.max_block + 1)
    rows = torch.arange(1)
    logits, hidden, _ = prefill(target, cache, rows, [req.prompt])
    req.stats.target_calls += 1
    piece = _emit(req, [int(logits.argmax(-1)[0])])
    yield piece
    if piece.done:
        return
    proposer.start(reqs, rows, hidden)
    while len(rows := active_rows(reqs)):
        proposal = proposer.propose(reqs, rows)
        roots = torch.tensor([[req.output[-1]]])
        block = torch.cat([roots, proposal.tokens], dim=1)
        logits, hidden = target.forward(block, cache, rows=rows, pos_offsets=proposal.positions(),
                                        block_mask=proposal.block_mask())
        accepted = accept_greedy(proposal, logits)
        a = accepted[0]
        cache.commit(0, a.path)
        req.stats.target_calls += 1
        req.stats.steps.append(Step(len(a.path) - 1, a.offered))
        piece = _emit(req, a.tokens)
        proposer.update(reqs, rows, accepted, hidden)
        yield piece


def stream_draft_target(target: Decoder, draft: Decoder, prompt: list[int], max_new_tokens: int, draft_len: int,
                        eos_ids=()) -> Iterator[Piece]:
    """Draft-target with K = draft_len; K = 0 is plain greedy on the target (no speculation)."""
    if draft_len == 0:
        return stream_greedy(target, prompt, max_new_tokens, eos_ids)
    from ..runtime.draft_target import DraftModelProposer

    return stream_speculative(target, DraftModelProposer(draft, draft_len, target.vocab_size), prompt,
                              max_new_tokens, eos_ids)


def stream_eagle(target: Decoder, net, prompt: list[int], max_new_tokens: int, eagle_choices,
                 eos_ids=()) -> Iterator[Piece]:
    """EAGLE-1 with a static tree (the served profile's eagle_choices; None = mc_sim_7b_63)."""
    from ..runtime.eagle import EagleProposer, eagle_tree

    return stream_speculative(target, EagleProposer(net, eagle_tree(net, eagle_choices), target.vocab_size),
                              prompt, max_new_tokens, eos_ids)


@torch.inference_mode()
def verify_draft(target: Decoder, ids: list[int], draft: list[int], max_new_tokens: int, eos_ids=()
                 ) -> tuple[list[int], int]:
    """A `draft_tokens_external` target step: run prompt + draft in one causal forward and keep the
    longest draft prefix the target agrees with, then the target's own next token. Returns
    (tokens, accepted draft count); tokens are cut at max_new_tokens and at the first eos."""
    req = make_requests([ids + draft], max(1, max_new_tokens), eos_ids, target.vocab_size)[0]
    req.prompt = list(ids)  # emit() counts output tokens after the prompt only
    cache = target.new_cache(1, len(ids) + len(draft))
    logits, _ = target.forward(torch.tensor([ids + draft]), cache)
    want = logits[0, len(ids) - 1:].argmax(-1).tolist()  # the target's token after each prefix
    accepted = 0
    while accepted < len(draft) and draft[accepted] == want[accepted]:
        accepted += 1
    req.emit(draft[:accepted] + [want[accepted]])
    return req.output, accepted


def load_models(ckpt, draft_ckpt=None):
    """`runtime.generate.load_models` without the tokenizer: in a repository the tokenizer belongs
    to preprocessing / postprocessing, and not importing transformers saves each model stub about
    4 s of start-up (it would pull in its whole torch integration)."""
    from pathlib import Path

    from ..checkpoints.trtllm_ckpt import load_checkpoint
    from ..runtime.eagle_net import EagleNet
    from ..runtime.generate import Models, eos_ids

    c = load_checkpoint(Path(ckpt))
    return Models(target=Decoder(c), draft=Decoder(load_checkpoint(Path(draft_ckpt))) if draft_ckpt else None,
                  eagle=EagleNet(c) if c.is_eagle else None, tokenizer=None, eos_ids=eos_ids(Path(ckpt), None))
