"""The options of `trtspec quantize`: one model, the recipe's `quantization:` section (with the
report, composed in trtspec.quality.options), the library entry's argument (calib.quantize.quantize)
and the source of the CLI flags' defaults and help. Light: pydantic only.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from ..options import ONE_DEVICE, StageOptions
from ..upstream.trtllm import AWQ_DEFAULT_GROUP_SIZE

Format = Literal["fp8", "int8_sq", "w8a16", "w4a16_awq"]


class QuantizeOptions(StageOptions):
    """What to quantize to, on which calibration prompts, and which linears to keep unquantized."""
    section = "quantization"
    format: Format = Field(description="fp8 | int8_sq | w8a16 | w4a16_awq (all run on H100).")
    kv_cache: Optional[Literal["fp8", "int8"]] = Field(None, description="fp8 | int8: quantize the KV cache too.")
    draft_format: Literal["same", "fp8", "int8_sq", "w8a16", "w4a16_awq", "none"] = Field(
        "same", description="The draft's format: same (as format), one of the formats, or none.")
    calib: Optional[dict[str, str]] = Field(None, description="Calibration workloads NAME: SOURCE (mt-bench, "
                                                              "humaneval or a .jsonl/.csv); default: mt-bench, in a "
                                                              "recipe the recipe's workloads.")
    samples: int = Field(512, ge=1, description="Calibration prompts in all, split evenly over the sources.")
    seq_len: int = Field(512, ge=1, description="Tokens kept per calibration prompt (its first ones).")
    seed: int = Field(0, description="Seed of the prompt sampling.")
    awq_group_size: int = Field(AWQ_DEFAULT_GROUP_SIZE, ge=1, description="w4a16_awq: input channels per scale "
                                                                          "group.")
    exclude: list[str] = Field(default_factory=list, description="Keep matching linears in the model dtype "
                               "(fnmatch on TRT-LLM names, e.g. 'transformer.layers.0.*' or '*.mlp.proj'); written "
                               "to quantization.exclude_modules. Plain decoders only.")
    keep_sensitive: int = Field(0, ge=0, description="Also keep the N most sensitive GEMMs in the model dtype, "
                                                     "measured after calibration on calibration prompts.")
    sensitivity_samples: int = Field(8, ge=1, description="keep_sensitive: calibration prompts the measurement "
                                                          "runs on.")
    sensitivity_seq_len: int = Field(64, ge=2, description="keep_sensitive: tokens kept per measurement prompt.")
    device: str = Field("cpu", description="Where ModelOpt's calibration forward passes run: cpu, cuda or cuda:N "
                        "(the model in float32 on that device; the checkpoint is exported from the CPU).")
    output_format: Literal["trtllm", "hf"] = Field(
        "trtllm", description="trtllm: a TensorRT-LLM engine-flow checkpoint (trtllm-build); hf: ModelOpt's unified "
                              "Hugging Face checkpoint (hf_quant_config.json) for the PyTorch / LLM-API backend "
                              "(fp8 or w4a16_awq; a plain decoder or a draft-target pair, no EAGLE head).")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not ONE_DEVICE.fullmatch(v):
            raise ValueError(f"{v!r} is not a device (expected cpu, cuda or cuda:N)")
        return v

    @property
    def mixed(self) -> bool:
        return bool(self.exclude) or self.keep_sensitive != 0
