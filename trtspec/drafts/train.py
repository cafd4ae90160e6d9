"""`trtspec train-draft`: an EAGLE-3 head for a target, trained with ModelOpt on the target's own
greedy answers to workload prompts (data.py), exported with ModelOpt's exporter (head.py).

The loop is ours, the model, loss and export are ModelOpt's: ModelOpt 0.47's wheel ships no trainer
(its HF-Trainer script, callbacks and data collators live in examples/speculative_decoding of the
source repository, not in the installed package), and a plain loop is what makes a run resumable
bit for bit: the checkpoint holds the head, AdamW's state and the step, and the data order of epoch
e is a seeded shuffle of (seed, e), so an interrupted run resumed from its last checkpoint ends with
the same head as an uninterrupted one. Each step calls the converted model's forward (ModelOpt's
online mode: the frozen target's hidden states are computed on the fly for that batch only, so
memory is one batch's whatever the corpus), which returns ModelOpt's EAGLE-3 loss over its TTT steps.

Outputs: `out/` is written atomically (a temporary sibling renamed into place) and holds what
ModelOpt's exporter writes (config.json, model.safetensors) plus training.json (options, data,
history) and learning_curve.png. The resumable checkpoint lives in `<out>.train-run/` while the run
is unfinished (written by rename, never half) and is removed once `out/` is in place."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from ..errors import TrtspecError
from ..fsutil import atomic_dir, check_inputs_kept, check_output_dir, write_json
from . import data, head, heldout, report, selfprompt
from .options import SELF, TrainDraftOptions, device_type

CHECKPOINT = "checkpoint.pt"
# Bumped when a checkpoint of an earlier version must not be resumed (2: input_layernorm untrained).
TRAINING_VERSION = 2


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise TrtspecError("draft.train.device: cuda requested but torch sees no CUDA device")
    return torch.device(device_type(name))


def load_target(target: Path, device: torch.device):
    """(tokenizer, model, eos ids) of an HF target directory; float32 on CPU (bf16 matmuls are slow
    there), the checkpoint's dtype on CUDA."""
    from transformers import AutoModelForCausalLM

    from ..tokenizer import TOKENIZER_MARKERS, load_tokenizer

    if not (Path(target) / "config.json").is_file():
        raise TrtspecError(f"{target}: not a Hugging Face model directory (no config.json)")
    tok = load_tokenizer(target, "the target's")
    if tok is None:
        raise TrtspecError(f"{target}: no tokenizer files ({', '.join(TOKENIZER_MARKERS)}); the target answers "
                           "text prompts")
    dtype = torch.float32 if device.type == "cpu" else "auto"
    try:
        model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype).to(device).eval()
    except (OSError, ValueError, KeyError) as e:  # a TRT-LLM checkpoint, a foreign config, missing weights
        why = str(e).split(". ")[0].split("\n")[0]
        raise TrtspecError(f"{target}: not a Hugging Face model directory transformers can load "
                           f"({type(e).__name__}: {why})") from None
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    eos |= {tok.eos_token_id} if tok.eos_token_id is not None else set()
    if not eos:
        raise TrtspecError(f"{target}: neither the generation config nor the tokenizer names an EOS token")
    return tok, model, eos


def batch_tensors(examples: list[data.Example], pad: int, device: torch.device,
                  loss_on_prompt: bool = False) -> dict:
    """Right-padded input_ids, attention_mask and loss_mask. loss_mask[p] = 1 where the target's
    prediction at p is a response token (P-1 <= p <= P+T-2), or with `loss_on_prompt` any token of
    the sequence (0 <= p <= P+T-2; never padding): ModelOpt masks the target's next-token prediction
    at p with loss_mask[p]."""
    width = max(len(e.prompt) + len(e.response) for e in examples)
    ids, attn, loss = [], [], []
    for e in examples:
        n, P, T = len(e.prompt) + len(e.response), len(e.prompt), len(e.response)
        first = 0 if loss_on_prompt else P - 1
        ids.append(e.prompt + e.response + [pad] * (width - n))
        attn.append([1] * n + [0] * (width - n))
        loss.append([1 if first <= p <= P + T - 2 else 0 for p in range(width)])
    return {k: torch.tensor(v, device=device) for k, v in
            (("input_ids", ids), ("attention_mask", attn), ("loss_mask", loss))}


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    order = list(range(n))
    random.Random(f"{seed}:epoch:{epoch}").shuffle(order)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def fingerprint(options: TrainDraftOptions, examples: list[data.Example], target: str) -> str:
    """What a checkpoint is valid for: the options that shape training, the exact data and the target
    (data.target_fingerprint: the head learns its hidden states, and another target, a fine-tune of
    this one say, can give the same greedy answers)."""
    blob = json.dumps([TRAINING_VERSION, options.shaping(), target,
                       [(e.prompt, e.response, e.heldout) for e in examples]])
    return hashlib.sha256(blob.encode()).hexdigest()


