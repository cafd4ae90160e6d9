"""The steps every quantize entry point shares: load the HF model, calibrate, write the plans.

`write_quantized_decoder` is the whole pipeline of one decoder (a plain target, or each model of
a draft-target pair); eagle_quant.py is the EAGLE variant. `keep_sensitive` is the measured
mixed-precision step between calibration and writing (mixed.py, sensitivity.py).
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from ..checkpoints.convert import PreparedDecoder, convert_hf
from ..checkpoints.layout import TensorPlan, shard_for
from ..checkpoints.quant import quant_plans, quantization_block
from ..checkpoints.safetensors_io import WeightSource
from ..checkpoints.scheme import QuantScheme
from ..checkpoints.spec import DecoderSpec, trtllm_config
from ..checkpoints.trtllm_ckpt import load_checkpoint
from ..checkpoints.validate import validate_checkpoint
from ..checkpoints.writer import (TORCH_DTYPES, copy_tokenizer, finite, source_record, validate_sources, write_manifest,
                                  write_ranks)
from ..errors import TrtspecError
from ..fsutil import write_json
from ..runtime.model import Decoder
from ..upstream.modelopt import MODELOPT_VERSION
from .calibrate import QuantState, calibrate, collect, plain_weights, unsmooth
from .data import CalibSet
from .export import QuantSource
from .formats import QuantFormat, modelopt_config
from .mixed import exclusion_config, expand_units, hf_modules, linear_units, quantized_units, unit_of
from .sensitivity import measure, sensitivity_prompts


def needs_calibration(layout: QuantScheme) -> bool:
    """W8A16 weights are quantized by trtllm-build; only a KV format then needs data."""
    return layout.quant_algo != "W8A16" or layout.kv_cache_quant_algo is not None


def load_hf(hf_dir: Path) -> torch.nn.Module:
    """The HF model in float32, on the CPU (calibrate moves it to quantization.device and back): on a
    CPU float32 is both the fast and the accurate choice, and ModelOpt's amax statistics are float32
    either way; the checkpoint's --dtype applies when tensors are written."""
    try:
        model = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    except Exception as e:  # the converter's own checks passed, so this is transformers refusing
        raise TrtspecError(f"{hf_dir}: transformers cannot load the model ({type(e).__name__}: {e})") from None
    # NaN/Inf weights: refuse by tensor name here, before ModelOpt's calibration trips over them
    # with an assertion (the converter's per-tensor check runs only when the tensors are written)
    for name, p in model.named_parameters():
        finite(p.detach(), name, hf_dir, torch.float32)
    return model


def announce(what: str, fmt: QuantFormat, layout: QuantScheme, calib: CalibSet) -> None:
    kv = f" + {layout.kv_cache_quant_algo} KV cache" if layout.kv_cache_quant_algo else ""
    print(f"calibrating {what}: {fmt.name}{kv} on {len(calib.prompts)} prompts ({calib.num_tokens} tokens)",
          flush=True)


def write_plans(out: Path, plans: list[TensorPlan], layout: QuantScheme, specs: dict[str, tuple[DecoderSpec, bool]],
                sources: dict[str, WeightSource], states: dict[str, QuantState] | None, tp: int, dtype: str,
                label: str) -> None:
    """Quantize `plans` and write the rank files. `specs` maps a tensor-name prefix ("" or
    "eagle_nets.") to the spec and parallel-embedding flag its TP rule uses."""
    def spec_of(name: str) -> tuple[DecoderSpec, bool]:
        return specs["eagle_nets."] if name.startswith("eagle_nets.") else specs[""]

    qplans = quant_plans(plans, layout, lambda n: shard_for(n, *spec_of(n), layout.quant_algo))
    all_sources = dict(sources)
    if states is not None:
        all_sources["quant"] = QuantSource(plans, qplans, states, layout)
    write_ranks(out, qplans, all_sources, tp, dtype, label=label)


def calib_manifest(c: Calibrated | None) -> dict:
    if c is None:
        return {"calibrated": False, "reason": "W8A16 weights are quantized by trtllm-build; no KV format"}
    return {"calibrated": True, "seconds": round(c.seconds, 2), "modelopt_version": MODELOPT_VERSION,
            "modelopt_algorithm": c.cfg.get("algorithm"), "compute_dtype": "float32", **c.calib.manifest()}


def options_record(fmt: QuantFormat, layout: QuantScheme, dtype: str, tp: int, extra: dict | None = None) -> dict:
    opts = {"format": fmt.name, "quant_algo": layout.quant_algo, "kv_cache_quant_algo": layout.kv_cache_quant_algo,
            "dtype": dtype, "tp": tp}
    if layout.quant_algo == "W4A16_AWQ":
        opts["group_size"] = layout.group_size
    return {**opts, **(extra or {})}


@dataclass
class Calibrated:
    """A model ModelOpt has calibrated, with what it was calibrated on (for the manifest)."""

    model: torch.nn.Module
    cfg: dict
    calib: CalibSet
    seconds: float


