"""The training data of a draft: the target's own greedy answers to workload prompts.

Training stacks (EAGLE-3, ModelOpt's examples, SpecForge) regenerate the responses with the target
rather than train on the dataset's human answers: the head must predict what *this* target says.
Only token ids are kept (prompt, response); hidden states are computed on the fly while training
(ModelOpt's online mode), so memory stays bounded by one batch whatever the corpus size.

Regeneration is the costly part on a CPU, so the responses are cached under
`$TRTSPEC_CACHE/draft-data/<hash>.json`, the hash covering everything they depend on: the target's
weights, config and tokenizer, the prompt ids, the response length, the batch size (batched
decoding may round differently from unbatched decoding) and where the target answers (answered_on)."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..checkpoints.default_model import default_cache_root
from ..errors import TrtspecError
from ..fsutil import sha256_file, write_text_atomic
from ..workloads import Sample, load_workloads, render, task_key
from . import selfprompt
from .options import SELF, TrainDraftOptions

DATA_VERSION = 1


@dataclass(frozen=True)
class Example:
    """One prompt and the target's greedy response to it (token ids; the response ends at EOS or at
    max_new_tokens)."""
    workload: str
    prompt: list[int]
    response: list[int]
    heldout: bool


def task_rank(seed: int, task: str) -> str:
    """A seeded random rank per task (workloads.task_key): workloads over the same problems
    (humaneval, code-edit) rank them alike, so they hold out the same ones."""
    return hashlib.sha256(f"{seed}:{task}".encode()).hexdigest()


def split_prompts(options: TrainDraftOptions, tokenizer) -> list[tuple[str, list[int], bool]]:
    """(workload, prompt ids, held out?) for every chosen prompt: per workload the `heldout` prompts of
    lowest task_rank held out (never trained on), the rest for training. A training prompt that renders
    to a held-out prompt's ids (traffic logs repeat requests; workloads can share prompts) or is a
    held-out task under another workload (code-edit quotes the solution of a held-out HumanEval
    problem) is dropped, or the held-out AL would measure answers the head was trained on."""
    out = []
    for wl in load_workloads(options.workloads, seed=options.seed, samples=options.samples):
        if len(wl.samples) <= options.heldout:
            raise TrtspecError(f"draft.train.heldout: workload {wl.name!r} has {len(wl.samples)} prompts, so "
                               f"holding out {options.heldout} leaves none to train on")
        tasks = {id(s): task_key(wl.source, s) for s in wl.samples}
        order = sorted(wl.samples, key=lambda s: task_rank(options.seed, tasks[id(s)]))
        for rank, s in enumerate(order):
            ids = render(s, tokenizer, max_prompt_tokens=options.max_prompt_tokens, keep="end")
            out.append((wl.name, ids, rank < options.heldout, tasks[id(s)]))
    held_ids, held_tasks = {tuple(ids) for _, ids, h, _ in out if h}, {task for *_, h, task in out if h}
    out = [(n, ids, h) for n, ids, h, task in out if h or (tuple(ids) not in held_ids and task not in held_tasks)]
    trained = {n for n, _, h in out if not h}
    for name in dict.fromkeys(n for n, _, _ in out):
        if name not in trained:
            raise TrtspecError(f"draft.train.heldout: workload {name!r}: every prompt not held out repeats a "
                               "held-out prompt or task, so none is left to train on")
    return out


def target_fingerprint(target: Path) -> str:
    """sha256 over the target's config and weight files, its generation config and its tokenizer's
    files (both name EOS ids the answers end at, train.load_target; the chat template sets where the
    self-written prompts start): what its greedy answers and written prompts depend on. A run asks
    for it several times (head cache key, answers and prompts caches, checkpoint): the hashes are
    remembered while the files' sizes and mtimes stay the same (a multi-GB target hashes once)."""
    files = sorted(p for p in Path(target).iterdir() if p.is_file() and (
                   p.suffix in (".safetensors", ".bin") or p.name in ("config.json", "generation_config.json")
                   or p.name.startswith(("tokenizer", "special_tokens_map", "chat_template"))))
    return _fingerprint(tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))


