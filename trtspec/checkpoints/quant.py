"""The tensors and config block of a quantized TRT-LLM checkpoint (trtllm.md §3), from config alone.

A quantized checkpoint is the plain layout (layout.py, eagle.py) with every quantizable linear
X in {attention.qkv, attention.dense, mlp.fc, mlp.gate, mlp.proj, drafter.fc} rewritten:

| quant_algo          | X.weight                    | X.weights_scaling_factor | X.activation_scaling_factor | X.prequant_scaling_factor |
|---------------------|-----------------------------|--------------------------|-----------------------------|---------------------------|
| FP8                 | float8_e4m3fn [out, in]     | f32 [1]                  | f32 [1]                     | -                         |
| W8A8_SQ_PER_CHANNEL | int8 [out, in]              | f32 [out]                | f32 [1]                     | model dtype [in]          |
| W8A16               | model dtype [out, in]       | -                        | -                           | -                         |
| W4A16_AWQ           | int8 [out/2, in] (int4 x 2) | f32 [out, in/group]      | -                           | model dtype [in]          |

plus `attention.kv_cache_scaling_factor` f32 [1] on every attention (EAGLE drafter layers too)
when `kv_cache_quant_algo` is set. lm_head and the embeddings stay in the model dtype.

Dequantization (what the runtime does with these): FP8 `w = weight.float() * wsf`; SQ
`w = weight.float() * wsf[:, None]`, and the layer's input is multiplied by `prequant` (the
SmoothQuant smoothing; the weight was divided by it); AWQ unpacks `weight` (byte [r, c] holds
rows 2r (low nibble) and 2r+1 (high nibble) of column c, signed int4) then
`w = q * wsf.repeat_interleave(group, dim=1)`, input multiplied by `prequant`. Activation scales
are static per-tensor input scales (amax / 448 for FP8, amax / 127 for INT8).

W8A16 keeps full-precision weights: trtllm-build quantizes every `*{qkv,dense,fc,proj,gate}.weight`
that is not int8 itself (`preprocess_weights`), as ModelOpt's own int8_wo export relies on (§3.7).
AWQ scales are float32 because that is what ModelOpt's export writes (TRT-LLM casts them to the
model dtype when it transposes them at build time); the docs' "model dtype" is not what ships.

The `quantization` block itself is parsed once, into `scheme.QuantScheme`.

Mixed precision: a linear matched by `exclude_modules` (QuantScheme.is_excluded, §3.3) stays a
plain model-dtype weight without scales. trtspec writes excluded linears by their *exact* names,
because trtllm-build's fuse_gate_mlp decides whether the fused mlp.gate + mlp.fc GEMM is FP8 by
exact membership of `...mlp.fc` in the list, not by fnmatch: a wildcard that excludes mlp.fc and
mlp.gate would still get an FP8 fused GEMM built from float weights. check_gate_pairs refuses such
checkpoints.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..errors import TrtspecError
from ..upstream import trtllm
from .layout import Source, TensorPlan
from .scheme import PACKED_INT4_ALGOS, QuantScheme
from .sharding import Shard

# Linear modules TRT-LLM's quantize() replaces (ColumnLinear/RowLinear), by TRT-LLM name.
QUANTIZED_LINEARS = ("attention.qkv", "attention.dense", "mlp.fc", "mlp.gate", "mlp.proj", "drafter.fc")
ROW_LINEARS = ("attention.dense", "mlp.proj")
QUANT_SOURCE = "quant"  # the Source.model of tensors computed by the quantized exporter


def exclude_modules(eagle: bool) -> list[str]:
    """An explicit list replaces TRT-LLM's defaults (§3.3, §9.13), so restate them, plus the
    exact `lm_head` ModelOpt writes and, for EAGLE, every clone's lm_head."""
    mods = ["lm_head", *trtllm.DEFAULT_EXCLUDE_MODULES]
    return mods + ["eagle_nets.*.lm_head"] if eagle else mods


def quantization_block(scheme: QuantScheme, eagle: bool = False) -> dict:
    """config.json `quantization` (only QuantConfig keys, §3.1); EAGLE repeats it in eagle_net_config."""
    block: dict = {"quant_algo": scheme.quant_algo, "kv_cache_quant_algo": scheme.kv_cache_quant_algo}
    if scheme.quant_algo == "W4A16_AWQ":
        block.update(group_size=scheme.group_size, has_zero_point=False, pre_quant_scale=True)
    if scheme.quantized:
        mods = exclude_modules(eagle)
        block["exclude_modules"] = mods + [m for m in scheme.exclude if m not in mods]
    return block


def check_exclusions(scheme: QuantScheme, cfg: dict, where: str) -> None:
    """A quantized checkpoint must keep lm_head (and EAGLE's clones of it) out of quantize():
    their weights stay in the model dtype and carry no scales."""
    if not scheme.quant_algo:
        return
    heads = ["lm_head"]
    if cfg.get("architecture") == trtllm.EAGLE_ARCHITECTURE:
        heads += [f"eagle_nets.{i}.lm_head" for i in range(int(cfg.get("num_eagle_layers", trtllm.EAGLE_CONFIG_DEFAULT_NUM_LAYERS)))]
    for head in heads:
        if not scheme.is_excluded(head):
            raise TrtspecError(f"{where}: quantization.exclude_modules {list(scheme.exclude)} does not exclude "
                               f"'{head}'; TRT-LLM would quantize it but its weight is unquantized (add \"*lm_head\")")


