"""The convert stage as one library call: `convert(hf, out, ConvertOptions, eagle_head | draft_hf)`.

`trtspec convert`, the recipe's convert stage and the quality report's unquantized reference all
call this; it picks the converter (plain decoder, EAGLE base + head, draft-target pair). Errors
name the option (`convert.FIELD`, `eagle.FIELD`); the CLI re-words them with its flags.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TrtspecError
from .convert import convert_hf
from .eagle import convert_eagle
from .options import ConvertOptions
from .pair import convert_pair


def convert(hf: Path, out_dir: Path, options: ConvertOptions | None = None, eagle_head: Path | None = None,
            draft_hf: Path | None = None, overwrite: bool = False) -> Path:
    options = options or ConvertOptions()
    if eagle_head is not None and draft_hf is not None:
        raise TrtspecError("convert: an EAGLE head and a draft model are mutually exclusive")
    if eagle_head is not None:
        e = options.eagle
        return convert_eagle(hf, eagle_head, out_dir, dtype=options.dtype, tp=options.tp,
                             max_draft_len=e.max_draft_len, num_eagle_layers=e.num_eagle_layers,
                             max_non_leaves=e.max_non_leaves, allow_pickle=options.allow_pickle, overwrite=overwrite)
    if draft_hf is not None:
        return convert_pair(hf, draft_hf, out_dir, dtype=options.dtype, tp=options.tp, overwrite=overwrite)
    return convert_hf(hf, out_dir, dtype=options.dtype, tp=options.tp, overwrite=overwrite)
