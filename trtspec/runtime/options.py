"""The options of `trtspec generate` (one prompt through the PyTorch runtime): the source of the
CLI flags' defaults and help, passed to runtime.generate.run_generate field by field. Light:
pydantic only.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from ..options import StageOptions


class GenerateOptions(StageOptions):
    """How one prompt is decoded: greedy, draft-target, or EAGLE tree (static or dynamic)."""
    section = "generate"
    draft_len: int = Field(4, ge=1, description="Draft tokens per step (draft-target).")
    eagle_choices: Optional[list[list[int]]] = Field(None, description="EAGLE tree, e.g. [[0],[1],[0,0]].")
    eagle_dynamic_top_k: Optional[int] = Field(None, description="EAGLE-2 dynamic tree with this top-k (instead of "
                                                                 "eagle_choices).")
    chat: bool = Field(False, description="Render the prompt with the tokenizer's chat template.")
    max_new_tokens: int = Field(64, description="Tokens to generate.")
    ignore_eos: bool = Field(False, description="Do not stop at the end-of-sequence token.")
    batch_invariant: bool = Field(False, description="Verify each draft token as a one-token decode (no speedup): "
                                                     "speculation then reproduces greedy bit for bit on FP8/INT8 "
                                                     "checkpoints too.")
