"""EAGLE-3 draft heads, in the layouts TensorRT-LLM's PyTorch backend loads (upstream.trtllm, EAGLE-3).

An EAGLE-3 head is an HF directory (config.json + safetensors, or pytorch_model.bin with
allow_pickle) holding one Llama decoder layer whose attention reads cat(embedding, hidden) of width
2H, an `fc` [H, n*H] that fuses n captured target hidden states, a final `norm`, a reduced-vocabulary
`lm_head` [draft_vocab, H] and `d2t` [draft_vocab] offsets back to target ids. Two layouts:

- SafeAILab EAGLE-3 reference: the layer as `midlayer.*` (plus `t2d`, which TensorRT-LLM ignores);
- ModelOpt `export_speculative_decoding`: the layer as `layers.0.*` (TensorRT-LLM renames it to
  `midlayer.*`), `eagle_config.eagle_aux_hidden_state_layer_ids` in config.json.

`load_eagle3_head` reads either into one canonical form (names as TensorRT-LLM uses them) and
refuses anything else with one line naming the file, tensor or field. Which target layers feed the
fc: the head's config ids when present (what it was trained on), else TensorRT-LLM's default.
Heads with more than one decoder layer, their own embedding width (`target_hidden_size`), or the
later-TensorRT-LLM eagle_config switches are refused: the runtime does not implement them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..errors import TrtspecError
from ..fsutil import read_json
from ..upstream import trtllm
from ..upstream.transformers import HF_CONFIG_DEFAULTS
from .config_fields import ConfigFields
from .safetensors_io import WeightSource, open_weights
from .spec import SUPPORTED_ROPE_TYPES, DecoderSpec

LAYER = "midlayer."
MODELOPT_LAYER = "layers.0."  # ModelOpt's name for the one decoder layer
LAYER_TENSORS = tuple(f"{LAYER}{n}.weight" for n in (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
    "mlp.up_proj", "mlp.down_proj", "hidden_norm", "input_layernorm", "post_attention_layernorm"))
REQUIRED = LAYER_TENSORS + ("fc.weight", "norm.weight")
OPTIONAL = ("fc.bias", "lm_head.weight", "d2t", "t2d", "embed_tokens.weight")
# eagle_config switches of later TensorRT-LLM heads that change the computation; refused when set.
UNSUPPORTED_SWITCHES = ("eh_proj_before_attn", "norm_before_fc", "return_hidden_post_norm", "fc_norm")


def draft_to_target(d2t: torch.Tensor | None, draft_vocab: int) -> torch.Tensor:
    """Target id of each draft id: i + d2t[i] (ModelOpt's d2t offsets; identity without d2t)."""
    ids = torch.arange(draft_vocab)
    return ids if d2t is None else ids + d2t.long()


@dataclass(frozen=True)
class Eagle3Head:
    path: Path
    layout: str  # "safeailab" (midlayer.*) | "modelopt" (layers.0.*)
    spec: DecoderSpec  # the head's decoder dims; RoPE from the head's config
    aux_layers: tuple[int, ...]  # target layers whose outputs are concatenated into fc's input
    draft_vocab: int
    tensors: dict[str, torch.Tensor]  # canonical names (REQUIRED, OPTIONAL); lm_head absent = the target's

    @property
    def draft_to_target(self) -> torch.Tensor:
        """Target id of each draft id (module function draft_to_target)."""
        return draft_to_target(self.tensors.get("d2t"), self.draft_vocab)


def _layer_prefixes(num_layers: int) -> tuple[str, str]:
    """(ModelOpt's prefix, TensorRT-LLM's) of the head's decoder layers: `layers.0.` / `midlayer.`
    for one layer; with several, `midlayer` is a list (`layers.{i}.` / `midlayer.{i}.`, what
    Eagle3ForCausalLM.load_weights on main maps them to)."""
    return (MODELOPT_LAYER, LAYER) if num_layers == 1 else ("layers.", LAYER)


def midlayer_name(name: str, num_layers: int = 1) -> str:
    """A ModelOpt head tensor name in TensorRT-LLM's (_layer_prefixes); other names unchanged."""
    src, dst = _layer_prefixes(num_layers)
    return dst + name[len(src):] if name.startswith(src) else name


def modelopt_name(name: str, num_layers: int = 1) -> str:
    """The inverse of midlayer_name: a `midlayer.*` tensor name as ModelOpt's module calls it."""
    dst, src = _layer_prefixes(num_layers)
    return dst + name[len(src):] if name.startswith(src) else name


def _canonical(src: WeightSource, where: Path) -> tuple[str, dict[str, str]]:
    """The layout and {canonical name: stored name}; unknown or mixed names are refused."""
    names = src.names()
    mid, lay = any(n.startswith(LAYER) for n in names), any(n.startswith("layers.") for n in names)
    if mid and lay:
        raise TrtspecError(f"{where}: both 'midlayer.*' and 'layers.*' tensors; expected one EAGLE-3 layout")
    if not (mid or lay):
        raise TrtspecError(f"{where}: no decoder layer tensors ('midlayer.*' or 'layers.0.*'); not an EAGLE-3 head")
    layout = "safeailab" if mid else "modelopt"
    mapping = {midlayer_name(n): n for n in names}
    for canon, stored in mapping.items():
        if canon.startswith("layers."):
            raise TrtspecError(f"{where}: tensor '{stored}': EAGLE-3 heads with more than one decoder layer "
                               "are not supported by the runtime")
        if canon not in REQUIRED + OPTIONAL:
            raise TrtspecError(f"{where}: unexpected tensor '{stored}' in an EAGLE-3 head")
    missing = [n for n in REQUIRED if n not in mapping]
    if missing:
        stored = missing[0] if layout == "safeailab" else modelopt_name(missing[0])
        raise TrtspecError(f"{where}: missing tensor '{stored}' ({layout} EAGLE-3 layout)")
    return layout, mapping


def head_aux_layers(cfg: dict, target_layers: int, where: Path | str) -> tuple[int, ...]:
    """The target layers a head's fc reads: its config's ids (ModelOpt's `eagle_config`, or top
    level), else TensorRT-LLM's default for a target of `target_layers` layers."""
    eagle = cfg.get("eagle_config") or {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") or cfg.get("eagle_aux_hidden_state_layer_ids")
    field = "eagle_config.eagle_aux_hidden_state_layer_ids"
    if not ids:
        if target_layers < trtllm.EAGLE3_MIN_LAYERS_FOR_DEFAULT:
            raise TrtspecError(f"{where}: no {field} and the target has {target_layers} layers; "
                               f"TensorRT-LLM's default capture needs >= {trtllm.EAGLE3_MIN_LAYERS_FOR_DEFAULT}")
        return trtllm.eagle3_default_capture(target_layers)
    if not isinstance(ids, list) or not all(isinstance(i, int) and 0 <= i < target_layers for i in ids):
        raise TrtspecError(f"{where}: field '{field}' is {ids!r}; expected layer indices in "
                           f"[0, {target_layers}) of the target")
    if len(set(ids)) < 2:  # one layer: fc would be [H, H], and its input as wide as the head's own output
        raise TrtspecError(f"{where}: field '{field}' is {ids!r}; expected at least 2 distinct target layers "
                           "(fc fuses their states)")
    return tuple(sorted(ids))  # TensorRT-LLM sorts given ids (Eagle3OneModelSpecMetadata)


def _check_fc_bias(f: ConfigFields, has_bias: bool, head_dir: Path) -> None:
    """TensorRT-LLM gives the fc a bias only when config.json says `bias: true` (upstream.trtllm
    EAGLE3_FC_BIAS_KEY): a bias tensor it would not read, or a bias it would miss, is refused here
    rather than drafted with by the runtime and served without."""
    wants = f.flag(trtllm.EAGLE3_FC_BIAS_KEY, False)
    if has_bias and not wants:
        raise TrtspecError(f"{f.where}: field '{trtllm.EAGLE3_FC_BIAS_KEY}' is not true, but {head_dir} has an "
                           "fc.bias, which TensorRT-LLM then does not load; set it to true if the head was trained "
                           "with it")
    if wants and not has_bias:
        raise TrtspecError(f"{f.where}: field '{trtllm.EAGLE3_FC_BIAS_KEY}' is true, but {head_dir} has no fc.bias")


def _first_architecture(cfg: dict) -> str:
    archs = cfg.get("architectures")
    return str(archs[0]) if isinstance(archs, list) and archs else "?"


LLAMA_DEFAULTS = HF_CONFIG_DEFAULTS["llama"]  # an EAGLE-3 head's config is read as a LlamaConfig


def _head_spec(f: ConfigFields, target: DecoderSpec) -> DecoderSpec:
    eagle = f.cfg.get("eagle_config") or {}
    on = [k for k in UNSUPPORTED_SWITCHES if eagle.get(k) or f.cfg.get(k)]
    if on:
        raise TrtspecError(f"{f.where}: field '{on[0]}' is set; this EAGLE-3 variant is not implemented by the runtime")
    if f.int("num_hidden_layers", 1) != 1:
        raise TrtspecError(f"{f.where}: field 'num_hidden_layers' is {f.cfg['num_hidden_layers']}; the runtime "
                           "executes single-layer EAGLE-3 heads only")
    hidden = f.int("hidden_size")
    if hidden != target.hidden_size or f.int("target_hidden_size", hidden) != hidden:
        raise TrtspecError(f"{f.where}: field 'hidden_size' is {hidden} (target_hidden_size "
                           f"{f.cfg.get('target_hidden_size', hidden)}); expected the target's {target.hidden_size}")
    if f.int("vocab_size", target.vocab_size) != target.vocab_size:
        raise TrtspecError(f"{f.where}: field 'vocab_size' is {f.cfg['vocab_size']}; expected the target's "
                           f"{target.vocab_size}")
    rope = f.rope_scaling("rope_scaling")
    kind = (rope or {}).get("rope_type", (rope or {}).get("type")) or "default"
    if kind not in SUPPORTED_ROPE_TYPES:
        raise TrtspecError(f"{f.where}: field 'rope_scaling' has type {kind!r}; the runtime implements "
                           f"{', '.join(SUPPORTED_ROPE_TYPES)}")
    heads = f.int("num_attention_heads")
    kv_heads, head_dim = f.int("num_key_value_heads", heads), f.int("head_dim", None)
    f.head_counts(hidden, heads, kv_heads, head_dim is not None)
    return replace(target, architecture=_first_architecture(f.cfg), family="llama", num_layers=1,
                   num_heads=heads, num_kv_heads=kv_heads, head_size=head_dim or hidden // heads,
                   intermediate_size=f.int("intermediate_size"),
                   norm_eps=f.number("rms_norm_eps", LLAMA_DEFAULTS["rms_norm_eps"]),  # a LlamaConfig's
                   rope_theta=f.number("rope_theta", LLAMA_DEFAULTS["rope_theta"]), rope_scaling=rope,
                   max_position_embeddings=f.int("max_position_embeddings", target.max_position_embeddings),
                   attn_bias=f.flag("attention_bias", False), qk_norm=False, tie_word_embeddings=False)


def _check_shapes(t: dict[str, torch.Tensor], spec: DecoderSpec, n_aux: int, draft_vocab: int, vocab: int,
                  where: Path) -> None:
    H, hd = spec.hidden_size, spec.head_size
    want = {"fc.weight": (H, n_aux * H), "fc.bias": (H,), "norm.weight": (H,),
            "lm_head.weight": (draft_vocab, H), "d2t": (draft_vocab,),
            f"{LAYER}self_attn.q_proj.weight": (spec.num_heads * hd, 2 * H),
            f"{LAYER}self_attn.k_proj.weight": (spec.num_kv_heads * hd, 2 * H),
            f"{LAYER}self_attn.v_proj.weight": (spec.num_kv_heads * hd, 2 * H),
            f"{LAYER}self_attn.o_proj.weight": (H, spec.num_heads * hd),
            f"{LAYER}mlp.gate_proj.weight": (spec.intermediate_size, H),
            f"{LAYER}mlp.up_proj.weight": (spec.intermediate_size, H),
            f"{LAYER}mlp.down_proj.weight": (H, spec.intermediate_size)}
    want.update({f"{LAYER}{n}.weight": (H,) for n in ("hidden_norm", "input_layernorm", "post_attention_layernorm")})
    for name, shape in want.items():
        if name in t and tuple(t[name].shape) != shape:
            raise TrtspecError(f"{where}: tensor '{name}' has shape {list(t[name].shape)}, expected {list(shape)}"
                               + (f" ({n_aux} captured layers x hidden {H})" if name == "fc.weight" else ""))
    if draft_vocab < vocab and "d2t" not in t:
        raise TrtspecError(f"{where}: missing tensor 'd2t' (draft_vocab_size {draft_vocab} < vocab_size {vocab} "
                           "needs the draft-to-target offsets)")
    if draft_vocab < vocab and "lm_head.weight" not in t:
        raise TrtspecError(f"{where}: missing tensor 'lm_head.weight' (a reduced draft vocabulary needs its own lm_head)")
    if "d2t" in t:
        ids = draft_to_target(t["d2t"], draft_vocab)
        if int(ids.min()) < 0 or int(ids.max()) >= vocab or len(set(ids.tolist())) != draft_vocab:
            raise TrtspecError(f"{where}: tensor 'd2t' maps draft ids outside [0, {vocab}) or onto one target id twice")


def load_eagle3_head(head_dir: Path, target: DecoderSpec, allow_pickle: bool = False) -> Eagle3Head:
    """Read and check an EAGLE-3 head for `target` (the target checkpoint's decoder spec)."""
    head_dir = Path(head_dir)
    path = head_dir / "config.json"
    if not path.is_file():
        raise TrtspecError(f"{path}: missing (an EAGLE-3 head directory needs its config.json)")
    f = ConfigFields(read_json(path, "EAGLE-3 head config.json"), path)
    if (head_dir / "hf_quant_config.json").exists() or "quantization_config" in f.cfg:
        raise TrtspecError(f"{head_dir}: a quantized EAGLE-3 head is not supported by the runtime")
    spec = _head_spec(f, target)
    aux = head_aux_layers(f.cfg, target.num_layers, path)
    if trtllm.EAGLE3_DRAFT_VOCAB_KEY not in f.cfg:  # 1.2 reads the attribute unconditionally (null: vocab_size)
        raise TrtspecError(f"{path}: missing field '{trtllm.EAGLE3_DRAFT_VOCAB_KEY}'; TensorRT-LLM 1.2 needs it to "
                           f"load the head as EAGLE-3 (write the target's vocab_size {target.vocab_size} for a "
                           "full-vocabulary head)")
    draft_vocab = f.int(trtllm.EAGLE3_DRAFT_VOCAB_KEY, target.vocab_size)
    src = open_weights(head_dir, allow_pickle=allow_pickle)
    layout, mapping = _canonical(src, head_dir)
    tensors = {c: src.get(s) for c, s in mapping.items() if c not in ("t2d", "embed_tokens.weight")}
    _check_fc_bias(f, "fc.bias" in tensors, head_dir)
    _check_shapes(tensors, spec, len(aux), draft_vocab, target.vocab_size, head_dir)
    return Eagle3Head(head_dir, layout, spec, aux, draft_vocab, tensors)
