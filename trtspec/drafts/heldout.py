"""Held-out acceptance of a head being trained: the AL `trtspec profile` would report for it.

`match_lengths` runs the trained ModelOpt model's drafter chain teacher-forced along the target's
held-out greedy output, with ModelOpt's own TTT machinery (the steps of HFEagleModel.forward in
training, without the loss): one target forward gives the auxiliary hidden states of every position,
then depth d of every chain is computed for all start positions at once, attending as ModelOpt's TTT
mask lets it (the context up to the chain's start, then the chain's own earlier steps).

Why teacher forcing is exact here: a chain's draft at depth d only matters when depths 0..d-1 all
matched the target's tokens, and then the drafter's own inputs *are* the target's tokens; so the
number of consecutive matches from each state equals what a real chain would accept at T = 0.

Indexing (trtspec/tuning/acceptance.py's states): the sequence is prompt (P tokens) + x_1..x_T. At
state t the target has hidden states up to x_{t-1} (position j = P + t - 2) and its bonus token x_t;
chain depth d, computed at position j + d, predicts x_{t+d+1}. match_lengths[t] counts consecutive
hits, cut where the sequence ends; replay_chain then replays the step boundaries exactly as the
profiler does.

Why ModelOpt's forward rather than the runtime's profile (tuning.profile_pass.eagle3_match_lengths): the
runtime needs the target as a TRT-LLM checkpoint and the head exported, at every evaluation; this
runs on the model being trained. tests/drafts/test_heldout.py checks that the two give the same match
lengths for the exported head (they do only because head.convert keeps input_layernorm at ones).
Keep this function the only place that knows the above."""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache

from ..tuning.acceptance import acceptance_length_se, chain_accepted, replay_chain


@torch.no_grad()
def chain_predictions(model, ids: torch.Tensor, depth: int) -> torch.Tensor:
    """[depth, L] drafted target ids: row d, column j = the chain started at position j's depth-d draft
    (valid where j + d < L). ids: [1, L] on the model's device."""
    b, length = ids.shape
    model._cached_attn_blk_masks = {}  # ModelOpt caches TTT masks by step only, sized for the last length
    base, _ = model._eagle_base_model_forward(ids, None, None, None, True, None)
    embeds, hiddens, mask0, positions, _, _ = model._prepare_eagle_inputs(ids, None, None, None, base)
    model.eagle_module._maybe_init_rope(device=hiddens.device)
    rows, cache = [], DynamicCache(config=model.eagle_module.config)
    for d in range(depth):
        mask = mask0 if d == 0 else model._get_ttt_attention_mask(b, length, d)
        _, out_hiddens, logits, cache = model._eagle_forward(hiddens, embeds, mask, positions, cache)
        hiddens = out_hiddens.roll(1, 1)
        tok = logits[0].argmax(dim=-1)
        if hasattr(model.eagle_module, "d2t"):
            tok = tok + model.eagle_module.d2t[tok]
        rows.append(tok.roll(-d, 0))  # column j: the chain that started at j
    model._cached_attn_blk_masks = {}
    return torch.stack(rows)


def match_lengths(model, prompt: Sequence[int], response: Sequence[int], depth: int) -> list[int]:
    """Per state t (0 <= t < T): consecutive drafts of the chain from state t equal to x_{t+1}, ...
    (module docstring), at most `depth`."""
    P, T = len(prompt), len(response)
    device = model.eagle_module.fc.weight.device
    seq = list(prompt) + list(response)
    pred = chain_predictions(model, torch.tensor([seq], device=device), depth).tolist()
    out = []
    for t in range(T):
        j, m = P + t - 2, 0
        while m < depth and t + m + 1 <= T and j >= 0 and pred[m][j] == seq[P + t + m]:
            m += 1
        out.append(m)
    return out


def heldout_acceptance(model, examples, ks: Sequence[int]
                       ) -> tuple[dict[int, float | None], dict[int, float | None]]:
    """({K: AL(K)}, {K: its standard error}) pooled over the held-out examples' replayed steps. The
    standard error is the profile's (tuning.acceptance.acceptance_length_se, clustered by prompt: a
    prompt held out under two workloads is one prompt), so the curve's AL and a profile's carry the
    same measure of noise; None below two prompts with a step."""
    was_training = model.training
    model.eval()
    try:
        samples = [match_lengths(model, ex.prompt, ex.response, max(ks)) for ex in examples]
    finally:
        model.train(was_training)
    prompts = [tuple(ex.prompt) for ex in examples]
    al = {k: replay_chain(samples, k).acceptance_length for k in ks}
    se = {k: acceptance_length_se([chain_accepted(m, k) for m in samples], prompts) for k in ks}
    return al, se
