"""Mixed precision: which linears stay in the model dtype, named by the user or chosen by measurement.

Static per-tensor FP8 costs a small model like SmolLM2-135M a few points of top-1 agreement, and
the loss is not spread evenly: a few linears carry most of it. TRT-LLM expresses "this linear is
not quantized" with `quantization.exclude_modules` (checkpoints/quant.py); ModelOpt expresses it
by disabling that linear's quantizers, and its own export then lists the linear there. Both are
driven from here.

Units. The choice is made per *engine GEMM*, so a unit is a TRT-LLM linear (attention.qkv,
attention.dense, mlp.proj), except that mlp.fc and mlp.gate are one unit, named by mlp.fc:
trtllm-build fuses them into one GEMM and decides its precision by the name of mlp.fc alone.
Each unit maps to the HF modules whose quantizers feed it (q/k/v_proj for qkv, up/gate_proj for
fc + gate).

`exclude` patterns (fnmatch on TRT-LLM module names, e.g. `transformer.layers.0.*`, `*.mlp.proj`)
is resolved against the model's units here, before any work, and written as exact names.

`keep_sensitive: N` measures after calibration (sensitivity.py) and keeps the N units whose own
quantization costs the most.
"""

from __future__ import annotations

import fnmatch

from ..checkpoints.layout import TensorPlan
from ..checkpoints.quant import linear_of
from ..errors import TrtspecError

# Formats whose weights TRT-LLM quantizes per module by `exclude_modules`. W8A16 is quantized at
# build time by tensor name, whatever exclude_modules says (trtllm.md §3.7).
MIXED_ALGOS = ("FP8", "W8A8_SQ_PER_CHANNEL", "W4A16_AWQ")


def unit_of(linear: str) -> str:
    """'...mlp.gate' -> '...mlp.fc' (one GEMM in the engine); anything else is its own unit."""
    return linear[: -len("gate")] + "fc" if linear.endswith(".mlp.gate") else linear


def linear_units(plans: list[TensorPlan]) -> dict[str, list[str]]:
    """{unit: [TRT-LLM linear names]} in plan order, lm_head and embeddings left out."""
    units: dict[str, list[str]] = {}
    for plan in plans:
        linear = linear_of(plan.name)
        if linear is not None:
            units.setdefault(unit_of(linear), []).append(linear)
    return units


def hf_modules(plans: list[TensorPlan], linears: set[str]) -> list[str]:
    """HF module names ('model.layers.0.mlp.down_proj') whose weights make up `linears`."""
    out = []
    for plan in plans:
        if linear_of(plan.name) in linears:
            out += [s.name[: -len(".weight")] for s in plan.sources]
    return out


def unit_modules(plans: list[TensorPlan]) -> dict[str, list[str]]:
    """{unit: HF module names} (what a sensitivity measurement toggles)."""
    return {u: hf_modules(plans, set(ls)) for u, ls in linear_units(plans).items()}


def resolve_excludes(patterns: list[str], plans: list[TensorPlan], algo: str | None,
                     field: str = "quantization.exclude") -> tuple[str, ...]:
    """Exact TRT-LLM linear names matched by `patterns`, a matched unit always whole; refused when they
    match every unit (nothing left to quantize)."""
    patterns = [p.strip() for p in patterns if p and p.strip()]
    if not patterns:
        return ()
    check_mixed_algo(algo, field)
    units = linear_units(plans)
    chosen: list[str] = []
    for pat in patterns:
        hits = [u for u, ls in units.items() if any(fnmatch.fnmatchcase(x, pat) for x in ls)]
        if not hits:
            example = next(iter(units), "transformer.layers.0.mlp.proj")
            raise TrtspecError(f"{field}: {pat!r} matches no quantizable linear; patterns are fnmatch on TRT-LLM "
                               f"module names such as '{example}' (attention.qkv, attention.dense, mlp.fc, mlp.gate, "
                               "mlp.proj)")
        chosen += [u for u in hits if u not in chosen]
    if len(chosen) == len(units):  # ModelOpt would refuse a config that quantizes no weight, from deep inside
        raise TrtspecError(f"{field}: {patterns} exclude every quantizable linear ({len(units)} GEMMs); nothing "
                           "would be quantized. Exclude fewer linears, or convert the model unquantized "
                           "(trtspec convert)")
    return expand_units(chosen, units)


def quantized_units(plans: list[TensorPlan], layout) -> list[str]:
    """The units `layout` (a QuantScheme) still quantizes whole: what keep_sensitive measures."""
    return [u for u, ls in linear_units(plans).items() if all(layout.quantizes(x) for x in ls)]


def check_keep_count(count: int, plans: list[TensorPlan], layout) -> None:
    """Refuse, before calibrating and measuring, a keep_sensitive that would leave no GEMM quantized:
    the same outcome resolve_excludes refuses for patterns."""
    left = len(quantized_units(plans, layout))
    if count >= left:
        raise TrtspecError(f"quantization.keep_sensitive: {count} would keep every one of the {left} GEMMs still "
                           f"quantized in the model dtype; nothing would be quantized. Keep fewer than {left}, or "
                           "convert the model unquantized (trtspec convert)")


def expand_units(chosen: list[str], units: dict[str, list[str]]) -> tuple[str, ...]:
    """Units -> their TRT-LLM linears, in model order."""
    keep = set(chosen)
    return tuple(x for u, ls in units.items() if u in keep for x in ls)


def check_mixed_algo(algo: str | None, field: str) -> None:
    """`field`: the option that asked for unquantized linears (quantization.exclude or .keep_sensitive)."""
    if algo not in MIXED_ALGOS:
        why = ("W8A16 weights are quantized by trtllm-build by tensor name, whatever exclude_modules says"
               if algo == "W8A16" else "nothing but the KV cache is quantized")
        raise TrtspecError(f"{field}: keeping linears unquantized needs a calibrated weight format (fp8, int8_sq, "
                           f"w4a16_awq); {why}")


def exclusion_config(modules: list[str]) -> list[dict]:
    """ModelOpt quant_cfg entries that disable the input/weight quantizers of HF `modules` (the
    k/v bmm quantizers of the attention are separate modules and stay on: TRT-LLM quantizes the
    KV cache of every attention, excluded or not)."""
    return [{"quantizer_name": f"{m}.*", "enable": False} for m in modules]
