"""The tokenizer that travels with a checkpoint (TRT-LLM ignores these files; trtspec uses them)."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer

from .errors import TrtspecError

# Any of these means "this directory has a tokenizer transformers can load".
TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def has_tokenizer(model_dir: Path) -> bool:
    return any((Path(model_dir) / f).is_file() for f in TOKENIZER_MARKERS)


def load_tokenizer(model_dir: Path, what: str = "the"):
    """The transformers tokenizer of `model_dir`, or None when it has no tokenizer files."""
    if not has_tokenizer(model_dir):
        return None

    try:
        return AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as e:  # transformers raises many kinds for a broken tokenizer
        raise TrtspecError(f"{model_dir}: cannot load {what} tokenizer ({type(e).__name__}: {e})") from None
