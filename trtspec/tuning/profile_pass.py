"""The teacher-forced pass of acceptance profiling (profile.py), many finished sequences at a time.

Each function takes a batch of finished sequences s = prompt + output (ragged: right-padded into
one block, each row attending only its own slots, kv_cache.py) and returns, per sequence, what
profile.py's module docstring defines: `match_lengths` of a chain draft, `rank_paths` of an EAGLE
tree drafter, the EAGLE-3 head's argmax chain. A batch of one is the one-prompt-at-a-time pass,
arithmetic for arithmetic; larger batches fill a GPU (ProfileOptions.batch_size) and give the same
lists (tests/tuning/test_profile_batch.py), up to float rounding of a different GEMM shape.

Device reads: one per batch (the agreement flags) or per chunk of states (the ranks), never per token.
"""

from __future__ import annotations

import torch

from ..runtime.device import to_device
from ..runtime.draft_target import as_draft_ids
from ..runtime.generate import Models
from ..runtime.model import pad_right
from ..runtime.tree import rank_of

ROW_CHUNK = 64  # states drafted together in the EAGLE pass (bounds the per-row cache copies)


def agreement_runs(agree: list[bool], length: int, prompt_len: int, max_k: int) -> list[int]:
    """match_lengths[t]: the run of agreements from index prompt_len - 1 + t, capped at max_k."""
    runs = [0] * (len(agree) + 1)
    for j in range(len(agree) - 1, -1, -1):
        runs[j] = runs[j + 1] + 1 if agree[j] else 0
    return [min(runs[prompt_len - 1 + t], max_k) for t in range(length - prompt_len)]


@torch.inference_mode()
def chain_match_lengths(models: Models, seqs: list[list[int]], prompt_lens: list[int], max_k: int) -> list[list[int]]:
    """match_lengths of each sequence from one draft forward over the batch: agree[j] = the draft's
    argmax after s[..j] is s[j+1] (the lm_head per row, over that row's own positions)."""
    draft = models.draft
    tokens, lengths = pad_right(seqs)
    _, hidden = draft.forward(as_draft_ids(tokens, draft.vocab_size), draft.new_cache(len(seqs), tokens.shape[1]),
                              with_logits=False)
    dev, vocab = hidden.device, min(draft.vocab_size, models.target.vocab_size)  # the proposer's restriction
    agree = torch.cat([draft.logits(hidden[i:i + 1, :n])[0, :-1, :vocab].argmax(-1) == to_device(tokens[i, 1:n], dev)
                       for i, n in enumerate(lengths.tolist())]).tolist()  # one device read for the batch
    out, start = [], 0
    for seq, p in zip(seqs, prompt_lens):
        out.append(agreement_runs(agree[start:start + len(seq) - 1], len(seq), p, max_k))
        start += len(seq) - 1
    return out


def _rank(logits: torch.Tensor, true: torch.Tensor, top_k: int) -> torch.Tensor:
    """Rank of each true token among `logits` rows (0 = argmax; ties as the runtime drafts them,
    runtime.tree.rank_of), -1 when outside the top_k."""
    rank = rank_of(logits, true)
    return torch.where(rank < top_k, rank, torch.full_like(rank, -1))