def save_checkpoint(run_dir: Path, state: dict) -> None:
    """torch.save through a temporary file and a rename: a killed run leaves the previous checkpoint."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{CHECKPOINT}.{os.getpid()}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, run_dir / CHECKPOINT)


def load_checkpoint(run_dir: Path, fp: str) -> dict | None:
    path = run_dir / CHECKPOINT
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state if state.get("fingerprint") == fp else None


@contextmanager
def progress_bar(console=None):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[status]}"), console=console) as bar:
        yield bar


class Clock:
    """Wall and process CPU seconds since creation (CPU time is the honest figure on a shared box)."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


class Run:
    """One training run's mutable state: the model, optimizer, step counter and history."""

    def __init__(self, model, options: TrainDraftOptions, train: list, held: list, pad: int, device):
        self.model, self.options, self.train, self.held, self.pad, self.device = \
            model, options, train, held, pad, device
        params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=options.lr)
        self.step, self.tokens, self.history, self.seconds, self.cpu_seconds = 0, 0, [], 0.0, 0.0
        self._losses, self._accs, self._length = [], [], None

    def restore(self, state: dict) -> None:
        self.model.eagle_module.load_state_dict(state["head"])
        self.opt.load_state_dict(state["optimizer"])
        self.step, self.tokens = state["step"], state["tokens"]
        self.seconds, self.cpu_seconds = state["seconds"], state["cpu_seconds"]
        self.history = json.loads(state["history"])
        self._losses, self._accs = json.loads(state["pending"])

    def state(self, fp: str) -> dict:
        return {"fingerprint": fp, "head": head.head_state(self.model), "optimizer": self.opt.state_dict(),
                "step": self.step, "tokens": self.tokens, "seconds": self.seconds, "cpu_seconds": self.cpu_seconds,
                "history": json.dumps(self.history), "pending": json.dumps([self._losses, self._accs])}

    def train_step(self, batch: list[data.Example]) -> None:
        inputs = batch_tensors(batch, self.pad, self.device, self.options.loss_on_prompt)
        length = inputs["input_ids"].shape[1]
        if length != self._length:  # ModelOpt caches TTT masks by step only, sized for one length
            self.model._cached_attn_blk_masks, self._length = {}, length
        self.model.train()
        out = self.model(**inputs)
        self.opt.zero_grad(set_to_none=True)
        out.loss.backward()
        self.opt.step()
        self.step += 1
        self.tokens += sum(len(e.response) for e in batch)
        self._losses.append(float(out.loss.detach()))
        self._accs.append(out.train_acc[0])

    def record(self, evaluate: bool) -> dict:
        """A history entry: mean loss / TTT accuracies since the last one, and held-out AL(K) with its
        standard error (`al_se`, keyed like `al`; absent in files written before it was recorded)."""
        entry = {"step": self.step, "tokens": self.tokens, "seconds": round(self.seconds, 2),
                 "cpu_seconds": round(self.cpu_seconds, 2),
                 "loss": sum(self._losses) / len(self._losses) if self._losses else None,
                 "train_acc": [sum(a) / len(a) for a in zip(*self._accs)] if self._accs else None}
        if evaluate and self.held:
            self._length = None  # the evaluation sized ModelOpt's TTT masks for other lengths
            clock = Clock()
            al, se = heldout.heldout_acceptance(self.model, self.held, self.options.eval_k)
            entry["al"], entry["al_se"] = ({str(k): v for k, v in d.items()} for d in (al, se))
            entry["eval_seconds"], entry["eval_cpu_seconds"] = (round(x, 2) for x in clock.lap())
        self._losses, self._accs = [], []
        self.history.append(entry)
        return entry


