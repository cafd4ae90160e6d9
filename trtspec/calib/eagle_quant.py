"""Calibrate and write a base + EAGLE-1 head as one quantized EagleForCausalLM checkpoint.

The plans are the plain EAGLE converter's (eagle.py: base, then `num_eagle_layers` identical
clones of the head); the base's tensors and scales come from the calibrated base, every clone's
from the calibrated head (the clones run the same weights, so they share the same scales).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from ..checkpoints.eagle import eagle_config
from ..checkpoints.layout import TensorPlan
from ..checkpoints.quant import quantization_block
from ..checkpoints.safetensors_io import WeightSource
from ..checkpoints.scheme import QuantScheme
from ..checkpoints.spec import DecoderSpec
from ..checkpoints.validate import validate_checkpoint
from ..checkpoints.writer import copy_tokenizer, source_record, validate_sources, write_manifest
from ..fsutil import write_json
from .calibrate import calibrate, collect, plain_weights
from .data import CalibSet
from .eagle_head import BaseWithEagle, EagleHead, load_head
from .formats import QuantFormat, modelopt_config
from .pipeline import Calibrated, announce, calib_manifest, load_hf, options_record, write_plans


def eagle_checkpoint_config(base: DecoderSpec, head: DecoderSpec, dtype: str, tp: int, layout: QuantScheme,
                            eagle_opts: dict) -> dict:
    """The plain EAGLE config with the quantization block at the top and, the same, in
    eagle_net_config: the EAGLE nets' attention takes its quant mode from there (§4.6)."""
    cfg = eagle_config(base, head, dtype, tp, eagle_opts["max_draft_len"], eagle_opts["num_eagle_layers"],
                       eagle_opts["max_non_leaves_per_layer"])
    block = quantization_block(layout, eagle=True)
    cfg["quantization"] = block
    cfg["eagle_net_config"]["quantization"] = dict(block)
    return cfg


def calibrate_eagle(base_hf: Path, head: DecoderSpec, head_weights: WeightSource, fmt: QuantFormat,
                    layout: QuantScheme, calib: CalibSet) -> Calibrated:
    """Base + head in one module (eagle_head.BaseWithEagle), calibrated in one forward loop."""
    base = load_hf(base_hf)
    own_embed = "embed_tokens.weight" in head_weights
    module = EagleHead(base.config, head, None if own_embed else base.get_input_embeddings())
    load_head(module, {n: head_weights.get(n) for n in module.state_dict() if n in head_weights})
    model = BaseWithEagle(base, module.float().eval())
    cfg = modelopt_config(fmt, layout.kv_cache_quant_algo, layout.group_size)
    announce(f"{base_hf.name} + EAGLE head", fmt, layout, calib)
    return Calibrated(model, cfg, calib, calibrate(model, cfg, calib.prompts, device=calib.device))


def write_quantized_eagle(out: Path, base_hf: Path, head_dir: Path, base: DecoderSpec, head: DecoderSpec,
                          disk: dict[str, WeightSource], plans: list[TensorPlan], fmt: QuantFormat,
                          layout: QuantScheme, calibrated: Calibrated | None, dtype: str, tp: int,
                          eagle_opts: dict) -> None:
    """Write the checkpoint from the calibrated base + head (or, W8A16 without KV, from disk)."""
    dropped = {"layers.0.input_layernorm.weight"} & disk["head"].names()
    if dropped:
        print(f"warning: {head_dir}: dropping 'layers.0.input_layernorm.weight' (EagleForCausalLM's drafter "
              "has no input norm in layer 0); expect lower acceptance", file=sys.stderr)
    own_embed = "embed_tokens.weight" in disk["head"]
    allowed = {"base": {"lm_head.weight"} if base.tie_word_embeddings else set(), "head": dropped}
    states, sources = None, dict(disk)
    if calibrated is None:  # a missing fc.bias is zeros, as in the plain converter
        if "fc.bias" not in disk["head"]:
            sources["head"] = WeightSource(disk["head"].infos, disk["head"].where,
                                           {**disk["head"].eager, "fc.bias": torch.zeros(base.hidden_size)})
    else:
        model = calibrated.model
        states = {"base": collect(model.base), "head": collect(model.eagle)}
        head_tensors = {n: t for n, t in plain_weights(model.eagle).items()
                        if own_embed or not n.startswith("embed_tokens.")}
        sources = {"base": WeightSource({}, base_hf, plain_weights(model.base)),
                   "head": WeightSource({}, head_dir, head_tensors)}
        allowed["head"] = set()  # the module never loaded the dropped norm
    validate_sources(plans, sources, allowed)
    write_plans(out, plans, layout, {"": (base, False), "eagle_nets.": (head, False)}, sources, states, tp, dtype,
                label=f"writing {base_hf.name} + EAGLE head ({fmt.name})")
    write_json(out / "config.json", eagle_checkpoint_config(base, head, dtype, tp, layout, eagle_opts))
    copy_tokenizer(base_hf, out)
    write_manifest(out, "eagle", [source_record("hf", base_hf, disk["base"]),
                                  source_record("eagle_head", head_dir, disk["head"])],
                   options_record(fmt, layout, dtype, tp, {
                       **eagle_opts, "dropped_tensors": sorted(dropped),
                       "zero_fc_bias": "fc.bias" not in disk["head"], "embedding_from_base": not own_embed,
                       "calibration": calib_manifest(calibrated)}))
    validate_checkpoint(out)