@functools.lru_cache(maxsize=8)
def _fingerprint(files: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()
    for path, _, _ in files:
        h.update(Path(path).name.encode() + b"\0" + sha256_file(Path(path)).encode())
    return h.hexdigest()


def answered_on(model) -> dict:
    """The device type and dtype the target computes in (train.load_target: float32 on a CPU, the
    checkpoint's on CUDA): either can change a greedy answer or a sampled prompt (kernels round
    differently), so every key of what the target writes holds both; cache.head_key holds the device
    type, which with the fingerprinted target decides the dtype."""
    p = next(model.parameters())
    return {"device": p.device.type, "precision": str(p.dtype)}


def cached(key: dict, field: str, make, advance=lambda n: None, prefix: str = "") -> list:
    """`make()`'s list, kept under `$TRTSPEC_CACHE/draft-data/<prefix><sha256 of key>.json` and read from
    there when the same key comes again (`advance` is then told of every item at once)."""
    digest = hashlib.sha256(json.dumps({"version": DATA_VERSION, **key}).encode()).hexdigest()[:24]
    path = default_cache_root() / "draft-data" / f"{prefix}{digest}.json"
    if path.exists():
        value = json.loads(path.read_text(encoding="utf-8"))[field]
        advance(len(value))
        return value
    value = make()
    write_text_atomic(path, json.dumps({field: value}))
    return value


def cut_at_eos(tokens: list[int], eos: set[int]) -> list[int]:
    """The response up to and including its first EOS (the head learns to predict the end too)."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[:i + 1]
    return tokens


def regenerate(model, prompts: list[list[int]], max_new_tokens: int, batch_size: int, eos: set[int],
               pad_id: int, advance=lambda n: None) -> list[list[int]]:
    """The target's greedy responses, `batch_size` prompts at a time (left padded; prompts sorted by
    length so a batch pads little). `advance(n)` is told of each finished prompt (progress bar)."""
    import torch

    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    out: list[list[int] | None] = [None] * len(prompts)
    device = next(model.parameters()).device
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(prompts[i]) for i in idx)
        ids = torch.tensor([[pad_id] * (width - len(prompts[i])) + prompts[i] for i in idx], device=device)
        mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in idx], device=device)
        with torch.no_grad():
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=sorted(eos), pad_token_id=pad_id, top_p=None, top_k=None,
                                 temperature=None)
        for row, i in enumerate(idx):
            out[i] = cut_at_eos([int(t) for t in gen[row, width:]], eos)
        advance(len(idx))
    return out  # type: ignore[return-value]


def self_written(target: Path, model, tokenizer, options: TrainDraftOptions, eos: set[int], pad: int,
                 advance=lambda n: None) -> list[tuple[str, list[int], bool]]:
    """(SELF, prompt ids, False) for each of `options.self_prompts` prompts the target writes itself
    (selfprompt.py), rendered as any prompt is; training only, never held out (the curve measures the
    named workloads)."""
    if not options.self_prompts:
        return []
    key = {"self_prompts": options.self_prompts, "target": target_fingerprint(target), "seed": options.seed,
           "batch": options.regen_batch_size, **answered_on(model),
           "prompt_tokens": selfprompt.PROMPT_TOKENS, "writer": selfprompt.VERSION}
    texts = cached(key, "prompts", lambda: selfprompt.write_prompts(
        model, tokenizer, options.self_prompts, options.seed, options.regen_batch_size, eos, pad, advance),
        advance, prefix="self-")
    return [(SELF, render(Sample(f"{SELF}:{i}", None, [{"role": "user", "content": t}]), tokenizer,
                          max_prompt_tokens=options.max_prompt_tokens, keep="end"), False)
            for i, t in enumerate(texts)]


def load_examples(target: Path, model, tokenizer, options: TrainDraftOptions, eos: set[int],
                  advance=lambda n: None) -> list[Example]:
    """Every example of the run, regenerated or read from the cache. A prompt the target wrote that
    renders to a held-out prompt's ids is dropped like any training repeat of one (split_prompts)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
    chosen = split_prompts(options, tokenizer)
    held = {tuple(ids) for _, ids, h in chosen if h}
    chosen += [c for c in self_written(target, model, tokenizer, options, eos, pad) if tuple(c[1]) not in held]
    prompts = [ids for _, ids, _ in chosen]
    # the batch (padding) can change a greedy answer, and so can where the target answers (answered_on)
    key = {"target": target_fingerprint(target), "prompts": prompts, "max_new_tokens": options.max_new_tokens,
           "batch": options.regen_batch_size, **answered_on(model)}
    responses = cached(key, "responses", lambda: regenerate(
        model, prompts, options.max_new_tokens, options.regen_batch_size, eos, pad, advance), advance)
    return [Example(name, ids, resp, held) for (name, ids, held), resp in zip(chosen, responses)]
