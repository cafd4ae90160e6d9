"""ModelOpt called directly, as its own examples do (hf_ptq: calibrate, cast, export_hf_checkpoint):
the oracle trtspec's unified HF export and the runtime on it are checked against (see
tests/runtime/test_hf_quant.py for `as_deployed`)."""

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


FP8_MAX = 448.0


def as_deployed(model, dec: Decoder, kv: str | None):
    """The fake-quant model with what the deployment runs (tests/runtime/test_hf_quant.py, `exact`): float16 rounding,
    the weights as the PyTorch backend loads them (the runtime loader's fused, requantized FP8
    weights, checked on their own in test_fused_requantization; their fake quant is switched off,
    they are on the FP8 grid already) and the backend's FP8 KV scale."""
    rope = {n: b.clone() for n, b in model.named_buffers() if n.endswith("inv_freq")}  # not checkpoint tensors
    model.to(torch.float16).to(torch.float32)
    for n, b in rope.items():
        model.get_buffer(n).copy_(b)
    spec = dec.spec
    q, k = spec.num_heads * spec.head_size, spec.num_kv_heads * spec.head_size
    with torch.no_grad():
        for layer, lw in zip(model.model.layers, dec.layers):
            a, m = layer.self_attn, layer.mlp
            pairs = list(zip((a.q_proj, a.k_proj, a.v_proj), lw.qkv.weight.split([q, k, k])))
            pairs += [(a.o_proj, lw.dense.weight), (m.gate_proj, lw.fc.weight), (m.up_proj, lw.gate.weight),
                      (m.down_proj, lw.proj.weight)]
            for module, w in pairs:
                module.weight.copy_(w)
                module.weight_quantizer.disable()
            if kv:
                a.k_bmm_quantizer.amax = torch.tensor(FP8_MAX)
                a.v_bmm_quantizer.amax = torch.tensor(FP8_MAX)
    return model
