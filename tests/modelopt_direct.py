"""ModelOpt called directly, as its own examples do (hf_ptq: calibrate, cast, export_hf_checkpoint):
the oracle trtspec's unified HF export and the runtime on it are checked against."""

from __future__ import annotations

import copy
from pathlib import Path

import torch


def calibrated(hf_dir: Path, prompts: list[list[int]], kv_fp8: bool, fmt_cfg: str = "FP8_DEFAULT_CFG"):
    """The HF model in float32, quantized by mtq.quantize with ModelOpt's recipe (+ FP8_KV_CFG),
    calibrated with one forward per prompt."""
    import modelopt.torch.quantization as mtq
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    cfg = copy.deepcopy(getattr(mtq, fmt_cfg))
    if kv_fp8:
        cfg["quant_cfg"] = cfg["quant_cfg"] + copy.deepcopy(mtq.FP8_KV_CFG["quant_cfg"])

    def loop(m):
        with torch.no_grad():
            for p in prompts:
                m(torch.tensor([p]))

    return mtq.quantize(model, cfg, loop)


def export(model, out: Path, dtype: torch.dtype = torch.float16) -> None:
    from modelopt.torch.export import export_hf_checkpoint

    model.to(dtype)
    export_hf_checkpoint(model, dtype=dtype, export_dir=out)
