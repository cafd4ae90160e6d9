"""Stop words and bad words: TensorRT-LLM's `stop_words_list` / `bad_words_list` rules, per request.

Both are token-id sequences matched against the request's whole sequence (prompt + output), as
TensorRT-LLM matches them (trtspec.upstream.sampling, "Stop words and bad words"):
- stop: the request ends on the token that completes a stop sequence; that token is emitted (the
  executor's output keeps the stop sequence) and nothing after it, also when it is an accepted
  draft in the middle of a verify step (batch.Request.emit checks after every token);
- bad: the last token of a bad sequence is banned (its logit -inf) at every position whose
  preceding tokens are the sequence's others; a one-token sequence is banned everywhere.
The loop masks the target's logits at every verified entry, each with the context of its own
tree path (`mask_bad_words`, decode.py), before the accept rule reads them: greedy speculation
then gives plain greedy decoding's tokens under the same rules, and the lossless sampled rules
emit the masked target's distribution, as with min_tokens.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from ..errors import TrtspecError

Sequences = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Words:
    stop: Sequences = ()
    bad: Sequences = ()

    @classmethod
    def of(cls, stop=(), bad=()) -> "Words":
        """From any iterables of token-id sequences; an empty sequence is an error (it would match
        everywhere), as is a token id below 0."""
        return cls(_sequences(stop, "stop_words"), _sequences(bad, "bad_words"))


NO_WORDS = Words()


def encode_words(words, name: str, tokenizer=None, where="the checkpoint") -> list[list[int]]:
    """Each word as token ids: a list of ids as it is, a string tokenized without special tokens,
    the rule of Triton's preprocessing model (`_word_lists`, upstream's preprocessing), so that a word
    ends `trtspec generate` where it ends a served request. The call is written twice on purpose:
    preprocessing runs without trtspec and trtspec.runtime may not import triton_repo (the import
    layers); tests/test_cli_words.py checks that the two agree. A string that encodes to no tokens is
    skipped with a warning, as preprocessing (and upstream's `_to_word_list_format`) skips it."""
    out = []
    for i, w in enumerate(words or ()):
        if not isinstance(w, str):
            out.append([int(t) for t in w])
            continue
        if tokenizer is None:
            raise TrtspecError(f"{name}[{i}]: a string needs a tokenizer and {where} has none; give token ids")
        ids = list(tokenizer.encode(w, add_special_tokens=False))
        if not ids:
            print(f"warning: {name}[{i}]: {w!r} encodes to no tokens; skipped, as Triton's preprocessing "
                  "skips it", file=sys.stderr)
            continue
        out.append(ids)
    return out


def _sequences(seqs, name: str) -> Sequences:
    out = tuple(tuple(int(t) for t in s) for s in seqs or ())
    for i, s in enumerate(out):
        if not s:
            raise TrtspecError(f"{name}[{i}]: empty token sequence; expected one token id or more")
        if min(s) < 0:
            raise TrtspecError(f"{name}[{i}]: token id {min(s)}; expected ids >= 0")
    return out


def ends_with_stop(tokens: list[int], stop: Sequences) -> bool:
    """Whether `tokens` (prompt + output so far) ends with one of the stop sequences."""
    return any(len(tokens) >= len(s) and tuple(tokens[-len(s):]) == s for s in stop)


def banned(context: list[int], bad: Sequences) -> set[int]:
    """The tokens that may not follow `context` (prompt + output + the path's drafts)."""
    return {s[-1] for s in bad if len(s) == 1 or (len(context) >= len(s) - 1
                                                   and tuple(context[len(context) - len(s) + 1:]) == s[:-1])}


def _path(tree, tokens: list[int], n: int) -> list[int]:
    """The draft tokens from the root's first child down to block entry n (the root excluded)."""
    out = []
    while n > 0:
        out.append(tokens[n - 1])
        n = tree.parent[n]
    return out[::-1]


def mask_bad_words(reqs, rows: torch.Tensor, proposal, logits: torch.Tensor) -> torch.Tensor:
    """logits [b', N+1, V] with each entry's banned tokens at -inf (entry n predicts the token after
    block entry n: its context is the request's tokens + the drafts on n's path); the same tensor
    when no request has bad words (nothing is read from the device then)."""
    if not any(reqs[b].words.bad for b in rows.tolist()):
        return logits
    hits = []
    for i, b in enumerate(rows.tolist()):
        bad = reqs[b].words.bad
        if not bad:
            continue
        tree = proposal.tree_for(i)
        drafts = proposal.tokens[i].tolist() if tree.size else []
        for n in range(tree.size + 1):
            hits += [(i, n, t) for t in banned(reqs[b].tokens + _path(tree, drafts, n), bad) if t < logits.shape[-1]]
    if not hits:
        return logits
    index = tuple(torch.tensor(x, device=logits.device) for x in zip(*hits))
    return logits.index_put(index, torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device))
