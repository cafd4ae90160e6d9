"""Base HF model + SafeAILab-style EAGLE-1 head -> one `EagleForCausalLM` TRT-LLM checkpoint.

Layout (trtllm.md §4.2-4.3): the base decoder as usual, plus `num_eagle_layers` identical clones of
the head under `eagle_nets.{i}` - TRT-LLM runs one clone per tree level inside the engine. Each
clone is `drafter.{vocab_embedding, fc, layers.*}` + `lm_head` (the base lm_head). Layer 0 of the
drafter has no input_layernorm; a head without `fc.bias` gets zeros, a head without `embed_tokens`
gets the base embedding.

Only heads the engine flow can represent are accepted. EAGLE-3 heads (reduced draft vocabulary
`d2t`/`t2d`, their own lm_head, fc over 3 hidden states) and non-Llama bases go through the LLM-API
(PyTorch backend) route instead.
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import TrtspecError
from ..fsutil import atomic_dir, read_json, write_json
from ..upstream import trtllm
from .config_fields import ConfigFields
from .convert import check_decoder_tp, resolve_dtype
from .layout import eagle_plans
from .safetensors_io import WeightSource, open_weights
from .sharding import check_tp
from .spec import DecoderSpec, spec_from_hf, trtllm_config
from .validate import validate_checkpoint
from .writer import copy_tokenizer, source_record, validate_sources, write_manifest, write_ranks

PYTORCH_ROUTE = ("the TensorRT engine flow cannot represent it; serve it with the LLM-API "
                 "(PyTorch backend) route instead (trtspec triton --flavor llmapi)")
_LAYER = re.compile(r"^layers\.(\d+)\.")


def check_eagle_options(max_draft_len: int, num_eagle_layers: int, max_non_leaves: int) -> None:
    if not 1 <= max_draft_len <= trtllm.EAGLE_MAX_DRAFT_LEN_LIMIT:
        raise TrtspecError(f"eagle.max_draft_len: {max_draft_len} is outside [1, {trtllm.EAGLE_MAX_DRAFT_LEN_LIMIT}] "
                           "(TensorRT-LLM's EAGLE limit)")
    if num_eagle_layers < 1:
        raise TrtspecError(f"eagle.num_eagle_layers: expected >= 1, got {num_eagle_layers}")
    if max_non_leaves < 1:
        raise TrtspecError(f"eagle.max_non_leaves: expected >= 1, got {max_non_leaves}")


def head_spec(base: DecoderSpec, head_dir: Path, head: WeightSource) -> DecoderSpec:
    """The head's decoder dims: its config.json where present, else the base's; vocab and RoPE
    always come from the base (the head shares the base's embedding space and positions)."""
    refuse = [n for n in head.names() if n in ("d2t", "t2d") or n.startswith("midlayer.")]
    if refuse:
        raise TrtspecError(f"{head_dir}: tensor '{refuse[0]}' marks an EAGLE-3 head; {PYTORCH_ROUTE}")
    if "lm_head.weight" in head:
        raise TrtspecError(f"{head_dir}: the head has its own 'lm_head.weight'; EAGLE-1 engines use the "
                           f"base lm_head, so {PYTORCH_ROUTE}")
    if "fc.weight" not in head:
        raise TrtspecError(f"{head_dir}: missing tensor 'fc.weight' (not an EAGLE-1 head)")
    fc = head.shape("fc.weight")
    if len(fc) != 2 or fc[0] != base.hidden_size:
        raise TrtspecError(f"{head_dir}: head/base hidden-size mismatch: 'fc.weight' has shape {list(fc)}, "
                           f"expected [{base.hidden_size}, {2 * base.hidden_size}] for the base's hidden_size "
                           f"{base.hidden_size}")
    if fc[1] != 2 * base.hidden_size:
        raise TrtspecError(f"{head_dir}: 'fc.weight' has shape {list(fc)}; an EAGLE-1 fc takes "
                           f"2*hidden={2 * base.hidden_size} inputs (3*hidden is EAGLE-3); {PYTORCH_ROUTE}")
    path = head_dir / "config.json"
    f = ConfigFields(read_json(path, "EAGLE head config.json") if path.is_file() else {}, path)
    if f.int("hidden_size", base.hidden_size) != base.hidden_size:
        raise TrtspecError(f"{path}: head/base hidden-size mismatch: hidden_size="
                           f"{f.cfg['hidden_size']}, base has {base.hidden_size}")
    layers = {int(m.group(1)) for n in head.names() if (m := _LAYER.match(n))}
    num_layers = f.int("num_hidden_layers", None) or (max(layers) + 1 if layers else 0)
    if num_layers < 1:
        raise TrtspecError(f"{head_dir}: the head has no decoder layers ('layers.0.*')")
    heads = f.int("num_attention_heads", base.num_heads)
    kv_heads, head_dim = f.int("num_key_value_heads", heads), f.int("head_dim", None)
    f.head_counts(base.hidden_size, heads, kv_heads, head_dim is not None)
    return replace(
        base, architecture=trtllm.EAGLE_NET_ARCHITECTURE, family="llama", num_layers=num_layers, num_heads=heads,
        num_kv_heads=kv_heads, head_size=head_dim or base.hidden_size // heads,
        intermediate_size=f.int("intermediate_size", base.intermediate_size),
        norm_eps=f.number("rms_norm_eps", base.norm_eps), attn_bias=False, qk_norm=False,
        tie_word_embeddings=False)


def eagle_config(base: DecoderSpec, head: DecoderSpec, dtype: str, tp: int, max_draft_len: int,
                 num_eagle_layers: int, max_non_leaves: int) -> dict:
    cfg = trtllm_config(base, dtype, tp, parallel_embedding=False)
    net = trtllm_config(head, dtype, tp, parallel_embedding=False)
    net.pop("tie_word_embeddings")
    net["head_dim"] = head.head_size
    cfg.update(architecture=trtllm.EAGLE_ARCHITECTURE, max_draft_len=max_draft_len,
               num_eagle_layers=num_eagle_layers, max_non_leaves_per_layer=max_non_leaves,
               head_dim=base.head_size, eagle_net_config=net)
    return cfg


def open_eagle(base_hf: Path, head_dir: Path, tp: int, allow_pickle: bool
               ) -> tuple[DecoderSpec, DecoderSpec, dict[str, WeightSource]]:
    """The base's and the head's decoder dims and their weight sources, after the checks every
    EAGLE-1 writer needs (a Llama-family base, dims that split over `tp`, an EAGLE-1 head). Used by
    the plain merge below and by the quantizing one (calib.quantize)."""
    base = spec_from_hf(base_hf)
    if base.family not in trtllm.EAGLE_BASE_FAMILIES:
        raise TrtspecError(f"{base_hf / 'config.json'}: EagleForCausalLM needs a Llama-family base, got "
                           f"{base.architecture}; {PYTORCH_ROUTE}")
    check_decoder_tp(base, tp, base_hf)
    sources = {"base": open_weights(base_hf), "head": open_weights(head_dir, allow_pickle=allow_pickle)}
    head = head_spec(base, head_dir, sources["head"])
    check_tp(head.num_heads, head.num_kv_heads, head.intermediate_size, tp, f"{head_dir} (EAGLE head)")
    return base, head, sources


def convert_eagle(base_hf: Path, head_dir: Path, out_dir: Path, dtype: str = "auto", tp: int = 1,
                  max_draft_len: int = trtllm.EAGLE_DEFAULT_MAX_DRAFT_LEN,
                  num_eagle_layers: int = trtllm.EAGLE_DEFAULT_NUM_LAYERS,
                  max_non_leaves: int = trtllm.EAGLE_DEFAULT_MAX_NON_LEAVES,
                  allow_pickle: bool = False, overwrite: bool = False) -> Path:
    """Merge `head_dir` into `base_hf` and write an EagleForCausalLM checkpoint at `out_dir`."""
    base_hf, head_dir = Path(base_hf), Path(head_dir)
    check_eagle_options(max_draft_len, num_eagle_layers, max_non_leaves)
    base, head, sources = open_eagle(base_hf, head_dir, tp, allow_pickle)
    dtype = resolve_dtype(dtype, base_hf)
    plans = eagle_plans(base, head, num_eagle_layers, "embed_tokens.weight" in sources["head"],
                        "fc.bias" in sources["head"])
    dropped = {"layers.0.input_layernorm.weight"} & sources["head"].names()
    if dropped:  # HASS/EAGLE-3-style heads normalise layer 0's input; the engine's drafter cannot
        print(f"warning: {head_dir}: dropping 'layers.0.input_layernorm.weight' (EagleForCausalLM's "
              "drafter has no input norm in layer 0); expect lower acceptance", file=sys.stderr)
    allowed = {"base": {"lm_head.weight"} if base.tie_word_embeddings else set(), "head": dropped}
    validate_sources(plans, sources, allowed)
    with atomic_dir(Path(out_dir), overwrite) as tmp:
        write_ranks(tmp, plans, sources, tp, dtype, label="converting base + EAGLE head")
        write_json(tmp / "config.json", eagle_config(base, head, dtype, tp, max_draft_len,
                                                     num_eagle_layers, max_non_leaves))
        copy_tokenizer(base_hf, tmp)
        write_manifest(tmp, "eagle", [source_record("hf", base_hf, sources["base"]),
                                      source_record("eagle_head", head_dir, sources["head"])],
                       {"dtype": dtype, "tp": tp, "max_draft_len": max_draft_len,
                        "num_eagle_layers": num_eagle_layers, "max_non_leaves_per_layer": max_non_leaves,
                        "dropped_tensors": sorted(dropped),
                        "zero_fc_bias": "fc.bias" not in sources["head"],
                        "embedding_from_base": "embed_tokens.weight" not in sources["head"]})
        validate_checkpoint(tmp)
    return Path(out_dir)