def check_gate_pairs(plans: list[TensorPlan], scheme: QuantScheme, where: str) -> None:
    """mlp.fc and mlp.gate are one GEMM in the engine (fuse_gate_mlp, FP8 only fuses quantized):
    both quantized, or both excluded with `...mlp.fc` named exactly (see module doc)."""
    if scheme.quant_algo != "FP8":
        return
    names = {linear_of(p.name) for p in plans} - {None}
    for fc in sorted(n for n in names if n.endswith(".mlp.fc")):
        gate = fc[: -len("fc")] + "gate"
        if gate not in names:
            continue
        if scheme.quantizes(fc) != scheme.quantizes(gate):
            raise TrtspecError(f"{where}: quantization.exclude_modules excludes only one of '{fc}' and '{gate}'; "
                               "trtllm-build fuses them into one GEMM, so exclude both or neither")
        if not scheme.quantizes(fc) and fc not in scheme.exclude:
            raise TrtspecError(f"{where}: quantization.exclude_modules matches '{fc}' only by a wildcard; "
                               "trtllm-build's fuse_gate_mlp tests the exact name and would build an FP8 GEMM "
                               f"from its float weights: list \"{fc}\" itself")


def linear_of(name: str) -> str | None:
    """'transformer.layers.3.mlp.fc.weight' -> 'transformer.layers.3.mlp.fc' when X is quantized."""
    if not name.endswith(".weight") or name.endswith("lm_head.weight"):
        return None
    base = name[: -len(".weight")]
    return base if base.endswith(QUANTIZED_LINEARS) else None


def is_row(linear: str) -> bool:
    return linear.endswith(ROW_LINEARS)


def quant_tensors(linear: str, out: int, inp: int, scheme: QuantScheme) -> list[tuple[str, tuple, torch.dtype | None]]:
    """(name, full shape, dtype) of the tensors that replace `linear`.weight (dtype None = model dtype)."""
    algo, f32 = scheme.quant_algo, torch.float32
    if algo == "FP8":
        return [(linear + ".weight", (out, inp), torch.float8_e4m3fn),
                (linear + ".weights_scaling_factor", (1,), f32),
                (linear + ".activation_scaling_factor", (1,), f32)]
    if algo == "W8A8_SQ_PER_CHANNEL":
        return [(linear + ".weight", (out, inp), torch.int8),
                (linear + ".weights_scaling_factor", (out,), f32),
                (linear + ".activation_scaling_factor", (1,), f32),
                (linear + ".prequant_scaling_factor", (inp,), None)]
    if algo in PACKED_INT4_ALGOS:
        return [(linear + ".weight", (out // 2, inp), torch.int8),
                (linear + ".weights_scaling_factor", (out, inp // scheme.group_size), f32),
                (linear + ".prequant_scaling_factor", (inp,), None)]
    return [(linear + ".weight", (out, inp), None)]  # W8A16 / KV-only: the weight as is


def quant_plans(plans: list[TensorPlan], scheme: QuantScheme, shard: Callable[[str], Shard]) -> list[TensorPlan]:
    """The plain plans with each quantizable linear's weight replaced by its quantized tensors
    (right after one another, weight first) and a KV scale after each attention's qkv.

    `shard(name)` is `shard_for` bound to the tensor's decoder spec and this quant_algo. New
    tensors read from Source(QUANT_SOURCE, name): the exporter computes them; the validator only
    needs names, shapes and dtypes."""
    if not scheme.quantized:
        return list(plans)
    quantize_weights = scheme.quant_algo not in (None, "W8A16")
    out: list[TensorPlan] = []
    for plan in plans:
        linear = linear_of(plan.name) if quantize_weights else None
        if linear is None or not scheme.quantizes(linear):
            out.append(plan)
        else:
            rows, cols = plan.shape
            for name, shape, dtype in quant_tensors(linear, rows, cols, scheme):
                out.append(TensorPlan(name, shape, shard(name), (Source(QUANT_SOURCE, name, shape),), dtype))
        if scheme.kv_cache_quant_algo and plan.name.endswith("attention.qkv.weight"):
            name = plan.name[: -len("qkv.weight")] + "kv_cache_scaling_factor"
            out.append(TensorPlan(name, (1,), shard(name), (Source(QUANT_SOURCE, name, (1,)),), torch.float32))
    return out


def check_group_size(plans: list[TensorPlan], scheme: QuantScheme, tp: int, where: str) -> None:
    """AWQ quantizes groups of `group_size` input channels: every quantized linear's input dim,
    and a row-parallel linear's per-rank input dim (its input is what TP splits), must be a
    multiple of it; the int4 pairs packed along the output dim need an even row count per rank."""
    if scheme.quant_algo not in PACKED_INT4_ALGOS:
        return
    g = scheme.group_size
    if g <= 0:
        raise TrtspecError(f"{where}: AWQ group size must be positive, got {g}")
    for plan in plans:
        linear = linear_of(plan.name)
        if linear is None or not scheme.quantizes(linear):
            continue
        out, inp = plan.shape
        per_rank = inp // tp if is_row(linear) else inp
        if inp % g or per_rank % g or (is_row(linear) and inp % tp):
            what = f"input dim {inp}" + (f" ({per_rank} per rank at tp={tp})" if per_rank != inp else "")
            raise TrtspecError(f"{where}: AWQ group size {g} does not divide the {what} of '{linear}'; "
                               f"use a group size that divides it (64 or 128 are TRT-LLM's kernels' sizes) "
                               "or another format (fp8, int8_sq, w8a16)")
        if plan.shard.rank_shape(plan.shape, tp)[0] % 2 or (plan.shard.kind == "qkv" and plan.shard.head_size % 2):
            raise TrtspecError(f"{where}: '{linear}' has an odd number of output rows per rank; int4 "
                               "weights are packed in row pairs")
