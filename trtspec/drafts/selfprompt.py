"""Prompts the target writes itself (Magpie: Xu et al., 2024), for training data beyond the prompt sets
a user has.

An aligned chat model given only its chat template's text up to where a user's message begins
(the system turn and the user header) continues with a plausible user message, because that is
what followed such a prefix in its instruction tuning. Sampled at temperature 1 these messages
spread over what the model was tuned on, so its own greedy answers to them are what an EAGLE
head for this target should learn from. Why we need them: a head learns from the target's answers
(data.py), and the packaged sets plus a user's logs are often a few hundred prompts, which a CPU or
GPU run memorises long before the head is good (README, "Training a draft"); the target can write
as many more as the budget allows.

Only the text is kept; data.py caches it like the answers (by everything it depends on), renders
each through the chat template like any other prompt and regenerates its answer."""

from __future__ import annotations

import torch

from ..errors import TrtspecError

SENTINEL = "\x00trtspec-user-message\x00"
PROMPT_TOKENS = 96  # a written prompt is cut here (most end at the template's end-of-turn far sooner)
TRIES_PER_PROMPT = 3  # samples drawn per prompt asked for, at most (repeats and empty ones are dropped)
VERSION = 1  # of how prompts are written: part of their cache key (data.self_written)


def user_prefix(tokenizer) -> list[int]:
    """The token ids of the chat template's text up to where a user's message begins."""
    if not getattr(tokenizer, "chat_template", None):
        raise TrtspecError("draft.train.self_prompts: the target's tokenizer has no chat template, so there is "
                           "no user turn to let it write (use prompt sets or traffic logs instead)")
    text = tokenizer.apply_chat_template([{"role": "user", "content": SENTINEL}], tokenize=False)
    if SENTINEL not in text:
        raise TrtspecError("draft.train.self_prompts: the target's chat template does not place the user's message "
                           "in its text")
    return tokenizer(text[:text.index(SENTINEL)], add_special_tokens=False)["input_ids"]


def write_prompts(model, tokenizer, n: int, seed: int, batch_size: int, eos: set[int], pad_id: int,
                  advance=lambda k: None) -> list[str]:
    """`n` distinct, non-empty user messages the target writes after `user_prefix`, sampled at
    temperature 1 under `seed` (`batch_size` at a time). After TRIES_PER_PROMPT * n samples fewer are
    returned: a small or repetitive target may not have n distinct ones in it (train_draft warns and
    records how many in training.json)."""
    prefix = user_prefix(tokenizer)
    device = next(model.parameters()).device
    out: list[str] = []
    seen: set[str] = set()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        tries = 0
        while len(out) < n and tries < TRIES_PER_PROMPT * n:
            k = min(batch_size, TRIES_PER_PROMPT * n - tries)
            ids = torch.tensor([prefix] * k, device=device)
            with torch.no_grad():
                gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                     temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=PROMPT_TOKENS,
                                     eos_token_id=sorted(eos), pad_token_id=pad_id)
            tries += k
            for row in gen[:, len(prefix):].tolist():
                row = row[:next((i for i, t in enumerate(row) if t in eos), len(row))]
                text = tokenizer.decode(row, skip_special_tokens=True).strip()
                if text and text not in seen and len(out) < n:
                    seen.add(text)
                    out.append(text)
                    advance(1)
    return out