def calibrate_decoder(hf_dir: Path, fmt: QuantFormat, layout: QuantScheme, calib: CalibSet,
                      excluded_hf: list[str] | None = None) -> Calibrated:
    """Load the HF decoder in `hf_dir` and calibrate it for `layout` on `calib`; the quantizers of
    the HF modules `excluded_hf` are disabled in ModelOpt's config (mixed.exclusion_config)."""
    cfg = modelopt_config(fmt, layout.kv_cache_quant_algo, layout.group_size,
                          exclusion_config(excluded_hf) if excluded_hf else None)
    model = load_hf(hf_dir)
    announce(Path(hf_dir).name, fmt, layout, calib)
    return Calibrated(model, cfg, calib, calibrate(model, cfg, calib.prompts, device=calib.device))


@dataclass
class KeepSensitive:
    """`--keep-sensitive N`: keep the N most sensitive units (mixed.py) in the model dtype, measured
    on `samples` calibration prompts of at most `seq_len` tokens (sensitivity.py)."""

    count: int = 0
    samples: int = 8
    seq_len: int = 64


def exclude_sensitive(d: PreparedDecoder, fmt: QuantFormat, layout: QuantScheme, cal: Calibrated,
                      keep: KeepSensitive, progress=print) -> tuple[QuantScheme, dict]:
    """Measure every still-quantized unit of the calibrated model and exclude the `keep.count`
    most sensitive: returns the new layout and the manifest record. The measurement runs on the
    checkpoint as written with the current layout (a temporary copy) against the float32
    conversion of the same HF model; the chosen units' quantizers are then disabled in the
    ModelOpt model too, and their smoothing (int8_sq, w4a16_awq) undone, so model and checkpoint
    say the same thing: a plain linear of the HF model's own weights."""
    units = linear_units(d.plans)
    candidates = quantized_units(d.plans, layout)
    prompts = sensitivity_prompts(cal.calib.prompts, keep.samples, keep.seq_len)
    progress(f"measuring the sensitivity of {len(candidates)} quantized GEMMs on {len(prompts)} calibration prompts")
    with tempfile.TemporaryDirectory(prefix="trtspec-sensitivity-") as tmp:
        probe, ref = Path(tmp) / "probe", Path(tmp) / "ref"
        probe.mkdir()
        write_quantized_decoder(d, probe, fmt, layout, cal)
        convert_hf(d.hf_dir, ref, dtype="float32")
        dev = cal.calib.device  # where calibration ran (quantization.device)
        sens = measure(Decoder(load_checkpoint(probe), device=dev), Decoder(load_checkpoint(ref), device=dev),
                       candidates, prompts, TORCH_DTYPES[d.dtype])
    top = sens.ranked()[: keep.count]
    chosen = expand_units(top, units)
    disable = set(hf_modules(d.plans, set(chosen)))
    for name, module in cal.model.named_modules():
        if name in disable:
            unsmooth(module)  # int8_sq / w4a16_awq calibrated these smoothed: written plain, they hold w
        if name.rsplit(".", 1)[0] in disable and name.endswith(("input_quantizer", "weight_quantizer")):
            module.disable()
    progress(f"kept in {d.dtype}: {', '.join(unit_of(u) for u in top)} ({sens.seconds:.0f} s)")
    return dataclasses.replace(layout, exclude=layout.exclude + chosen), sens.manifest(top)


def mixed_record(layout: QuantScheme, d: PreparedDecoder, patterns: list[str] | None, keep: KeepSensitive | None,
                 sensitivity: dict | None) -> dict:
    units = linear_units(d.plans)
    excluded = [u for u, ls in units.items() if not all(layout.quantizes(x) for x in ls)]
    return {"exclude_patterns": list(patterns or []), "keep_sensitive": keep.count if keep else 0,
            "excluded_linears": list(layout.exclude), "excluded_gemms": len(excluded), "total_gemms": len(units),
            "sensitivity": sensitivity}


def write_quantized_decoder(d: PreparedDecoder, out: Path, fmt: QuantFormat, layout: QuantScheme,
                            calibrated: Calibrated | None, mixed: dict | None = None) -> None:
    """Write one decoder checkpoint into the directory `out`: from the calibrated model's weights
    and quantizer states, or (no calibration: W8A16) streamed from the HF files."""
    states, sources = None, {"base": d.weights}
    if calibrated is not None:
        states = {"base": collect(calibrated.model)}
        sources = {"base": WeightSource({}, d.hf_dir, plain_weights(calibrated.model))}
        validate_sources(d.plans, sources, {"base": {"lm_head.weight"}} if d.spec.tie_word_embeddings else None)
    write_plans(out, d.plans, layout, {"": (d.spec, True)}, sources, states, d.tp, d.dtype,
                label=f"writing {d.hf_dir.name} ({fmt.name})")
    cfg_json = trtllm_config(d.spec, d.dtype, d.tp, parallel_embedding=True)
    cfg_json["quantization"] = quantization_block(layout)
    write_json(out / "config.json", cfg_json)
    copy_tokenizer(d.hf_dir, out)
    extra = {"family": d.spec.family, "calibration": calib_manifest(calibrated)}
    if mixed is not None:
        extra["mixed_precision"] = mixed
    write_manifest(out, "decoder", [source_record("hf", d.hf_dir, d.weights)],
                   options_record(fmt, layout, d.dtype, d.tp, extra))

    validate_checkpoint(out)  # header-only self-check before the directory is renamed into place
