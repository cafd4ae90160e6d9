"""Reading decoder weights out of a TRT-LLM checkpoint for the PyTorch runtime.

The checkpoint reader already merges TP ranks (undoing kv-head duplication) and drops vocab
padding, so every tensor here has its full HF shape. Weights are upcast to one compute dtype
(float32 by default): the runtime is a reference executor, and comparing against transformers to
1e-4 needs float32 arithmetic whatever dtype the checkpoint stores.

Linears are `quant.Linear`s: a plain float weight, or for a quantized checkpoint (FP8, INT8
SmoothQuant, weight-only INT8/INT4, INT4-AWQ) the dequantized weight plus the input transform
TRT-LLM applies; see quant.py. A quantized payload is never read as a float: the dtype each tensor
must have follows from `quantization.quant_algo`, and a mismatch is an error naming the tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..checkpoints.scheme import QuantScheme
from ..checkpoints.spec import DecoderSpec
from ..checkpoints.trtllm_ckpt import TrtllmCheckpoint
from .quant import KVQuant, Linear, load_float, load_gated_pair, load_kv_quant, load_linear


@dataclass
class LayerWeights:
    """One Llama-family decoder layer. TRT-LLM names: `mlp.fc` = HF gate_proj, `mlp.gate` = HF up_proj."""
    input_norm: torch.Tensor | None  # None: EAGLE drafter layer 0 (fc output goes straight in)
    qkv: Linear  # [(nh + 2 nkv) hd, H], q rows then k then v; bias on Qwen2
    q_norm: torch.Tensor | None  # Qwen3: per-head RMSNorm of q and k, before RoPE
    k_norm: torch.Tensor | None
    dense: Linear  # o_proj [H, nh hd]
    post_norm: torch.Tensor
    fc: Linear  # gate_proj [I, H]
    gate: Linear  # up_proj [I, H]
    proj: Linear  # down_proj [H, I]
    kv: KVQuant | None = None  # quantized KV cache: K, V pass through it before they are cached

    def linears(self) -> list[Linear]:
        return [self.qkv, self.dense, self.fc, self.gate, self.proj]

    def tensors(self) -> list[torch.Tensor | None]:
        linears = [t for lin in self.linears() for t in lin.tensors()]
        return [self.input_norm, self.q_norm, self.k_norm, self.post_norm] + linears + \
            (self.kv.tensors() if self.kv is not None else [None, None])


def load(ckpt: TrtllmCheckpoint, name: str, dtype: torch.dtype) -> torch.Tensor:
    return load_float(ckpt, name, dtype)


def load_layer(ckpt: TrtllmCheckpoint, prefix: str, spec: DecoderSpec, dtype: torch.dtype, scheme: QuantScheme,
               input_norm: bool = True) -> LayerWeights:
    """Weights of the layer whose tensors start with `prefix` (e.g. 'transformer.layers.3.')."""
    a = prefix + "attention."
    need = (lambda n: load(ckpt, n, dtype))
    qkv = load_linear(ckpt, a + "qkv.", scheme, dtype, bias=True if spec.attn_bias else None)
    fc, gate = load_gated_pair(ckpt, prefix, scheme, dtype)
    return LayerWeights(
        input_norm=need(prefix + "input_layernorm.weight") if input_norm else None,
        qkv=qkv,
        q_norm=need(a + "q_layernorm.weight") if spec.qk_norm else None,
        k_norm=need(a + "k_layernorm.weight") if spec.qk_norm else None,
        dense=load_linear(ckpt, a + "dense.", scheme, dtype, bias=False),
        post_norm=need(prefix + "post_layernorm.weight"),
        fc=fc,
        gate=gate,
        proj=load_linear(ckpt, prefix + "mlp.proj.", scheme, dtype, bias=False),
        kv=load_kv_quant(ckpt, a, scheme),
    )
