"""Run ModelOpt's post-training quantization and read back what it calibrated.

`calibrate` is `mtq.quantize(model, cfg, forward_loop)` with a forward loop over our prompts,
one sequence at a time (batch of 1, no padding). `collect` turns the quantizers ModelOpt attached
into plain tensors (`LinearQuant`, `KvQuant`) so the exporter (export.py) is ordinary torch math
that never touches a ModelOpt object. What it reads, per quantized nn.Linear:

- `weight`: the module's weight *after* calibration. SmoothQuant and AWQ fold their smoothing into
  it (w * s, with the input multiplied by 1/s at run time), so it is not the HF weight on disk;
- `weight_quantizer.amax`: max |w| per tensor (FP8), per output channel (INT8 SQ, [out]) or per
  group of input channels (AWQ, [out, in/group]);
- `input_quantizer.amax`: max |x| of the (smoothed) input, per tensor, when activations are
  quantized (FP8, SQ);
- `input_quantizer.pre_quant_scale`: the smoothing factor the input is multiplied by (SQ, AWQ);

and per attention, `k_bmm_quantizer.amax` / `v_bmm_quantizer.amax`: max |k|, |v| as they enter
the KV cache (after RoPE).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from ..errors import TrtspecError


@dataclass
class LinearQuant:
    weight: torch.Tensor  # [out, in], the calibrated (smoothed) weight, model dtype
    weight_amax: torch.Tensor | None  # [1] | [out] | [out, in/group]; None: weight not quantized
    input_amax: torch.Tensor | None  # [1]; None: activations not quantized
    pre_quant_scale: torch.Tensor | None  # [in]
    group_size: int = 0  # AWQ block size along the input dim; 0 otherwise


@dataclass
class KvQuant:
    k_amax: torch.Tensor  # [1]
    v_amax: torch.Tensor  # [1]


@dataclass
class QuantState:
    """Calibrated quantizer state of one model, keyed by module name ('model.layers.0.mlp.up_proj',
    'model.layers.0.self_attn'), names relative to the module `collect` was given."""

    linears: dict[str, LinearQuant]
    kv: dict[str, KvQuant]


def calib_device(name: str) -> torch.device:
    """The torch device `quantization.device` names, refused by field name when this torch has no such GPU."""
    d = torch.device(name)
    if d.type == "cuda" and not torch.cuda.is_available():
        raise TrtspecError(f"quantization.device: {name!r} but torch sees no CUDA device (torch {torch.__version__})")
    if d.type == "cuda" and d.index is not None and d.index >= torch.cuda.device_count():
        raise TrtspecError(f"quantization.device: {name!r} but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return d


def calibrate(model: nn.Module, cfg: dict, prompts: list[list[int]], progress: bool = True,
              device: str = "cpu") -> float:
    """Quantize `model` in place with ModelOpt config `cfg`, calibrating on `prompts` (token ids,
    one forward each) on `device`. The model (weights and the quantizers' amax / pre-quant scales)
    is back on the CPU afterwards: export reads CPU tensors, whatever device calibrated. Returns the
    wall time in seconds (the moves included)."""
    # lazy: modelopt takes ~7 s to import, and `trtspec run` imports calib even when quantize is skipped
    import modelopt.torch.quantization as mtq

    dev = calib_device(device)
    check_prompt_ids(model, prompts)

    def forward_loop(m: nn.Module) -> None:
        with torch.no_grad():
            for i, ids in enumerate(prompts):
                run_backbone(m, torch.tensor([ids], dtype=torch.long, device=dev))
                if progress and (i + 1) % 16 == 0:
                    print(f"  calibrated {i + 1}/{len(prompts)} prompts", flush=True)

    start = time.perf_counter()
    model.eval()
    register_nested_attention(model)
    model.to(dev)
    try:
        mtq.quantize(model, cfg, forward_loop)
    finally:
        model.to("cpu")
    return time.perf_counter() - start


def check_prompt_ids(model: nn.Module, prompts: list[list[int]]) -> None:
    """Every calibration token id must index the model's embedding (an EAGLE wrapper's base's):
    refused by field here, not as an IndexError from inside the embedding lookup mid-calibration."""
    hf = getattr(model, "base", model)
    if not isinstance(hf, PreTrainedModel):
        return
    vocab = hf.get_input_embeddings().num_embeddings
    for i, ids in enumerate(prompts):
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise TrtspecError(f"quantization.calib: calibration prompt #{i} holds token id {bad[0]}, outside the "
                               f"model's vocabulary [0, {vocab}) (a tokenizer that does not belong to the model?)")


def run_backbone(model: nn.Module, ids: torch.Tensor) -> None:
    """Forward without the LM head where there is one: lm_head is never quantized, and at a 49k
    vocabulary it is a quarter of a 135M model's FLOPs. No KV cache is built either."""
    if hasattr(model, "lm_head") and isinstance(getattr(model, "model", None), nn.Module):
        model.model(input_ids=ids, use_cache=False)
    else:
        model(ids)


def register_nested_attention(model: nn.Module) -> None:
    """ModelOpt adds K/V quantizers to an HF model's attention classes only when the model it
    is given *is* an HF PreTrainedModel; our EAGLE wrapper holds one, so register them here
    (the head's layers are the same LlamaAttention class, so they get quantizers too)."""
    # lazy: modelopt (see calibrate)
    from modelopt.torch.quantization.plugins.huggingface import register_hf_attentions_on_the_fly

    for module in model.modules():
        if module is not model and isinstance(module, PreTrainedModel):
            register_hf_attentions_on_the_fly(module)


def _amax(quantizer) -> torch.Tensor | None:
    if quantizer is None or not quantizer.is_enabled:
        return None
    amax = getattr(quantizer, "amax", None)
    return None if amax is None else amax.detach().float()


def _linear_quant(module: nn.Module) -> LinearQuant:
    out, inp = module.weight.shape
    wq, iq = getattr(module, "weight_quantizer", None), getattr(module, "input_quantizer", None)
    w_amax, group = _amax(wq), 0
    if w_amax is not None:
        sizes = getattr(wq, "block_sizes", None)
        if sizes:
            group = int(sizes[-1])
            w_amax = w_amax.reshape(out, inp // group)
        elif wq.axis is None:
            w_amax = w_amax.reshape(1)
        else:
            w_amax = w_amax.reshape(out)
    in_amax = _amax(iq)
    pqs = getattr(iq, "_pre_quant_scale", None) if iq is not None else None
    return LinearQuant(module.weight.detach(), w_amax, None if in_amax is None else in_amax.reshape(1),
                       None if pqs is None else pqs.detach().reshape(inp), group)


def collect(model: nn.Module) -> QuantState:
    """Read every quantized linear and attention of `model` (see module doc)."""
    linears: dict[str, LinearQuant] = {}
    kv: dict[str, KvQuant] = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and hasattr(module, "weight_quantizer"):
            linears[name] = _linear_quant(module)
        k, v = getattr(module, "k_bmm_quantizer", None), getattr(module, "v_bmm_quantizer", None)
        if k is not None and v is not None and k.is_enabled:
            k_amax, v_amax = _amax(k), _amax(v)
            if k_amax is None or v_amax is None:
                raise TrtspecError(f"{name}: the KV quantizers saw no data during calibration")
            kv[name] = KvQuant(k_amax.reshape(1), v_amax.reshape(1))
    return QuantState(linears, kv)


def unsmooth(linear: nn.Module) -> None:
    """Undo SmoothQuant's / AWQ's smoothing of a quantized linear that will be written unquantized.
    Calibrating them moves a per-input-channel scale s out of the weight into the input: the
    module then holds w / s and its input quantizer multiplies x by s (pre_quant_scale), which
    still happens with the quantizer disabled. A plain linear of the checkpoint has no such
    input scale, so it must hold w itself: multiply s back into the weight's columns and drop it."""
    q = getattr(linear, "input_quantizer", None)
    s = getattr(q, "_pre_quant_scale", None) if q is not None else None
    if s is None:
        return
    with torch.no_grad():
        w = linear.weight
        w.copy_((w.float() * s.float().reshape(1, -1).to(w.device)).to(w.dtype))
    q._enable_pre_quant_scale = False
    del q._pre_quant_scale


def plain_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's own tensors (quantizer buffers left out), for the checkpoint plans."""
    return {n: t.detach() for n, t in model.state_dict().items() if "_quantizer" not in n}
