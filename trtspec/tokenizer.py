"""The tokenizer that travels with a checkpoint (TRT-LLM ignores these files; trtspec uses them)."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer

from .errors import TrtspecError
from .upstream import trtllm

# Any of these means "this directory has a tokenizer transformers can load".
TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def has_tokenizer(model_dir: Path) -> bool:
    return any((Path(model_dir) / f).is_file() for f in TOKENIZER_MARKERS)


def mistral_regex_flag(model_dir: Path) -> bool | None:
    """`fix_mistral_regex` for AutoTokenizer: False for a TRT-LLM checkpoint of a non-Mistral family,
    else None (transformers decides).

    transformers 4.57.3+ warns "incorrect regex pattern ... fix_mistral_regex" for a local tokenizer
    unless the directory's config.json names a non-Mistral `model_type` with a `transformers_version`
    <= 4.57.2. A TRT-LLM config.json has neither key, so every trtspec checkpoint got the warning,
    although the regex bug concerns Mistral tokenizers only. Its `architecture` says which family the
    tokenizer came with; Mistral (and EAGLE, whose base is not recorded) keep transformers' check."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or "model_type" in config or "transformers_version" in config:
        return None  # an HF directory: transformers reads the facts it needs itself
    families = {arch: family for arch, family in trtllm.HF_ARCHITECTURES.values()}
    family = families.get(config.get("architecture"))
    return False if family is not None and family != "mistral" else None


def load_tokenizer(model_dir: Path, what: str = "the"):
    """The transformers tokenizer of `model_dir`, or None when it has no tokenizer files."""
    if not has_tokenizer(model_dir):
        return None
    flag = mistral_regex_flag(model_dir)
    try:
        return AutoTokenizer.from_pretrained(str(model_dir), **({} if flag is None else {"fix_mistral_regex": flag}))
    except Exception as e:  # transformers raises many kinds for a broken tokenizer
        raise TrtspecError(f"{model_dir}: cannot load {what} tokenizer ({type(e).__name__}: {e})") from None


SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")


def tokenizer_difference(a, b, names: tuple[str, str]) -> str | None:
    """The first difference between two loaded tokenizers (a token id mapped to different tokens, or
    a special token id), as text naming them by `names`; None when they tokenize alike. The vocabulary
    and special tokens, not the files: a re-saved tokenizer_config.json is the same tokenizer."""
    a_by_id = {i: tok for tok, i in a.get_vocab().items()}
    b_by_id = {i: tok for tok, i in b.get_vocab().items()}
    for i in sorted(set(a_by_id) | set(b_by_id)):
        if a_by_id.get(i) != b_by_id.get(i):
            return f"token id {i}: {names[0]} {a_by_id.get(i)!r}, {names[1]} {b_by_id.get(i)!r}"
    for attr in SPECIAL_TOKENS:
        if getattr(a, attr) != getattr(b, attr):
            return f"{attr}: {names[0]} {getattr(a, attr)}, {names[1]} {getattr(b, attr)}"
    return None