def train_draft(target: Path, out: Path, options: TrainDraftOptions | None = None, overwrite: bool = False,
                console=None, stop_after_steps: int | None = None) -> dict | None:
    """Train, export and report one EAGLE-3 head for `target` (an HF directory) into `out`.

    stop_after_steps: end this invocation after that many optimizer steps in total (the checkpoint
    is kept and a later call resumes from it); returns None then, else training.json's content."""
    options = options or TrainDraftOptions()
    target, out = Path(target), Path(out)
    check_output_dir(out, overwrite)
    check_inputs_kept(out, {"target": target})
    if options.threads:
        torch.set_num_threads(options.threads)
    device = resolve_device(options.device)
    tok, model, eos = load_target(target, device)
    head.check_draft_vocab(options, model.config.vocab_size)
    pad = tok.pad_token_id if tok.pad_token_id is not None else min(eos)
    with progress_bar(console) as bar:
        task = bar.add_task("target answers prompts", total=None, status="")
        clock = Clock()
        examples = data.load_examples(target, model, tok, options, eos,
                                      advance=lambda n: bar.advance(task, n))
        data_time = clock.lap()
        train = [e for e in examples if not e.heldout]
        held = [e for e in examples if e.heldout]
        written = sum(e.workload == SELF for e in train)
        if written < options.self_prompts:
            tries = selfprompt.TRIES_PER_PROMPT * options.self_prompts
            bar.console.print(f"warning: draft.train.self_prompts: the target wrote {written} distinct prompts of "
                              f"the {options.self_prompts} asked for ({tries} tries; the rest were empty or "
                              "repeats); training on those")
        d2t = None
        if options.draft_vocab_size and options.draft_vocab_size < model.config.vocab_size:
            d2t = head.frequent_vocab([e.response for e in train], options.draft_vocab_size, model.config.vocab_size)
        head.convert(model, options, d2t, options.seed)
        run = Run(model, options, train, held, pad, device)
        run_dir = out.parent / f"{out.name}.train-run"
        fp = fingerprint(options, examples, data.target_fingerprint(target))
        state = load_checkpoint(run_dir, fp)
        if state is not None:
            run.restore(state)
        steps_per_epoch = len(epoch_batches(len(train), options.batch_size, options.seed, 0))
        total = steps_per_epoch * options.epochs
        bar.update(task, description="training the head", total=total, completed=run.step,
                   status=report.status(run.history[-1]) if run.history else "")
        if not run.history:
            run.record(evaluate=True)  # the untrained head's AL: the curve's first point
        for epoch in range(run.step // steps_per_epoch, options.epochs):
            for b, idx in enumerate(epoch_batches(len(train), options.batch_size, options.seed, epoch)):
                if epoch * steps_per_epoch + b < run.step:
                    continue  # done before the checkpoint this run resumed from
                if stop_after_steps is not None and run.step >= stop_after_steps:
                    save_checkpoint(run_dir, run.state(fp))
                    return None
                clock = Clock()
                run.train_step([train[i] for i in idx])
                run.seconds, run.cpu_seconds = (a + b for a, b in zip((run.seconds, run.cpu_seconds), clock.lap()))
                last = run.step == total
                if run.step % options.eval_every == 0 or last:
                    bar.update(task, status=report.status(run.record(evaluate=True)))
                if run.step % options.checkpoint_every == 0 and not last:
                    save_checkpoint(run_dir, run.state(fp))
                bar.advance(task)
    summary = {"target": str(target), "options": options.model_dump(), "train_prompts": len(train),
               "self_prompts_written": written,
               "heldout_prompts": len(held), "train_tokens": sum(len(e.response) for e in train),
               "heldout_tokens": sum(len(e.response) for e in held),
               "heldout_vocab_coverage": head.vocab_coverage(d2t, held),
               "data_seconds": round(data_time[0], 2), "data_cpu_seconds": round(data_time[1], 2),
               "history": run.history}
    with atomic_dir(out, overwrite) as tmp:
        head.export(model, tmp)
        write_json(tmp / "training.json", summary)
        report.plot_curve(run.history, tmp / "learning_curve.png")
    shutil.rmtree(run_dir, ignore_errors=True)
    return summary
