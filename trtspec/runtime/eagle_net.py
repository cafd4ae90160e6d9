"""The EAGLE-1 drafter of an `EagleForCausalLM` checkpoint (trtllm.md §4.1, §4.3).

    x = fc(cat([embed(token_{j+1}), feature_j], -1))      # embedding FIRST, then the feature
    x = decoder layers(x)                                  # layer 0 has no input norm
    logits = lm_head(x)                                    # no final norm; x is the next feature

Its sequence is pairs (token x_{j+1}, feature f_j) at RoPE position j, where f_j is the base
model's hidden state after ln_f at position j (the state that predicted x_{j+1}). Inside a draft
tree the feature of a node is the drafter's own output at its parent, since the base has not run
there yet.

TRT-LLM stores one clone of the head per tree level (`eagle_nets.{i}`, i < num_eagle_layers) and
runs clone d to draft level d + 1. We do the same; identical clones (what every converter writes)
are loaded once. All clones share one drafter KV cache here: exact for identical clones, which is
the only layout TRT-LLM's converters produce.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..checkpoints.scheme import QuantScheme
from ..checkpoints.trtllm_ckpt import TrtllmCheckpoint
from ..errors import TrtspecError
from ..upstream import trtllm
from . import rope
from .device import move, resolve, to_device
from .kv_cache import KVCache
from .model import run_layers
from .quant import Linear, load_linear, scheme_of
from .weights import LayerWeights, load, load_layer


@dataclass
class NetWeights:
    embed: torch.Tensor
    fc: Linear  # [H, 2H] with bias; quantized like every linear (trtllm.md §4.6)
    layers: list[LayerWeights]
    lm_head: torch.Tensor  # excluded from quantization (`eagle_nets.{i}.lm_head`)

    def tensors(self) -> list[torch.Tensor | None]:
        return [self.embed, self.lm_head] + self.fc.tensors() + [t for w in self.layers for t in w.tensors()]

    def same_as(self, other: "NetWeights") -> bool:
        return all((a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
                   for a, b in zip(self.tensors(), other.tensors()))


def load_net(ckpt: TrtllmCheckpoint, i: int, dtype: torch.dtype, scheme: QuantScheme) -> NetWeights:
    """Clone i. TRT-LLM quantizes the whole EagleForCausalLM at its root with the top-level
    `quantization` block, so the drafter's linears and KV cache follow the same scheme."""
    spec, p = ckpt.eagle_spec, f"eagle_nets.{i}."
    return NetWeights(
        embed=load(ckpt, p + "drafter.vocab_embedding.weight", dtype),
        fc=load_linear(ckpt, p + "drafter.fc.", scheme, dtype, bias=True),
        layers=[load_layer(ckpt, f"{p}drafter.layers.{j}.", spec, dtype, scheme, input_norm=j > 0)
                for j in range(spec.num_layers)],
        lm_head=load(ckpt, p + "lm_head.weight", dtype),
    )


class EagleNet:
    def __init__(self, ckpt: TrtllmCheckpoint, dtype: torch.dtype = torch.float32, device: str = "cpu"):
        """device: one device, where the target's hidden states come out (Decoder.output_device)."""
        if not ckpt.is_eagle:
            raise TrtspecError(f"{ckpt.path}: not an EagleForCausalLM checkpoint (architecture "
                               f"{ckpt.config.get('architecture')!r})")
        scheme = scheme_of(ckpt)
        self.spec, self.dtype = ckpt.eagle_spec, dtype
        cfg = ckpt.config
        self.num_levels = int(cfg.get("num_eagle_layers", trtllm.EAGLE_CONFIG_DEFAULT_NUM_LAYERS))
        self.max_draft_len = int(cfg.get("max_draft_len", trtllm.EAGLE_DEFAULT_MAX_DRAFT_LEN))
        self.max_non_leaves = int(cfg.get("max_non_leaves_per_layer", trtllm.EAGLE_DEFAULT_MAX_NON_LEAVES))
        (self.device,) = resolve(device)
        nets: list[NetWeights] = []
        for i in range(self.num_levels):
            net = load_net(ckpt, i, dtype, scheme)
            same = next((n for n in nets if n.same_as(net)), None)
            nets.append(same if same is not None else net)  # dedupe identical clones
        moved = {id(n): move(n, self.device) for n in nets}
        self.nets = [moved[id(n)] for n in nets]
        self.freq = rope.inv_freq(self.spec.head_size, self.spec.rope_theta, self.spec.rope_scaling).to(self.device)

    @property
    def draft_vocab(self) -> int:
        return self.nets[0].lm_head.shape[0]

    def unique_nets(self) -> list:
        """The level nets, each once (identical clones share one net, see __init__)."""
        return list({id(n): n for n in self.nets}.values())

    def linears(self) -> list:
        """Every level's linears (fc and the layer's), once per distinct level net."""
        return [lin for n in self.unique_nets() for lin in [n.fc] + [x for w in n.layers for x in w.linears()]]

    @property
    def distinct_nets(self) -> int:
        return len(self.unique_nets())

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        s = self.spec
        return KVCache(s.num_layers, batch, capacity, s.num_kv_heads, s.head_size, self.dtype,
                       (self.device,) * s.num_layers)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, features: torch.Tensor, cache: KVCache, level: int = 0,
                rows: torch.Tensor | None = None, pos_offsets: torch.Tensor | None = None,
                block_mask: torch.Tensor | None = None, with_logits: bool = True
                ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Pairs (tokens [b', T], features [b', T, H]) through clone `level` ->
        (logits [b', T, V] float32, un-normed hidden [b', T, H] = the next features).
        Cache semantics as Decoder.forward: written after the committed slots, not committed.
        with_logits=False: None for the logits, to take `logits` of the positions that need them later
        (a batch's full-vocabulary float32 logits at every position can outgrow the GPU)."""
        w = self.nets[level]
        tokens, features = to_device(tokens, self.device), features.to(self.device, self.dtype)
        x = w.fc(torch.cat([F.embedding(tokens, w.embed), features], dim=-1))
        x = run_layers(x, w.layers, self.spec, self.freq, cache, rows, pos_offsets, block_mask)
        return (self.logits(x, level) if with_logits else None), x

    def logits(self, hidden: torch.Tensor, level: int = 0) -> torch.Tensor:
        """float32 logits of clone `level` from its hidden output (forward's second value)."""
        return F.linear(hidden, self.nets[level].lm_head).float()
