"""`DecoderSpec`: the architecture facts of one Llama-family decoder, read from an HF config.json or
from a TRT-LLM config.json, and written back as a TRT-LLM config.json.

Llama, Mistral, Qwen2 and Qwen3 are one decoder with four switches: qkv bias (Qwen2), q/k
RMSNorm per head (Qwen3), an explicit head size (Qwen3 and some Llamas) and Mistral's sliding
window (Mistral-7B-v0.1: every layer attends the last 4096 positions; later Mistrals set none).
One spec, no forks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..upstream import trtllm
from ..upstream.transformers import HF_CONFIG_DEFAULTS
from ..errors import TrtspecError
from ..fsutil import read_json
from .config_fields import ConfigFields

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
    # Every layer attends only keys at positions > query position - sliding_window (transformers'
    # sliding_window_overlay; Mistral alone: Qwen's per-layer windows are refused). None = full.
    sliding_window: int | None = None

    @property
    def qkv_out(self) -> int:
        return (self.num_heads + 2 * self.num_kv_heads) * self.head_size


def full_rope_scaling(scaling: dict | None) -> dict | None:
    """HF rope_scaling with both 'type' and 'rope_type' (older TRT-LLM reads 'type', newer either)."""
    if not scaling:
        return None
    kind = scaling.get("rope_type", scaling.get("type"))
    return {**scaling, "type": kind, "rope_type": kind}


def spec_from_hf(model_dir: Path) -> DecoderSpec:
    """Read an HF `config.json` of a supported family; refuse anything else by name."""
    path = Path(model_dir) / "config.json"
    f = ConfigFields(read_json(path, "HF config.json"), path)
    archs = f.cfg.get("architectures") or [None]
    if not isinstance(archs, list):
        f.fail("architectures", 'a list such as ["LlamaForCausalLM"]', archs)
    arch = archs[0]
    if not isinstance(arch, str) or arch not in trtllm.HF_ARCHITECTURES:
        raise TrtspecError(f"{path}: unsupported architecture {arch!r} "
                           f"(expected one of {', '.join(trtllm.HF_ARCHITECTURES)})")
    trt_arch, family = trtllm.HF_ARCHITECTURES[arch]
    if f.flag("mlp_bias", False):
        raise TrtspecError(f"{path}: field 'mlp_bias' is true; only bias-free MLPs are supported")
    act = f.text("hidden_act", "silu")
    if act != "silu":
        raise TrtspecError(f"{path}: field 'hidden_act' is {act!r}; expected 'silu' (SwiGLU MLP)")
    hidden, heads = f.int("hidden_size"), f.int("num_attention_heads")
    missing = HF_CONFIG_DEFAULTS[family]  # what transformers takes for a field the file leaves out
    kv_default = missing["num_key_value_heads"] if "num_key_value_heads" not in f.cfg else None
    kv_heads, head_dim = f.int("num_key_value_heads", kv_default or heads), f.int("head_dim", missing["head_dim"])
    f.head_counts(hidden, heads, kv_heads, head_dim is not None)
    window = f.int("sliding_window", None) if "sliding_window" in f.cfg else missing.get("sliding_window")
    sliding_window = window if family == "mistral" else None  # left out: transformers' 4096; null: none
    if (family in ("qwen2", "qwen3") and f.flag("use_sliding_window", False) and window
            and f.int("max_window_layers", missing["max_window_layers"], minimum=0) < f.int("num_hidden_layers")):
        raise TrtspecError(f"{path}: field 'use_sliding_window' is true and layers from max_window_layers on slide; "
                           "Qwen's per-layer sliding windows are not supported (expected false)")
    return DecoderSpec(
        architecture=trt_arch, family=family,
        vocab_size=f.int("vocab_size"), hidden_size=hidden,
        num_layers=f.int("num_hidden_layers"), num_heads=heads,
        num_kv_heads=kv_heads, head_size=head_dim or hidden // heads,
        intermediate_size=f.int("intermediate_size"),
        norm_eps=f.number("rms_norm_eps", missing["rms_norm_eps"]),
        rope_theta=f.number("rope_theta", missing["rope_theta"]),
        rope_scaling=full_rope_scaling(f.rope_scaling("rope_scaling")),
        max_position_embeddings=f.int("max_position_embeddings", missing["max_position_embeddings"]),
        attn_bias=family == "qwen2" or f.flag("attention_bias", False),
        qk_norm=family == "qwen3",
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        sliding_window=sliding_window,
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
    if spec.sliding_window:  # kept for the serving config's window (upstream.trtllm SLIDING_WINDOW_CONFIG_KEY)
        cfg[trtllm.SLIDING_WINDOW_CONFIG_KEY] = spec.sliding_window
    return cfg


def spec_from_trtllm(cfg: dict, where: Path | str, prefix: str = "") -> DecoderSpec:
    """Read back a TRT-LLM decoder config (a checkpoint's config.json, or its `eagle_net_config`
    block with `prefix="eagle_net_config."`)."""
    f = ConfigFields(cfg, where, prefix)
    arch = cfg.get("architecture")
    families = {a: fam for a, fam in trtllm.HF_ARCHITECTURES.values()}
    families[trtllm.EAGLE_ARCHITECTURE] = "llama"
    if not isinstance(arch, str) or arch not in families:
        raise TrtspecError(f"{where}: unsupported architecture {arch!r} (expected one of {', '.join(families)})")
    family = families[arch]
    if arch == "Qwen2ForCausalLM" and cfg.get("qwen_type") == "qwen3":  # tolerate either spelling
        family = "qwen3"
    hidden, heads = f.int("hidden_size"), f.int("num_attention_heads")
    kv_heads, head_size = f.int("num_key_value_heads", heads), f.int("head_size", None)
    f.head_counts(hidden, heads, kv_heads, head_size is not None)
    return DecoderSpec(
        architecture=arch, family=family,
        vocab_size=f.int("vocab_size"), hidden_size=hidden,
        num_layers=f.int("num_hidden_layers"), num_heads=heads,
        num_kv_heads=kv_heads, head_size=head_size or hidden // heads,
        intermediate_size=f.int("intermediate_size"),
        norm_eps=f.number("norm_epsilon", 1e-5),
        rope_theta=f.number("rotary_base", 10000.0),
        rope_scaling=f.rope_scaling("rotary_scaling"),
        max_position_embeddings=f.int("max_position_embeddings", 2048),
        attn_bias=f.flag("attn_bias", family == "qwen2"),
        qk_norm=family == "qwen3" or f.flag("qk_layernorm", False),
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        hidden_act=f.text("hidden_act", "silu"),
        sliding_window=f.int(trtllm.SLIDING_WINDOW_CONFIG_KEY, None),
    )
