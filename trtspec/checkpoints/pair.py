"""Draft-target pairs: `target/` and `draft/` checkpoints that provably share a tokenizer.

TRT-LLM's draft-target mode compares token ids, so a draft with a different tokenizer is not an
error there, only an acceptance rate near zero. We refuse it up front and name the first difference.
Embedding sizes may differ (Qwen2.5-0.5B pads its vocab to 151936, 7B to 152064): what matters is
that both cover every id the shared tokenizer can produce.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TrtspecError
from ..fsutil import atomic_dir, read_json
from ..tokenizer import load_tokenizer, tokenizer_difference
from .config_fields import ConfigFields
from .convert import prepare_decoder, write_decoder
from .writer import source_record, write_manifest


def require_tokenizer(model_dir: Path, role: str):
    tok = load_tokenizer(model_dir, f"the {role}")
    if tok is None:
        raise TrtspecError(f"{model_dir}: no tokenizer files (tokenizer.json or tokenizer.model); "
                           f"cannot check that the {role} shares the other model's tokenizer")
    return tok


def check_same_tokenizer(target_dir: Path, draft_dir: Path) -> int:
    """Raise TrtspecError naming the first difference; return the shared tokenizer size (its
    highest token id + 1, the embedding rows both models need)."""
    t_tok, d_tok = require_tokenizer(target_dir, "target"), require_tokenizer(draft_dir, "draft")
    diff = tokenizer_difference(t_tok, d_tok, ("target", "draft"))
    if diff:
        raise TrtspecError(f"{draft_dir}: draft tokenizer differs from the target's ({target_dir}) at {diff} "
                           "(draft and target must share a tokenizer and its special tokens)")
    # ids need not be contiguous: the embedding must reach the highest one
    size = max(t_tok.get_vocab().values(), default=-1) + 1
    for role, d in (("target", target_dir), ("draft", draft_dir)):
        path = Path(d) / "config.json"
        vocab = ConfigFields(read_json(path, "HF config.json"), path).int("vocab_size")
        if vocab < size:
            raise TrtspecError(f"{path}: {role} vocab_size={vocab} is smaller than the {size} rows "
                               f"the shared tokenizer's ids need (its highest id is {size - 1})")
    return size


def convert_pair(target_hf: Path, draft_hf: Path, out_dir: Path, dtype: str = "auto", tp: int = 1,
                 draft_tp: int | None = None, overwrite: bool = False) -> Path:
    """Write `out_dir/target` and `out_dir/draft` TRT-LLM checkpoints (each quantizable later on
    its own) after checking that the two share vocabulary and tokenizer."""
    size = check_same_tokenizer(Path(target_hf), Path(draft_hf))
    target = prepare_decoder(target_hf, dtype, tp)
    draft = prepare_decoder(draft_hf, dtype, tp if draft_tp is None else draft_tp)
    with atomic_dir(Path(out_dir), overwrite) as tmp:
        for name, d in (("target", target), ("draft", draft)):
            (tmp / name).mkdir()
            write_decoder(d, tmp / name)
        write_manifest(tmp, "draft-target-pair",
                       [source_record("target", target.hf_dir, target.weights),
                        source_record("draft", draft.hf_dir, draft.weights)],
                       {"dtype": target.dtype, "tp": target.tp, "draft_tp": draft.tp, "tokenizer_size": size})
    return Path(out_dir)
