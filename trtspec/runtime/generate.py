"""High-level decoding API: load checkpoints, tokenize, pick the proposer, report ids, text and metrics.

    models = load_models(ckpt_dir, draft_ckpt=None)          # EAGLE drafter loaded when present
    results = generate_batch(models, [[ids...], ...], 64)    # list[GenerationResult]
    for row in stream_request(models, ids, 64): ...          # one request, one RowStep per target step
    run_generate(ckpt_dir, prompt="...")                     # what `trtspec generate` prints

Both run the one decoding loop (decode.py) with the proposer `proposer_for` picks.

Modes: greedy (plain checkpoint), draft-target (a draft checkpoint is given, or `ckpt` is a pair
directory with target/ and draft/ as `trtspec convert --draft` writes), EAGLE (an EagleForCausalLM
checkpoint; tree = eagle_choices or TRT-LLM's default mc_sim_7b_63, or an EAGLE-2 dynamic tree
with eagle_dynamic_top_k). All of them emit exactly the target's greedy tokens; they differ in
target steps and acceptance length. On a quantized checkpoint "exactly" needs `batch_invariant`
(decode.py): a multi-token verify rounds differently from a one-token decode, and FP8 activation
rounding can flip a near-tie (README, "Speculation on FP8 checkpoints").
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from ..checkpoints.eagle3 import Eagle3Head, load_eagle3_head
from ..checkpoints.hf_unified import open_checkpoint
from ..errors import TrtspecError
from ..fsutil import read_json
from ..options import GREEDY_SAMPLING, Sampling
from ..tokenizer import TOKENIZER_MARKERS, load_tokenizer
from ..upstream.sampling import EXACT_MATCH, REJECTION
from .accept import accept_rule
from .decode import RowStep, decode, generate, one_request
from .device import compute_dtype, resolve as resolve_device
from .batch import check_positions, over_positions
from .draft_target import DraftModelProposer
from .eagle2 import eagle_proposer
from .eagle3 import Eagle3Net, Eagle3Proposer
from .eagle_net import EagleNet
from .model import Decoder
from .ngram import NGramProposer
from .quant import Linear, set_fp8_gemm
from .speculative import Proposer
from .stats import GenerationResult
from .words import NO_WORDS, Words, encode_words

DEFAULT_DRAFT_LEN = 4


@dataclass
class Models:
    target: Decoder
    draft: Decoder | None = None
    eagle: EagleNet | None = None
    eagle3: Eagle3Net | None = None  # an EAGLE-3 head on `target` (which then captures its layers)
    tokenizer: Any = None  # transformers tokenizer of the target checkpoint dir, if it has one
    eos_ids: tuple[int, ...] = ()  # from generation_config.json (or the tokenizer)

    @property
    def max_positions(self) -> int:
        """The positions every loaded model holds (the smallest max_position_embeddings): a prompt
        plus its new tokens must fit in them (batch.over_positions)."""
        nets = [self.target, self.draft, self.eagle, self.eagle3]
        return min(m.spec.max_position_embeddings for m in nets if m is not None)

    def linears(self) -> list[Linear]:
        """The linears of every loaded checkpoint (an EAGLE-3 head's are float, never FP8)."""
        layers = [w for n in [self.target, self.draft] if n is not None for w in n.layers]
        return [lin for w in layers for lin in w.linears()] + (self.eagle.linears() if self.eagle is not None else [])

    def compile_layers(self) -> None:
        """torch.compile the target's and a draft model's layers (RuntimeDevice.compile_layers)."""
        for m in (self.target, self.draft):
            if m is not None:
                m.compile_layers()


def resolve_pair(ckpt: Path, draft_ckpt: Path | None) -> tuple[Path, Path | None]:
    """A pair directory (target/ + draft/, no config.json of its own) stands for both checkpoints."""
    ckpt = Path(ckpt)
    if not (ckpt / "config.json").exists() and (ckpt / "target" / "config.json").exists():
        return ckpt / "target", draft_ckpt if draft_ckpt is not None else ckpt / "draft"
    return ckpt, draft_ckpt


def eos_ids(ckpt_dir: Path, tokenizer) -> tuple[int, ...]:
    """generation_config.json `eos_token_id` (int or list), else the tokenizer's eos token."""
    path = Path(ckpt_dir) / "generation_config.json"
    eos = read_json(path, "generation_config.json").get("eos_token_id") if path.is_file() else None
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return ()
    return tuple(int(e) for e in (eos if isinstance(eos, list) else [eos]))


def load_models(ckpt: Path, draft_ckpt: Path | None = None, dtype: torch.dtype | None = None,
                tokenizer: bool = True, eagle3_head: Path | None = None, device: str | list = "cpu",
                fp8_gemm: str = "auto") -> Models:
    """tokenizer=False: the Triton python models, whose tokenizer belongs to preprocessing /
    postprocessing; not importing transformers saves each model stub about 4 s of start-up.
    eagle3_head: an EAGLE-3 head directory (checkpoints/eagle3.py) drafting for `ckpt`.
    device: the target's (and a draft model's) device(s), see model.Decoder; drafters sit where
    the target's hidden states come out. dtype: the compute dtype; None: device.compute_dtype's
    default (float32 on a CPU, bfloat16 on a GPU), so that a Triton model given only a device
    computes as profile and measure-cost do there. fp8_gemm: how FP8 linears multiply
    (quant.FP8_GEMMS: auto, scaled_mm, emulate)."""
    if dtype is None:
        dtype = compute_dtype(None, resolve_device(device))
    ckpt, draft_ckpt = resolve_pair(Path(ckpt), draft_ckpt)
    c = open_checkpoint(ckpt)  # a TRT-LLM checkpoint or a ModelOpt unified HF one
    tok = load_tokenizer(ckpt) if tokenizer else None
    head = load_eagle3_head(Path(eagle3_head), c.spec) if eagle3_head is not None else None
    target = Decoder(c, dtype, head.aux_layers if head is not None else (), device)  # capturing the head's layers
    models = Models(target=target,
                    draft=Decoder(open_checkpoint(Path(draft_ckpt)), dtype, device=device) if draft_ckpt is not None
                    else None,
                    eagle=EagleNet(c, dtype, target.output_device) if c.is_eagle else None,
                    tokenizer=tok, eos_ids=eos_ids(ckpt, tok))
    if head is not None:
        models = with_eagle3_head(models, head)
    set_fp8_gemm(models.linears(), fp8_gemm)
    return models


def with_eagle3_head(models: Models, head: Eagle3Head | Path | str) -> Models:
    """`models` drafting with an EAGLE-3 head on their loaded target (no second copy of the target).
    head: a loaded head (load_models loads it first: the target is built capturing its layers), or
    its directory (the Triton spec_decode model puts several heads on one target: heads trained for
    one target capture the same layers, and Eagle3Net refuses one that does not)."""
    if not isinstance(head, Eagle3Head):
        head = load_eagle3_head(Path(head), models.target.spec)
    return dataclasses.replace(models, eagle3=Eagle3Net(head, models.target, models.target.dtype))


def pick_mode(models: Models, mode: str, eagle_choices, dynamic_top_k: int | None = None) -> str:
    if mode == "auto":
        mode = ("draft-target" if models.draft is not None else "eagle" if models.eagle is not None
                else "eagle3" if models.eagle3 is not None else "greedy")
    if mode == "eagle3" and models.eagle3 is None:
        raise TrtspecError("EAGLE-3 decoding needs an EAGLE-3 head (load_models eagle3_head)")
    if mode == "draft-target" and models.draft is None:
        raise TrtspecError("draft-target decoding needs a draft checkpoint")
    if mode == "eagle" and models.eagle is None:
        raise TrtspecError(f"{models.target.path}: EAGLE decoding needs an EagleForCausalLM checkpoint")
    if mode not in ("greedy", "draft-target", "eagle", "eagle3", "ngram"):
        raise TrtspecError(f"mode: {mode!r} is not one of auto, greedy, draft-target, eagle, eagle3, ngram")
    if eagle_choices is not None and mode != "eagle":
        raise TrtspecError(f"eagle_choices apply to EAGLE checkpoints only (mode is {mode})")
    if dynamic_top_k is not None and mode != "eagle":
        raise TrtspecError(f"a dynamic tree (EAGLE-2 top-k) applies to EAGLE checkpoints only (mode is {mode})")
    return mode


def proposer_for(models: Models, mode: str = "auto", draft_len: int | None = None, eagle_choices=None,
                 eagle_dynamic_top_k: int | None = None, batch_invariant: bool = False,
                 draft_sampling: Sampling | None = None, ngram_size: int | None = None) -> Proposer | None:
    """The proposer of `mode` (auto | greedy | draft-target | eagle | eagle3 | ngram); None for plain decoding.
    draft_sampling: the draft model samples its tokens at these settings (rejection sampling).
    ngram_size: n-gram max_matching_ngram_size (None: TensorRT-LLM's default)."""
    mode = pick_mode(models, mode, eagle_choices, eagle_dynamic_top_k)
    if ngram_size is not None and mode != "ngram":
        raise TrtspecError(f"ngram_size applies to n-gram decoding only (mode is {mode})")
    if draft_len is not None and mode not in ("draft-target", "ngram", "eagle3"):
        raise TrtspecError(f"draft_len applies to draft-target, n-gram and EAGLE-3 decoding only (mode is {mode})")
    if mode == "eagle3":
        return Eagle3Proposer(models.eagle3, DEFAULT_DRAFT_LEN if draft_len is None else draft_len,
                              models.target.vocab_size)
    if mode == "ngram":
        return NGramProposer(DEFAULT_DRAFT_LEN if draft_len is None else draft_len, ngram_size)
    if mode == "draft-target":
        return DraftModelProposer(models.draft, DEFAULT_DRAFT_LEN if draft_len is None else draft_len,
                                  models.target.vocab_size, batch_invariant, draft_sampling)
    if mode == "eagle":
        return eagle_proposer(models.eagle, models.target.vocab_size, eagle_choices, eagle_dynamic_top_k)
    return None


def sampled_steps(models: Models, mode: str, draft_len: int | None, eagle_choices, eagle_dynamic_top_k: int | None,
                  batch_invariant: bool, sampling: Sampling, rule: str | None, ngram_size: int | None = None):
    """(proposer, accept rule) for these settings. rule None = exact_match, the lossless rule every
    proposer supports; the draft model samples its own tokens only under rejection_sampling (it
    then needs to, to send a draft distribution), and drafts greedily otherwise."""
    rule = EXACT_MATCH.name if rule is None else rule
    accept = accept_rule(rule, sampling)
    draft_sampling = sampling if rule == REJECTION.name else None
    return proposer_for(models, mode, draft_len, eagle_choices, eagle_dynamic_top_k, batch_invariant,
                        draft_sampling, ngram_size=ngram_size), accept


def generate_batch(models: Models, prompts: list[list[int]], max_new_tokens: int, mode: str = "auto",
                   draft_len: int | None = None, eagle_choices=None, ignore_eos: bool = False,
                   eagle_dynamic_top_k: int | None = None, batch_invariant: bool = False,
                   sampling: Sampling = GREEDY_SAMPLING, accept: str | None = None,
                   ngram_size: int | None = None, min_tokens: int = 0,
                   words: Words = NO_WORDS) -> list[GenerationResult]:
    """Decode a batch of token-id prompts with one loop; results in prompt order.
    mode: auto | greedy | draft-target | eagle | eagle3 | ngram (runtime/ngram.py and runtime/eagle3.py: K =
    draft_len, n = ngram_size, n-gram with one shared pool as TensorRT-LLM's default; eagle3 needs
    load_models(eagle3_head=...)); EAGLE uses `eagle_choices` (EAGLE-1, default tree
    mc_sim_7b_63) or, with `eagle_dynamic_top_k`, an EAGLE-2 dynamic tree. batch_invariant: every
    target (and draft-model) forward after the prompt is one token of one row (decode.py).
    sampling / accept: the settings and accept rule name (runtime/accept.py); prompt i draws with
    seed sampling.seed + i. min_tokens: no eos before that many new tokens (decode.py); words: stop
    and bad token sequences (words.py)."""
    proposer, rule = sampled_steps(models, mode, draft_len, eagle_choices, eagle_dynamic_top_k, batch_invariant,
                                   sampling, accept, ngram_size)
    return generate(models.target, prompts, max_new_tokens, () if ignore_eos else models.eos_ids, proposer,
                    rule, batch_invariant=batch_invariant, seed=sampling.seed, min_tokens=min_tokens, words=words)


def stream_request(models: Models, prompt: list[int], max_new_tokens: int, mode: str = "auto",
                   draft_len: int | None = None, eagle_choices=None, eos_ids=None,
                   eagle_dynamic_top_k: int | None = None, batch_invariant: bool = False,
                   sampling: Sampling = GREEDY_SAMPLING, accept: str | None = None,
                   ngram_size: int | None = None, min_tokens: int = 0,
                   words: Words = NO_WORDS) -> Iterator[RowStep]:
    """One request, one RowStep per target step as it happens (the cpu-flavor Triton models stream
    these); eos_ids None = the checkpoint's; min_tokens and words as in generate_batch. The proposer and rule
    are checked before the first step runs. Same seed, same output."""
    proposer, rule = sampled_steps(models, mode, draft_len, eagle_choices, eagle_dynamic_top_k, batch_invariant,
                                   sampling, accept, ngram_size)
    eos = models.eos_ids if eos_ids is None else eos_ids
    return one_request(decode(models.target, [prompt], max_new_tokens, eos, proposer, rule,
                              batch_invariant=batch_invariant, seed=sampling.seed, min_tokens=min_tokens,
                              words=words))


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def prompts_within_positions(models: Models, named: list[tuple[str, list[int]]], new_tokens: int, what: str,
                             warn=None) -> list[tuple[str, list[int]]]:
    """The (id, prompt) pairs that fit the models' positions with `new_tokens` after them; the others
    are skipped with one warning naming their ids (a run over a user's traffic log should not die
    on one long prompt). Refused when none is left: `what` (e.g. "workload chat") names the set."""
    positions = models.max_positions
    over = set(over_positions([p for _, p in named], new_tokens, positions))
    if over and len(over) == len(named):
        raise TrtspecError(f"{what}: every prompt + {new_tokens} decoded tokens exceeds the model's "
                           f"max_position_embeddings={positions} (shortest prompt: {min(len(p) for _, p in named)} "
                           "tokens); nothing left to run")
    if over:
        ids = ", ".join(str(named[i][0]) for i in sorted(over))
        (warn or _warn)(f"warning: {what}: skipping {len(over)} of {len(named)} samples whose prompt + {new_tokens} decoded "
             f"tokens exceed the model's max_position_embeddings={positions}: {ids}")
    return [x for i, x in enumerate(named) if i not in over]


def encode(tokenizer, prompt: str, chat: bool, where: Path) -> list[int]:
    if tokenizer is None:
        raise TrtspecError(f"{where}: no tokenizer files ({', '.join(TOKENIZER_MARKERS)}); give prompt ids instead")
    if not chat:
        return list(tokenizer(prompt)["input_ids"])
    if not getattr(tokenizer, "chat_template", None):
        raise TrtspecError(f"{where}: the tokenizer has no chat template; call without `chat`")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def run_generate(ckpt: Path, prompt: str | None = None, prompt_ids: list[int] | None = None, chat: bool = False,
                 max_new_tokens: int = 64, draft_ckpt: Path | None = None, draft_len: int | None = None,
                 eagle_choices=None, ignore_eos: bool = False, eagle_dynamic_top_k: int | None = None,
                 batch_invariant: bool = False, sampling: Sampling = GREEDY_SAMPLING, accept: str | None = None,
                 eagle3_head: Path | None = None, device: str = "cpu", dtype: str | None = None,
                 compile_layers: bool = False, fp8_gemm: str = "auto", min_tokens: int = 0,
                 stop_words=(), bad_words=()) -> dict:
    """One prompt, as `trtspec generate` runs it (eagle3_head: EAGLE-3 drafting, K = draft_len). Returns {output_ids, text, acceptance_length, steps,
    timing, finish_reason}: generated ids only; text None when the checkpoint has no tokenizer; acceptance_length
    None for plain greedy; steps = target forward calls, prefill included; timing = seconds to the
    first token (the prefill), seconds in all and generated tokens per second, decoding only (model
    loading and tokenization excluded); finish_reason eos | stop | length. stop_words / bad_words:
    strings or token-id lists (words.encode_words). A prompt whose length + max_new_tokens exceeds the model's
    max_position_embeddings is refused (batch.check_positions), never truncated. device / dtype:
    GenerateOptions' (device.resolve, device.compute_dtype; errors name generate.device / .dtype)."""
    if (prompt is None) == (prompt_ids is None):
        raise TrtspecError("give exactly one of prompt or prompt_ids")
    if chat and prompt is None:
        raise TrtspecError("chat formatting needs a text prompt")
    if draft_len is not None and draft_ckpt is None and eagle3_head is None and not resolve_pair(Path(ckpt), None)[1]:
        raise TrtspecError("draft_len: needs a draft checkpoint or an EAGLE-3 head (nothing else drafts K tokens)")
    devices = resolve_device(device, "generate.device")
    models = load_models(Path(ckpt), draft_ckpt, compute_dtype(dtype, devices, "generate.dtype"),
                         eagle3_head=eagle3_head, device=devices, fp8_gemm=fp8_gemm)
    if compile_layers:
        models.compile_layers()
    ids = prompt_ids if prompt_ids is not None else encode(models.tokenizer, prompt, chat, models.target.path)
    check_positions([ids], max_new_tokens, models.max_positions)
    words = Words.of(stop=encode_words(stop_words, "stop_words", models.tokenizer, models.target.path),
                     bad=encode_words(bad_words, "bad_words", models.tokenizer, models.target.path))
    steps = stream_request(models, list(ids), max_new_tokens, draft_len=draft_len, eagle_choices=eagle_choices,
                           eos_ids=() if ignore_eos else None, eagle_dynamic_top_k=eagle_dynamic_top_k,
                           batch_invariant=batch_invariant, sampling=sampling, accept=accept,
                           min_tokens=min_tokens, words=words)
    output_ids, first_token_s, start = [], None, time.perf_counter()
    for row in steps:  # the prefill's step carries the first token
        first_token_s = time.perf_counter() - start if first_token_s is None else first_token_s
        output_ids += [int(t) for t in row.tokens]
        stats, finish_reason = row.stats, row.finish_reason
    total_s = time.perf_counter() - start
    text = (models.tokenizer.decode(output_ids, skip_special_tokens=True)
            if models.tokenizer is not None else None)
    return {"output_ids": output_ids, "text": text, "acceptance_length": stats.acceptance_length,
            "sampling": sampling.model_dump(), "accept_rule": None if sampling.greedy else accept or EXACT_MATCH.name,
            "steps": stats.target_calls, "finish_reason": finish_reason,
            "timing": {"first_token_s": first_token_s, "total_s": total_s,
                       "tokens_per_s": len(output_ids) / total_s if total_s > 0 else None}}
