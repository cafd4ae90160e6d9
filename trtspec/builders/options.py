"""What the user asks a build for: the planner's options and the runner's time limit.

Kept free of torch and of the planner, so the CLI and the rules can name the options without
loading checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("auto", "plain", "eagle", "target", "draft")
# Our runner's per-engine limit (not an upstream fact): a 70B engine takes tens of minutes on an H100.
DEFAULT_BUILD_TIMEOUT_S = 3 * 3600


@dataclass(frozen=True)
class BuildOptions:
    """What the user asks for; None means "pick the documented default"."""

    role: str = "auto"
    gpu: str = "h100"
    max_batch_size: int = 64
    max_input_len: int | None = None   # default: max_seq_len // 2
    max_seq_len: int | None = None     # default: min(8192, what the model's positions allow)
    max_num_tokens: int | None = None  # default: 8192, clipped/raised as trtllm-build would
    max_draft_len: int | None = None   # EAGLE: from the checkpoint; target/draft: 8
    draft_logits: bool = False         # logits-based acceptance (draft-target) -> generation logits
    max_beam_width: int = 1
    gather_context_logits: bool = False
