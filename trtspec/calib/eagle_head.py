"""A SafeAILab EAGLE-1 head as a torch module, calibrated together with its base (trtllm.md §4.6).

TRT-LLM's EAGLE engine quantizes the head's linears with the base's `quantization` block (the
root-level `quantize()` reaches `eagle_nets.*`), so the head needs real scales, and they must come
from the activations the head sees when it drafts: its input is `fc(cat(embed(x_{t+1}), f_t))`
with `f_t` the base's final hidden state (after ln_f). `BaseWithEagle` runs base and head in one
forward, so a single `mtq.quantize` forward loop calibrates both on the same prompts.

The module mirrors the head's tensor names (`embed_tokens`, `fc`, `layers.{j}.self_attn.q_proj`,
...), so after calibration its state dict is read by the same EAGLE plans as the head on disk.
Layer 0 has no input norm (Identity), there is no final norm, and the head's lm_head is the
base's (not run here: lm_head stays unquantized).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding


class EagleHead(nn.Module):
    def __init__(self, base_config, head_spec, embed: nn.Embedding | None):
        H = head_spec.hidden_size
        cfg = LlamaConfig(
            hidden_size=H, intermediate_size=head_spec.intermediate_size, num_hidden_layers=head_spec.num_layers,
            num_attention_heads=head_spec.num_heads, num_key_value_heads=head_spec.num_kv_heads,
            head_dim=head_spec.head_size, rms_norm_eps=head_spec.norm_eps, vocab_size=head_spec.vocab_size,
            max_position_embeddings=head_spec.max_position_embeddings, rope_theta=head_spec.rope_theta,
            rope_scaling=base_config.rope_scaling, hidden_act="silu", attention_bias=False)
        cfg._attn_implementation = "sdpa"
        super().__init__()
        self.config = cfg
        self.embed_tokens = embed if embed is not None else nn.Embedding(head_spec.vocab_size, H)
        self.fc = nn.Linear(2 * H, H, bias=True)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, layer_idx=j) for j in range(head_spec.num_layers))
        self.layers[0].input_layernorm = nn.Identity()
        self.rotary_emb = LlamaRotaryEmbedding(cfg)

    def forward(self, input_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Pairs (token x_{t+1}, base feature f_t) at RoPE position t, causal; returns the drafted features."""
        x = self.fc(torch.cat([self.embed_tokens(input_ids[:, 1:]), features[:, :-1]], dim=-1))
        positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        pos_emb = self.rotary_emb(x, positions)
        for layer in self.layers:  # attention_mask None + sdpa: causal
            out = layer(x, attention_mask=None, position_ids=positions, position_embeddings=pos_emb)
            x = out[0] if isinstance(out, tuple) else out
        return x


def load_head(head: EagleHead, tensors: dict[str, torch.Tensor]) -> None:
    """Copy SafeAILab tensors into the module; a missing fc.bias is zeros and a missing embedding
    is the base's (the same defaults the plain EAGLE converter applies)."""
    state = head.state_dict()
    with torch.no_grad():
        for name, param in state.items():
            if name in tensors:
                param.copy_(tensors[name].to(param.dtype))
            elif name == "fc.bias":
                param.zero_()
            elif not name.startswith("embed_tokens.") and not name.endswith("inv_freq"):
                raise KeyError(name)  # the converter's source checks ran first; this is a bug


class BaseWithEagle(nn.Module):
    """Base decoder + EAGLE head in one forward, so calibration sees the head's real inputs."""

    def __init__(self, base: nn.Module, head: EagleHead):
        super().__init__()
        self.base = base
        self.eagle = head

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        features = self.base.model(input_ids=input_ids, use_cache=False).last_hidden_state  # after ln_f
        return self.eagle(input_ids, features)
