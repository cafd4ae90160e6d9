"""The options of `trtspec generate` (one prompt through the PyTorch runtime): the source of the
CLI flags' defaults and help, passed to runtime.generate.run_generate field by field. Light:
pydantic only.
"""

from __future__ import annotations

from typing import Literal, Optional, Union, get_args

from pydantic import Field, field_validator

from ..options import ONE_DEVICE, Sampling, StageOptions
from ..upstream.trtllm import DTYPES  # the runtime computes in the dtypes a checkpoint is written in

# How an FP8 checkpoint's linears multiply (runtime/quant.py): one setting for generate and profile.
Fp8Gemm = Literal["auto", "scaled_mm", "emulate"]
FP8_GEMMS = get_args(Fp8Gemm)
FP8_GEMM_HELP = ("How FP8 checkpoints' linears multiply: auto (FP8 GEMMs, torch._scaled_mm, on CUDA GPUs of compute "
                 "capability >= 8.9; the quantize-dequantize emulation elsewhere), scaled_mm (FP8 GEMMs on any device "
                 "torch runs them on), emulate (always the emulation).")


class RuntimeDevice(StageOptions):
    """Where the PyTorch runtime computes, and in which dtype: the fields of every stage that runs
    it (generate, profile, measure-cost). Checked here as text (no torch import); runtime/device.py
    checks the devices against the torch at hand."""
    device: str = Field("cpu", description="Device of the PyTorch runtime: cpu, cuda, cuda:N, or several "
                        "comma-separated (cuda:0,cuda:1: the layers are placed over them by weight bytes).")
    dtype: Optional[str] = Field(None, description="Compute dtype: float32, bfloat16 or float16. null: float32 on "
                                 "cpu (the reference numerics), bfloat16 on a GPU.")
    compile_layers: bool = Field(False, description="Run the decoder layers through torch.compile (opt-in: slower "
                                 "on a CPU, 0.80x; check with scripts/bench_compile.py that it pays on your GPU).")
    fp8_gemm: Fp8Gemm = Field("auto", description=FP8_GEMM_HELP)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        names = [n.strip() for n in v.split(",")]
        bad = [n for n in names if not ONE_DEVICE.fullmatch(n)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a device (expected cpu, cuda or cuda:N, comma-separated for several)")
        return ",".join(names)

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and v not in DTYPES:
            raise ValueError(f"{v!r} is not one of {', '.join(DTYPES)}")
        return v


class GenerateOptions(Sampling, RuntimeDevice):
    """How one prompt is decoded: greedy or sampled (the Sampling fields), plain, draft-target, or
    EAGLE tree (static or dynamic), and with which accept rule at temperature > 0."""
    section = "generate"
    accept_rule: Optional[str] = Field(None, description="Accept rule at temperature > 0: exact_match (default, "
                                       "lossless), rejection_sampling (draft-target; the draft samples), "
                                       "exact_match_resample or typical_acceptance (TensorRT-LLM engine rules, "
                                       "lossy).")
    draft_len: Optional[int] = Field(None, ge=1, description="Draft tokens per step (draft-target, EAGLE-3 head); "
                                     "unset: 4. Refused without a draft, where it would be ignored.")
    eagle_choices: Optional[list[list[int]]] = Field(None, description="EAGLE tree, e.g. [[0],[1],[0,0]].")
    eagle_dynamic_top_k: Optional[int] = Field(None, description="EAGLE-2 dynamic tree with this top-k (instead of "
                                                                 "eagle_choices).")
    chat: bool = Field(False, description="Render the prompt with the tokenizer's chat template.")
    max_new_tokens: int = Field(64, description="Tokens to generate.")
    ignore_eos: bool = Field(False, description="Do not stop at the end-of-sequence token.")
    min_tokens: int = Field(0, ge=0, description="No end-of-sequence before this many new tokens: the end "
                                                 "ids' logits are masked until then (TensorRT-LLM's min_tokens).")
    stop_words: list[Union[str, list[int]]] = Field(
        [], description="End the request on the token that completes one of these (kept in the output): each a "
        "string, tokenized with the checkpoint's tokenizer without special tokens (as Triton's preprocessing "
        "tokenizes stop_words), or a list of token ids (TensorRT-LLM's stop_words_list).")
    bad_words: list[Union[str, list[int]]] = Field(
        [], description="Never emit these: the last token of each is banned where the tokens before it match; each "
        "a string (tokenized as stop_words) or a list of token ids (TensorRT-LLM's bad_words_list).")
    batch_invariant: bool = Field(False, description="Verify each draft token as a one-token decode (no speedup): "
                                                     "speculation then reproduces greedy bit for bit on FP8/INT8 "
                                                     "checkpoints too.")

    @field_validator("stop_words", "bad_words", mode="before")
    @classmethod
    def _words(cls, v):
        """One line naming the bad item, not pydantic's two union branches' complaints."""
        for i, w in enumerate(v if isinstance(v, list) else ()):
            if not (isinstance(w, str) or isinstance(w, list) and all(type(t) is int for t in w)):
                raise ValueError(f"item {i} is {w!r}; expected a string or a list of token ids")
        return v

    def sampling(self) -> Sampling:
        """The Sampling part of these options."""
        return Sampling.model_validate(self.model_dump(include=set(Sampling.model_fields)))
