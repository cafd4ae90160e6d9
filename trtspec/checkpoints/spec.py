"""`DecoderSpec`: the architecture facts of one Llama-family decoder, read from an HF config.json or
from a TRT-LLM config.json, and written back as a TRT-LLM config.json.

Llama, Mistral, Qwen2 and Qwen3 are one decoder with three switches: qkv bias (Qwen2), q/k
RMSNorm per head (Qwen3) and an explicit head size (Qwen3 and some Llamas). One spec, no forks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..upstream import trtllm
from ..errors import TrtspecError
from ..fsutil import read_json

# RoPE scaling types the runtime implements; the converter passes any HF dict through untouched.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class DecoderSpec:
    architecture: str  # TRT-LLM architecture
    family: str  # llama | mistral | qwen2 | qwen3
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    intermediate_size: int
    norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    attn_bias: bool = False
    qk_norm: bool = False
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    extras: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def qkv_out(self) -> int:
        return (self.num_heads + 2 * self.num_kv_heads) * self.head_size


def _need(cfg: dict, key: str, path: Path, kind=int):
    if key not in cfg or cfg[key] is None:
        raise TrtspecError(f"{path}: missing field '{key}'")
    try:
        return kind(cfg[key])
    except (TypeError, ValueError):
        raise TrtspecError(f"{path}: field '{key}' must be {kind.__name__}, got {cfg[key]!r}") from None


def full_rope_scaling(scaling: dict | None) -> dict | None:
    """HF rope_scaling with both 'type' and 'rope_type' (older TRT-LLM reads 'type', newer either)."""
    if not scaling:
        return None
    kind = scaling.get("rope_type", scaling.get("type"))
    return {**scaling, "type": kind, "rope_type": kind}


def spec_from_hf(model_dir: Path) -> DecoderSpec:
    """Read an HF `config.json` of a supported family; refuse anything else by name."""
    path = Path(model_dir) / "config.json"
    cfg = read_json(path, "HF config.json")
    archs = cfg.get("architectures") or []
    if not archs or archs[0] not in trtllm.HF_ARCHITECTURES:
        raise TrtspecError(
            f"{path}: unsupported architecture {archs[0] if archs else None!r} "
            f"(expected one of {', '.join(trtllm.HF_ARCHITECTURES)})")
    trt_arch, family = trtllm.HF_ARCHITECTURES[archs[0]]
    if cfg.get("mlp_bias"):
        raise TrtspecError(f"{path}: field 'mlp_bias' is true; only bias-free MLPs are supported")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise TrtspecError(f"{path}: field 'hidden_act' is {act!r}; expected 'silu' (SwiGLU MLP)")
    hidden = _need(cfg, "hidden_size", path)
    heads = _need(cfg, "num_attention_heads", path)
    head_size = int(cfg.get("head_dim") or hidden // heads)
    default_theta = 1000000.0 if family in ("qwen2", "qwen3") else 10000.0
    extras = {}
    if cfg.get("sliding_window") and family == "mistral":
        extras["sliding_window"] = cfg["sliding_window"]
    return DecoderSpec(
        architecture=trt_arch, family=family,
        vocab_size=_need(cfg, "vocab_size", path), hidden_size=hidden,
        num_layers=_need(cfg, "num_hidden_layers", path), num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads), head_size=head_size,
        intermediate_size=_need(cfg, "intermediate_size", path),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(cfg.get("rope_theta", default_theta)),
        rope_scaling=full_rope_scaling(cfg.get("rope_scaling")),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        attn_bias=family == "qwen2" or bool(cfg.get("attention_bias", False)),
        qk_norm=family == "qwen3",
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        extras=extras,
    )


def trtllm_config(spec: DecoderSpec, dtype: str, tp: int, parallel_embedding: bool) -> dict:
    """The TRT-LLM 1.2 `config.json` of a plain decoder (reference: trtllm.md §2.2)."""
    cfg: dict[str, Any] = {
        "architecture": spec.architecture,
        "dtype": dtype,
        "logits_dtype": "float32",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_size": spec.head_size,
        "intermediate_size": spec.intermediate_size,
        "hidden_act": spec.hidden_act,
        "norm_epsilon": spec.norm_eps,
        "position_embedding_type": "rope_gpt_neox",
        "max_position_embeddings": spec.max_position_embeddings,
        "rotary_base": spec.rope_theta,
        "rotary_scaling": spec.rope_scaling,
        "attn_bias": spec.attn_bias,
        "mlp_bias": False,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "use_parallel_embedding": parallel_embedding,
        "embedding_sharding_dim": 0,
        "mapping": {"world_size": tp, "tp_size": tp, "pp_size": 1},
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
    }
    if spec.family in ("qwen2", "qwen3"):
        cfg.update(qwen_type=spec.family, seq_length=spec.max_position_embeddings, use_logn_attn=False)
    if spec.qk_norm:
        cfg["qk_layernorm"] = True
    return cfg


def spec_from_trtllm(cfg: dict, where: Path | str) -> DecoderSpec:
    """Read back a TRT-LLM decoder config (a checkpoint's config.json or an eagle_net_config)."""
    arch = cfg.get("architecture")
    families = {a: f for a, f in trtllm.HF_ARCHITECTURES.values()}
    families[trtllm.EAGLE_ARCHITECTURE] = "llama"
    if arch not in families:
        raise TrtspecError(f"{where}: unsupported architecture {arch!r} (expected one of {', '.join(families)})")
    family = families[arch]
    if arch == "Qwen2ForCausalLM" and cfg.get("qwen_type") == "qwen3":  # tolerate either spelling
        family = "qwen3"
    hidden = _need(cfg, "hidden_size", Path(where))
    heads = _need(cfg, "num_attention_heads", Path(where))
    return DecoderSpec(
        architecture=arch, family=family,
        vocab_size=_need(cfg, "vocab_size", Path(where)), hidden_size=hidden,
        num_layers=_need(cfg, "num_hidden_layers", Path(where)), num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_size=int(cfg.get("head_size") or hidden // heads),
        intermediate_size=_need(cfg, "intermediate_size", Path(where)),
        norm_eps=float(cfg.get("norm_epsilon", 1e-5)),
        rope_theta=float(cfg.get("rotary_base", 10000.0)),
        rope_scaling=cfg.get("rotary_scaling"),
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
        attn_bias=bool(cfg.get("attn_bias", family == "qwen2")),
        qk_norm=family == "qwen3" or bool(cfg.get("qk_layernorm", False)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        hidden_act=cfg.get("hidden_act", "silu"),
    )
