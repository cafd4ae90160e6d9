"""EAGLE-3 speculative decoding as TensorRT-LLM 1.2's PyTorch backend runs it (one-model Eagle3):
a linear chain of K argmax drafts per step (upstream.trtllm, EAGLE-3 block).

The head (checkpoints/eagle3.py) over pairs (token x_{j+1}, state s_j) at RoPE position j:

    s_j = fc(cat(target layer outputs at j, for the captured layers))   # 3H -> H, target positions
    s_j = the head's own pre-norm output at j                            # its draft positions
    r = s + o_proj(attn(cat(input_layernorm(embed(x_{j+1})), hidden_norm(s))))   # q/k/v read 2H
    out = r + mlp(post_attention_layernorm(r))                           # pre-norm: the next s
    draft logits = lm_head(norm(out))   [draft_vocab]  -> target id = i + d2t[i]

The step is EAGLE-1's (eagle.py): the drafter catches up on the accepted tokens paired with the
target's captured states at the kept path (the whole prompt first), then drafts level by level on
its own outputs. So `Eagle3Proposer` is `EagleProposer` on a chain tree with this net; what differs
is the net and that the target's hidden carries the captured layers (model.Decoder aux_layers).

Trees: TensorRT-LLM's one-model Eagle3 drafts a linear chain (is_spec_dec_tree False; its static /
dynamic tree work is flagged do-not-use in 1.1+ and not offered for EAGLE-3 in the pinned 1.2), so
no tree is implemented here. Drafts are argmax whatever the sampling: at T > 0 TensorRT-LLM accepts
greedily (the served rule, upstream.sampling PATH_RULES) unless allow_advanced_sampling, which is
exact match; pick the accept rule accordingly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..checkpoints.eagle3 import LAYER, Eagle3Head
from ..errors import TrtspecError
from . import rope
from .eagle import EagleProposer
from .device import move, to_device
from .kv_cache import KVCache
from .model import Decoder, attention, block_geometry, mlp, rms_norm
from .quant import Linear
from .tree import chain
from .weights import LayerWeights


def _layer(t: dict[str, torch.Tensor], dtype: torch.dtype) -> LayerWeights:
    w = {n[len(LAYER):-len(".weight")]: v.to(dtype) for n, v in t.items() if n.startswith(LAYER)}
    qkv = torch.cat([w["self_attn.q_proj"], w["self_attn.k_proj"], w["self_attn.v_proj"]])
    return LayerWeights(input_norm=w["input_layernorm"], qkv=Linear(qkv), q_norm=None, k_norm=None,
                        dense=Linear(w["self_attn.o_proj"]), post_norm=w["post_attention_layernorm"],
                        fc=Linear(w["mlp.gate_proj"]), gate=Linear(w["mlp.up_proj"]), proj=Linear(w["mlp.down_proj"]))


class Eagle3Net:
    """The head's forward with the net interface EagleProposer drives (level is ignored: one head).
    It lives where the target's hidden states come out (Decoder.output_device)."""

    def __init__(self, head: Eagle3Head, target: Decoder, dtype: torch.dtype = torch.float32):
        if tuple(target.aux_layers) != head.aux_layers:
            raise TrtspecError(f"{head.path}: the target captures layers {list(target.aux_layers)}, the head "
                               f"needs {list(head.aux_layers)}")
        t = head.tensors
        self.spec, self.dtype, self.path = head.spec, dtype, head.path
        self.device = dev = target.output_device
        self.aux_layers = head.aux_layers
        self.fc = move(Linear(t["fc.weight"].to(dtype), t["fc.bias"].to(dtype) if "fc.bias" in t else None), dev)
        self.layer = move(_layer(t, dtype), dev)
        self.hidden_norm = t[f"{LAYER}hidden_norm.weight"].to(dev, dtype)
        self.norm = t["norm.weight"].to(dev, dtype)
        self.embed = target.embed.to(dev)  # shared with the target (same hidden size; a copy when placed apart)
        self.lm_head = t["lm_head.weight"].to(dev, dtype) if "lm_head.weight" in t else target.lm_head
        self.target_ids = head.draft_to_target.to(dev)
        self.target_vocab = target.vocab_size
        self.draft_vocab = head.draft_vocab
        self.freq = rope.inv_freq(self.spec.head_size, self.spec.rope_theta, self.spec.rope_scaling).to(dev)

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        s = self.spec
        return KVCache(1, batch, capacity, s.num_kv_heads, s.head_size, self.dtype, (self.device,))

    def to_target(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """[..., draft_vocab] -> [..., target_vocab], -inf at target ids the head cannot draft."""
        out = draft_logits.new_full((*draft_logits.shape[:-1], self.target_vocab), float("-inf"))
        out[..., self.target_ids] = draft_logits
        return out

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, features: torch.Tensor, cache: KVCache, level: int = 0,
                rows: torch.Tensor | None = None, pos_offsets: torch.Tensor | None = None,
                block_mask: torch.Tensor | None = None, with_logits: bool = True
                ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Pairs (tokens [b', T], states) -> (logits [b', T, target_vocab] float32, pre-norm output
        [b', T, H]). States: the target's hidden ([ln_f output, n captured layers], (1+n)*H, what
        Decoder.forward returns with aux_layers), the captured layers alone (n*H), or the head's own
        output (H). Cache semantics as Decoder.forward: written after the committed slots, not committed.
        with_logits=False: None for the logits (EagleNet.forward says why); `logits` computes them."""
        s, eps, H = features.to(self.device, self.dtype), self.spec.norm_eps, self.spec.hidden_size
        if s.shape[-1] == H * (1 + len(self.aux_layers)):
            s = s[..., H:]
        if s.shape[-1] != H:  # as TensorRT-LLM's apply_eagle3_fc
            s = self.fc(s)
        e = rms_norm(F.embedding(to_device(tokens, self.device), self.embed), self.layer.input_norm, eps)
        rows, slots, mask, cos, sin = block_geometry(s, self.freq, cache, rows, pos_offsets, block_mask)
        x = torch.cat([e, rms_norm(s, self.hidden_norm, eps)], dim=-1)
        r = s + attention(x, self.layer, self.spec, cache, 0, rows, slots, cos, sin, mask)
        out = r + mlp(rms_norm(r, self.layer.post_norm, eps), self.layer)
        return (self.logits(out) if with_logits else None), out

    def logits(self, out: torch.Tensor, level: int = 0) -> torch.Tensor:
        """Target-vocabulary float32 logits from the head's pre-norm output (level: one head, ignored)."""
        return self.to_target(F.linear(rms_norm(out, self.norm, self.spec.norm_eps), self.lm_head).float())


class Eagle3Proposer(EagleProposer):
    """K chained argmax drafts: EagleProposer's step on a chain with an Eagle3Net (which reads the
    captured layers out of the target's hidden)."""

    def __init__(self, net: Eagle3Net, draft_len: int, target_vocab: int):
        if draft_len < 1:
            raise TrtspecError(f"draft_len: expected >= 1 for EAGLE-3, got {draft_len}")
        super().__init__(net, chain(draft_len), target_vocab)
