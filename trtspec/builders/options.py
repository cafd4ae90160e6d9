"""The options of `trtspec build`: one model, the recipe's `build:` section (plus the recipe-only
`engines` switch), `make_plan`'s argument and the source of the CLI flags' defaults and help.

Values are not range-checked here: the build rules (rules.py) check them against the checkpoint and
TensorRT-LLM's limits and say why. Light: pydantic only (the plan pulls in torch; this must not).
"""

from __future__ import annotations

from typing import Optional

from pydantic import ConfigDict, Field

from ..options import StageOptions

ROLES = ("auto", "plain", "eagle", "target", "draft")
# Our runner's per-engine limit (not an upstream fact): a 70B engine takes tens of minutes on an H100.
DEFAULT_BUILD_TIMEOUT_S = 3 * 3600


class BuildOptions(StageOptions):
    """What the user asks of trtllm-build; None means "pick the documented default"."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    section = "build"
    role: str = Field("auto", description="auto | plain | eagle | target | draft. auto: EAGLE checkpoint -> eagle, "
                                          "pair directory -> draft + target.")
    gpu: str = Field("h100", description="h100 | h200 (for the memory estimate).")
    max_batch_size: int = Field(64, description="Requests scheduled at once (EAGLE: <= 512).")
    max_input_len: Optional[int] = Field(None, description="Longest prompt (default: max_seq_len / 2).")
    max_seq_len: Optional[int] = Field(None, description="Prompt + output tokens (default: min(8192, model "
                                                         "positions)).")
    max_num_tokens: Optional[int] = Field(None, description="Tokens per engine step (default: 8192, at least batch x "
                                                            "(draft + 1)).")
    max_draft_len: Optional[int] = Field(None, description="Draft-target: most draft tokens per step (default: 8; "
                                                           "in a recipe: profile.max_k). EAGLE: the checkpoint's.")
    draft_logits: bool = Field(False, description="Draft-target: build generation logits for logits-based "
                                                  "acceptance.")
    max_beam_width: int = Field(1, description="Beam search width (speculation needs 1).")
    gather_context_logits: bool = Field(False, description="Return prompt logits (not with a draft length).")
    timeout_s: float = Field(DEFAULT_BUILD_TIMEOUT_S, gt=0, description="Seconds allowed per trtllm-build.")
