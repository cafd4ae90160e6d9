"""Whether a quality report's two checkpoints are one model, quantized and not: compared token by
token, anything else gives numbers that look like a quantization error and are not.

Equal vocabulary sizes say little (a whole model family shares one size, and a different tokenizer
may have it too). What does identify the model:
- its source: every checkpoint trtspec writes records, in `trtspec.json`, the HF directory it was
  made from with the sha256 of its config.json and weight files (checkpoints.writer.source_record;
  a pair's target/ and draft/ have their own). The quantized model of a source and that source converted unquantized carry the same
  hashes, wherever the source was moved;
- its tokenizer: the vocabulary and special token ids (tokenizer.tokenizer_difference), the same
  check a draft-target pair passes.
A pair that differs in either is refused. A checkpoint without a source record (not written by
trtspec) cannot be matched by source: that is a warning, and the tokenizers are still compared.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import TrtspecError
from ..fsutil import read_json
from ..tokenizer import tokenizer_difference

SOURCE_ROLES = ("hf", "target")  # the decoder's record (an EAGLE checkpoint also records its head's)


def source_of(ckpt: Path) -> dict | None:
    """The source record of the checkpoint's decoder ({"role", "path", "sha256"}), or None."""
    manifest = Path(ckpt) / "trtspec.json"
    if not manifest.is_file():
        return None
    records = read_json(manifest, "trtspec.json manifest").get("sources") or []
    return next((r for r in records if isinstance(r, dict) and r.get("role") in SOURCE_ROLES and r.get("sha256")),
                None)


def _differing_file(a: dict, b: dict) -> str:
    """The first file whose hash differs between two source records (or that one of them lacks)."""
    return next(n for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n))


def check_same_model(quant_ckpt: Path, ref_ckpt: Path, quant_tok, ref_tok) -> None:
    """Refuse a quantized / reference pair made from different sources or with different tokenizers;
    warn when a source is not recorded. quant_tok / ref_tok: the loaded tokenizers (None: not
    compared, and warned about)."""
    q, r = source_of(quant_ckpt), source_of(ref_ckpt)
    if q is not None and r is not None and q["sha256"] != r["sha256"]:
        raise TrtspecError(f"{quant_ckpt} and {ref_ckpt}: made from different models ({q.get('path')} vs "
                           f"{r.get('path')}: {_differing_file(q['sha256'], r['sha256'])} differs); compare a "
                           "checkpoint with its own unquantized source")
    if quant_tok is not None and ref_tok is not None:
        diff = tokenizer_difference(quant_tok, ref_tok, ("quantized", "reference"))
        if diff:
            raise TrtspecError(f"{quant_ckpt} and {ref_ckpt}: tokenizers differ at {diff}; compare a checkpoint "
                               "with its own unquantized source")
    unknown = [str(p) for p, s in ((quant_ckpt, q), (ref_ckpt, r)) if s is None]
    if unknown:
        print(f"warning: {' and '.join(unknown)}: no source recorded in trtspec.json; cannot check that "
              f"{quant_ckpt} is the quantized model of {ref_ckpt}'s source", file=sys.stderr)
    if quant_tok is None or ref_tok is None:
        print(f"warning: {quant_ckpt} and {ref_ckpt}: tokenizer files missing on one side; tokenizers not "
              "compared", file=sys.stderr)
