"""Trained heads cached by their inputs, like the converted default model: a recipe's
`draft: {train: ...}` (and the demo) trains a head once per machine, not once per output directory.

The key covers everything the head's directory depends on: the target's weights, config and tokenizer
(data.target_fingerprint), the options that shape training or its held-out report
(TrainDraftOptions.written: a changed eval_k must not return AL(K) for the old K), the exact prompt ids
(packaged sets and prompt files alike; tokenizing them is cheap), the device type the target answers on
and train.TRAINING_VERSION. The head
lives under `$TRTSPEC_CACHE/draft-heads/<key>`; train_draft writes it atomically and keeps its
resumable checkpoint beside it, so a cut first run resumes where it stopped."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..checkpoints.default_model import default_cache_root
from .options import TrainDraftOptions

COMPLETE = "training.json"  # written last into the head directory (train.train_draft)


def head_key(target: Path, options: TrainDraftOptions) -> str:
    from transformers import AutoTokenizer

    from . import data, train

    prompts = data.split_prompts(options, AutoTokenizer.from_pretrained(target))
    blob = json.dumps({"version": train.TRAINING_VERSION, "target": data.target_fingerprint(target),
                       "options": options.written(), "prompts": prompts,
                       # where the target answers decides its dtype too (data.answered_on)
                       "device": train.resolve_device(options.device).type})
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def cached_head(target: Path, options: TrainDraftOptions, console=None) -> tuple[Path, bool]:
    """(the head's directory, whether it was trained now): trained into the cache unless there."""
    from .train import train_draft

    out = default_cache_root() / "draft-heads" / head_key(Path(target), options)
    if (out / COMPLETE).is_file():
        return out, False
    train_draft(Path(target), out, options, overwrite=True, console=console)
    return out, True
