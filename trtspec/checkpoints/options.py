"""The options of `trtspec convert` (and the conversion part of `trtspec quantize`): one model.

ConvertOptions is the recipe's top-level `dtype`, `tp`, `eagle` and `allow_pickle` keys (the recipe
inherits it), the source of the CLI flags' defaults and help, and what the converters are called
with. EAGLE defaults are TensorRT-LLM's converter defaults (trtspec.upstream). Light: pydantic only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..options import StageOptions, flag_of
from ..upstream.trtllm import EAGLE_DEFAULT_MAX_DRAFT_LEN, EAGLE_DEFAULT_MAX_NON_LEAVES, EAGLE_DEFAULT_NUM_LAYERS


class EagleOptions(StageOptions):
    """EagleForCausalLM tree limits written into the checkpoint (eagle_net_config)."""
    section = "eagle"
    max_draft_len: int = Field(EAGLE_DEFAULT_MAX_DRAFT_LEN, ge=1, description="EAGLE: maximum number of tree nodes.")
    num_eagle_layers: int = Field(EAGLE_DEFAULT_NUM_LAYERS, ge=1,
                                  description="EAGLE: tree depth (drafter invocations per step).")
    max_non_leaves: int = Field(EAGLE_DEFAULT_MAX_NON_LEAVES, ge=1,
                                description="EAGLE: maximum non-leaf nodes per tree level.")


class ConvertOptions(StageOptions):
    """How HF weights become a TRT-LLM checkpoint."""
    section = "convert"
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(
        "auto", description="float16 | bfloat16 | float32 | auto (the HF dtype).")
    tp: int = Field(1, ge=1, description="Tensor-parallel size (number of rank files).")
    eagle: EagleOptions = Field(default_factory=EagleOptions, description="EAGLE tree limits.")
    allow_pickle: bool = Field(False, description="Allow a pytorch_model.bin EAGLE head (weights_only=True).")


# The CLI flattens `eagle` into its own flags (--max-draft-len, not --eagle.max-draft-len): from_cli's map.
EAGLE_FLAGS = {f"eagle.{name}": flag_of(name) for name in EagleOptions.model_fields}
