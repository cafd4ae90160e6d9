"""Reading decoder weights out of a TRT-LLM checkpoint for the PyTorch runtime.

The checkpoint reader already merges TP ranks (undoing kv-head duplication) and drops vocab
padding, so every tensor here has its full HF shape. Weights are upcast to one compute dtype
(float32 by default): the runtime is a reference executor, and comparing against transformers to
1e-4 needs float32 arithmetic whatever dtype the checkpoint stores.

Quantized checkpoints (FP8, INT8, INT4 payloads with scales) are refused here by name, so no
quantized byte is ever silently read as a float; dequantization belongs in this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..checkpoints.spec import DecoderSpec
from ..checkpoints.trtllm_ckpt import TrtllmCheckpoint
from ..errors import TrtspecError


@dataclass
class LayerWeights:
    """One Llama-family decoder layer. TRT-LLM names: `mlp.fc` = HF gate_proj, `mlp.gate` = HF up_proj."""
    input_norm: torch.Tensor | None  # None: EAGLE drafter layer 0 (fc output goes straight in)
    qkv: torch.Tensor  # [(nh + 2 nkv) hd, H], q rows then k then v
    qkv_bias: torch.Tensor | None  # Qwen2
    q_norm: torch.Tensor | None  # Qwen3: per-head RMSNorm of q and k, before RoPE
    k_norm: torch.Tensor | None
    dense: torch.Tensor  # o_proj [H, nh hd]
    post_norm: torch.Tensor
    fc: torch.Tensor  # gate_proj [I, H]
    gate: torch.Tensor  # up_proj [I, H]
    proj: torch.Tensor  # down_proj [H, I]

    def tensors(self) -> list[torch.Tensor | None]:
        return [self.input_norm, self.qkv, self.qkv_bias, self.q_norm, self.k_norm, self.dense,
                self.post_norm, self.fc, self.gate, self.proj]


def check_unquantized(ckpt: TrtllmCheckpoint) -> None:
    algo = (ckpt.config.get("quantization") or {}).get("quant_algo")
    if algo:
        raise TrtspecError(f"{ckpt.path / 'config.json'}: quantization.quant_algo={algo!r}; the PyTorch runtime "
                           "runs unquantized (float16/bfloat16/float32) checkpoints only")


def load(ckpt: TrtllmCheckpoint, name: str, dtype: torch.dtype) -> torch.Tensor:
    return ckpt.tensor(name).to(dtype).contiguous()


def load_optional(ckpt: TrtllmCheckpoint, name: str, dtype: torch.dtype) -> torch.Tensor | None:
    return load(ckpt, name, dtype) if name in ckpt else None


def load_layer(ckpt: TrtllmCheckpoint, prefix: str, spec: DecoderSpec, dtype: torch.dtype,
               input_norm: bool = True) -> LayerWeights:
    """Weights of the layer whose tensors start with `prefix` (e.g. 'transformer.layers.3.')."""
    a = prefix + "attention."
    need = (lambda n: load(ckpt, n, dtype))
    return LayerWeights(
        input_norm=need(prefix + "input_layernorm.weight") if input_norm else None,
        qkv=need(a + "qkv.weight"),
        qkv_bias=need(a + "qkv.bias") if spec.attn_bias else load_optional(ckpt, a + "qkv.bias", dtype),
        q_norm=need(a + "q_layernorm.weight") if spec.qk_norm else None,
        k_norm=need(a + "k_layernorm.weight") if spec.qk_norm else None,
        dense=need(a + "dense.weight"),
        post_norm=need(prefix + "post_layernorm.weight"),
        fc=need(prefix + "mlp.fc.weight"),
        gate=need(prefix + "mlp.gate.weight"),
        proj=need(prefix + "mlp.proj.weight"),
    )