@torch.inference_mode()
def eagle_rank_paths(models: Models, seqs: list[list[int]], prompt_lens: list[int], max_depth: int, top_k: int,
                     net=None) -> list[list[list[int]]]:
    """rank_paths of each sequence (profile.py's module docstring). net: the drafter (default the
    EAGLE-1 checkpoint's; an EAGLE-3 head runs the same pass on the target's captured layers).

    The target and the drafter's level 1 run once over the batch; then every state of every
    sequence (committed length n = prompt + t) is a drafter row of its own, ROW_CHUNK rows at a
    time, each starting from a copy of its sequence's drafter cache cut at the state."""
    target, net = models.target, models.eagle if net is None else net
    tokens, lengths = pad_right(seqs)
    B, Lmax = tokens.shape
    _, feats = target.forward(tokens, target.new_cache(B, Lmax), with_logits=False)
    # Level 1 for every state at once: pairs (s[j+1], f_j) j = 0..L-2 through clone 0.
    base = net.new_cache(B, Lmax + max_depth)
    _, hidden1 = net.forward(tokens[:, 1:], feats[:, :-1], base, level=0, with_logits=False)  # logits per chunk
    base.advance(torch.arange(B), lengths - 1)
    states = [(b, t) for b, p in enumerate(prompt_lens) for t in range(len(seqs[b]) - p)]
    paths: list[list[list[int]]] = [[] for _ in seqs]
    for start in range(0, len(states), ROW_CHUNK):
        chunk = states[start:start + ROW_CHUNK]
        owner = torch.tensor([b for b, _ in chunk])
        n = torch.tensor([prompt_lens[b] + t for b, t in chunk])  # committed length; the root is s[n-1]
        for b, path in zip(owner.tolist(), _chunk_paths(net, base, tokens, lengths, hidden1, owner, n,
                                                        max_depth, top_k)):
            paths[b].append(path)
    for b, p in enumerate(prompt_lens):
        if p < 2:  # state 0 with a 1-token prompt has no committed pair; never a verify state
            paths[b][0] = []
    return paths


def _chunk_paths(net, base, tokens: torch.Tensor, lengths: torch.Tensor, hidden1: torch.Tensor,
                 owner: torch.Tensor, n: torch.Tensor, max_depth: int, top_k: int) -> list[list[int]]:
    """The rank paths of one chunk of states (row i: sequence owner[i] at committed length n[i])."""
    dev = hidden1.device
    L = lengths[owner]
    pair = n - 2  # the last committed pair (s[n-1], f_{n-2}) drafts depth 1
    o, at = to_device(owner, dev), to_device(pair.clamp(min=0), dev)
    depth_hidden = hidden1[o, at]
    depth_logits = net.logits(depth_hidden, 0)
    cache = net.new_cache(len(owner), tokens.shape[1] + max_depth)
    for layer in range(len(base.k)):
        cache.k[layer][:] = base.k[layer][to_device(owner, base.k[layer].device)]
        cache.v[layer][:] = base.v[layer][to_device(owner, base.v[layer].device)]
    cache.lens[:] = (pair + 1).clamp(min=0)
    ranks = []
    for d in range(1, max_depth + 1):
        idx = torch.minimum(n - 1 + d, L - 1)
        true = tokens[owner, idx]  # host: the node's token, fed to the drafter below
        known = to_device(n - 1 + d < L, dev)  # depth d needs the true token s[n-1+d]
        r = _rank(depth_logits, to_device(true, dev), top_k)
        ranks.append(torch.where(known, r, torch.full_like(r, -2)))
        if d == max_depth:
            break
        # depth d+1: the node at depth d (the true token) with its parent's drafter output
        lg, hd = net.forward(true[:, None], depth_hidden[:, None], cache, level=d,
                             pos_offsets=torch.tensor([d - 1]), block_mask=torch.ones(1, d, dtype=torch.bool))
        depth_logits, depth_hidden = lg[:, 0], hd[:, 0]
    out = []
    for row in torch.stack(ranks, 1).tolist():  # one device read for the chunk
        path = []
        for r in row:
            if r == -2:  # beyond the end of the sequence: unknown, stop here
                break
            path.append(r)
            if r < 0:
                break
        out.append(path)
    return out


def eagle3_match_lengths(models: Models, seqs: list[list[int]], prompt_lens: list[int],
                         max_k: int) -> list[list[int]]:
    """match_lengths of the EAGLE-3 head's argmax chain per sequence: its rank paths with one
    candidate per depth (rank 0 or -1), i.e. how many levels in a row the head, run on its own
    outputs as the proposer runs it, drafts the true token."""
    return [[next((i for i, r in enumerate(p) if r != 0), len(p)) for p in paths]
            for paths in eagle_rank_paths(models, seqs, prompt_lens, max_k, 1, net=models.eagle3)]
