"""The Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) as plain functions over checkpoint weights.

    x = embed(tokens)
    for each layer:  x = x + attn(rmsnorm(x));  x = x + mlp(rmsnorm(x))
    h = rmsnorm_f(x);  logits = lm_head(h)

attn: qkv = W_qkv x (+ bias, Qwen2); q, k per-head RMSNorm (Qwen3); RoPE on q, k; softmax(q k^T /
sqrt(hd)) v over the cached slots the mask allows; o_proj. mlp: proj(silu(fc(x)) * gate(x)).

Every forward is "write T new tokens after the committed cache of each row, attend through a mask":
that one shape covers prefill (ragged, right-padded), greedy steps (T=1), draft-target chains and
EAGLE trees (T = 1 + nodes with a tree mask and depth positions). See kv_cache.py for the rules.

Devices (device.py): the weights, caches, masks, RoPE tables and index tensors of a forward are on
the model's device(s); inputs (tokens, rows, positions, tree masks) may come from the host and are
moved once per forward without waiting. A forward queues GPU work and returns: nothing here reads a
GPU value back (the accept rule does, once per step). A model placed over several devices
(placement.py) runs its layers on theirs, the activations and the forward's geometry moved at each
boundary; its outputs (logits, hidden) are on the last device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import TrtspecError
from ..checkpoints.hf_unified import HfUnifiedCheckpoint
from ..checkpoints.spec import DecoderSpec
from ..checkpoints.trtllm_ckpt import TrtllmCheckpoint
from . import rope
from .device import move, resolve, to_device
from .kv_cache import KVCache, attention_mask, causal
from .hf_weights import load_hf_decoder
from .placement import Placement, plan_layers
from .quant import scheme_of
from .weights import LayerWeights, load, load_layer


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """HF LlamaRMSNorm: normalise in float32, cast back, then scale."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def attention(x: torch.Tensor, w: LayerWeights, spec: DecoderSpec, cache: KVCache, layer: int,
              rows: torch.Tensor, slots: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              mask: torch.Tensor) -> torch.Tensor:
    B, T, _ = x.shape
    nh, nkv, hd = spec.num_heads, spec.num_kv_heads, spec.head_size
    qkv = w.qkv(x)
    q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
    q, k, v = q.view(B, T, nh, hd), k.view(B, T, nkv, hd), v.view(B, T, nkv, hd)
    if w.q_norm is not None:
        q, k = rms_norm(q, w.q_norm, spec.norm_eps), rms_norm(k, w.k_norm, spec.norm_eps)
    q = rope.apply(q.transpose(1, 2), cos, sin)  # [B, nh, T, hd]
    k = rope.apply(k.transpose(1, 2), cos, sin).transpose(1, 2)  # cached post-RoPE, [B, T, nkv, hd]
    if w.kv is not None:  # a quantized KV cache holds (and attention reads) K, V after quantization
        k, v = w.kv(k), w.kv(v)
    cache.write(layer, rows, slots, k, v)
    k_all, v_all = cache.read(layer, rows, mask.shape[-1])  # [B, S, nkv, hd]
    k_all = k_all.transpose(1, 2).repeat_interleave(nh // nkv, dim=1)  # GQA: kv head j serves q heads j*g..
    v_all = v_all.transpose(1, 2).repeat_interleave(nh // nkv, dim=1)
    out = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask[:, None])
    return w.dense(out.transpose(1, 2).reshape(B, T, nh * hd))


def mlp(x: torch.Tensor, w: LayerWeights) -> torch.Tensor:
    return w.proj(F.silu(w.fc(x)) * w.gate(x))


def block_geometry(x: torch.Tensor, freq: torch.Tensor, cache: KVCache, rows: torch.Tensor | None,
                   pos_offsets: torch.Tensor | None, block_mask: torch.Tensor | None, window: int | None = None):
    """Where a block x [b', T, .] goes for cache rows `rows` (a host tensor; all rows when None):
    (rows, slots, attention mask, cos, sin), on x's device. The slot arithmetic runs on the host
    (cache.lens is host bookkeeping): no GPU value is read.

    block_mask [T, W] or [b', T, W] covers the W uncommitted slots after lens (the W - T written by
    earlier uncommitted forwards, then this block); causal [T, T] by default. pos_offsets [T] or
    [b', T] are RoPE positions relative to lens (default: the slot offsets W - T + arange(T)).
    window (DecoderSpec.sliding_window): a query at position p sees only slots s > p - window. A
    slot's index is its position for committed slots and for blocks at their slot offsets (prefill,
    chains), which is exact; a tree's nodes sit at slots at or after their positions (>= lens), so
    no block slot is hidden while the tree is shallower than the window, which is exact too; a
    tree as deep as the window is refused.
    """
    T = x.shape[1]
    rows = torch.arange(cache.batch) if rows is None else rows
    block_mask = causal(T) if block_mask is None else block_mask
    offset = block_mask.shape[-1] - T
    if (window and pos_offsets is not None and int(pos_offsets.max()) >= window  # a tree: off its slot offsets
            and bool((pos_offsets.cpu() != offset + torch.arange(T)).any())):
        raise TrtspecError(f"sliding_window {window}: a draft tree {int(pos_offsets.max()) + 1} positions deep reaches "
                           "past the window (expected a window deeper than the tree)")
    if pos_offsets is None:
        pos_offsets = offset + torch.arange(T)
    lens = cache.lens[rows]
    positions = lens[:, None] + pos_offsets  # [b', T]
    slots = cache.write_slots(rows, offset, T)
    dev = x.device
    mask = attention_mask(to_device(lens, dev), to_device(block_mask, dev), int(slots.max()) + 1,
                          to_device(positions, dev) if window else None, window)
    cos, sin = rope.cos_sin(to_device(freq, dev), to_device(positions, dev), x.dtype)
    return to_device(rows, dev), to_device(slots, dev), mask, cos, sin


def run_layers(x: torch.Tensor, layers: list[LayerWeights], spec: DecoderSpec, freq: torch.Tensor,
               cache: KVCache, rows: torch.Tensor | None, pos_offsets: torch.Tensor | None,
               block_mask: torch.Tensor | None, outputs: dict[int, torch.Tensor | None] | None = None,
               through=None) -> torch.Tensor:
    """The decoder layers over x [b', T, H] (block_geometry for rows, pos_offsets, block_mask).
    outputs: if given, {layer index: None} receives the output (the residual stream after it) of
    the layers it names: EAGLE-3 heads read those. through: `through_layers`, or a compiled copy
    of it (Decoder.compile_layers)."""
    geometry = block_geometry(x, freq, cache, rows, pos_offsets, block_mask, spec.sliding_window)
    return (through or through_layers)(x, layers, spec, cache, geometry, outputs)


def through_layers(x: torch.Tensor, layers: list[LayerWeights], spec: DecoderSpec, cache: KVCache, geometry: tuple,
                   outputs: dict[int, torch.Tensor | None] | None) -> torch.Tensor:
    """The layers' arithmetic, given the block's geometry (no host logic: what torch.compile can
    take whole). Each layer runs where its cache is (placement.py): x and the geometry move when
    the device changes."""
    for i, w in enumerate(layers):
        if x.device != cache.k[i].device or (i and cache.stages[i] != cache.stages[i - 1]):  # a placement boundary
            x = x.to(cache.k[i].device)
            geometry = tuple(to_device(t, x.device) for t in geometry)
        rows, slots, mask, cos, sin = geometry
        h = x if w.input_norm is None else rms_norm(x, w.input_norm, spec.norm_eps)
        x = x + attention(h, w, spec, cache, i, rows, slots, cos, sin, mask)
        x = x + mlp(rms_norm(x, w.post_norm, spec.norm_eps), w)
        if outputs is not None and i in outputs:
            outputs[i] = x
    return x


class Decoder:
    """A base model loaded from a TRT-LLM checkpoint (TP ranks merged, weights in `dtype`,
    quantized linears and KV cache as TRT-LLM runs them, see quant.py), or from a ModelOpt
    unified HF checkpoint as the PyTorch backend runs it (hf_weights.py).

    aux_layers (EAGLE-3): the forward's hidden is then [ln_f output, output of each aux layer]
    concatenated, width H * (1 + len(aux_layers)), so the decoding loop hands an EAGLE-3 proposer
    the captured states without knowing about them; `logits` reads the first H.

    device: one device ('cpu', 'cuda:0'), or several (a list, or 'cuda:0,cuda:1'): the layers are
    then placed over them by weight bytes (placement.py), each layer's KV cache beside it."""

    def __init__(self, ckpt: TrtllmCheckpoint | HfUnifiedCheckpoint, dtype: torch.dtype = torch.float32,
                 aux_layers: tuple[int, ...] = (), device: str | list = "cpu"):
        self.aux_layers = tuple(aux_layers)
        self.spec, self.dtype, self.path = ckpt.spec, dtype, ckpt.path
        s = self.spec
        if isinstance(ckpt, HfUnifiedCheckpoint):  # the PyTorch backend's numerics (hf_weights.py)
            self.scheme, embed, layers, ln_f, lm_head = load_hf_decoder(ckpt, dtype)
        else:
            self.scheme = scheme_of(ckpt)
            embed = load(ckpt, "transformer.vocab_embedding.weight", dtype)
            layers = [load_layer(ckpt, f"transformer.layers.{i}.", s, dtype, self.scheme)
                      for i in range(s.num_layers)]
            ln_f = load(ckpt, "transformer.ln_f.weight", dtype)
            # TRT-LLM may omit lm_head when the embedding is shared (trtllm.md §2.1).
            lm_head = load(ckpt, "lm_head.weight", dtype) if "lm_head.weight" in ckpt else embed
        self._place(resolve(device), embed, layers, ln_f, lm_head)
        self.freq = rope.inv_freq(s.head_size, s.rope_theta, s.rope_scaling).to(self.device)
        self.through = through_layers

    def compile_layers(self) -> None:
        """Run the layers through torch.compile (dynamic shapes: ragged batches, any block length).
        Opt-in (RuntimeDevice.compile_layers): on this project's 2-core CPU the compiled decode was
        slower (0.80x [0.70x, 0.97x], a 225 s compile; scripts/bench_compile.py); whether the fused
        kernels pay on a GPU, against their compile time and recompiles, that script shows there."""
        self.through = torch.compile(through_layers, dynamic=True)

    def _place(self, devices: list[torch.device], embed, layers, ln_f, lm_head) -> None:
        """Weights onto the devices (placement.plan_layers over their bytes); a tied lm_head stays
        the embedding's tensor unless the two ends are on different devices."""
        head_bytes = _bytes(ln_f) + (0 if lm_head is embed else _bytes(lm_head))
        self.placement: Placement = plan_layers([sum(map(_bytes, w.tensors())) for w in layers], devices,
                                                _bytes(embed), head_bytes + (_bytes(embed) if lm_head is embed else 0))
        self.embed = embed.to(self.device)
        self.layers = [move(w, d) for w, d in zip(layers, self.placement.layers)]
        self.ln_f = ln_f.to(self.output_device)
        self.lm_head = self.embed.to(self.output_device) if lm_head is embed else lm_head.to(self.output_device)

    @property
    def device(self) -> torch.device:
        """Where the forward's inputs go (the embedding's device)."""
        return self.placement.first

    @property
    def output_device(self) -> torch.device:
        """Where logits and hidden states come out (the final norm's and lm_head's device)."""
        return self.placement.last

    @property
    def vocab_size(self) -> int:
        return self.lm_head.shape[0]

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        s = self.spec
        return KVCache(s.num_layers, batch, capacity, s.num_kv_heads, s.head_size, self.dtype, self.placement.layers,
                       self.placement.stages)

    @property
    def hidden_width(self) -> int:
        return self.spec.hidden_size * (1 + len(self.aux_layers))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden[..., :self.spec.hidden_size], self.lm_head).float()

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, cache: KVCache, rows: torch.Tensor | None = None,
                pos_offsets: torch.Tensor | None = None, block_mask: torch.Tensor | None = None,
                with_logits: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
        """tokens [b', T] -> (logits [b', T, V] float32 or None, hidden after ln_f [b', T, H], or
        [b', T, hidden_width] with aux_layers).

        Writes K/V of the new tokens after each row's committed slots but does not commit them:
        the caller decides what to keep (`cache.advance` / `cache.commit`)."""
        x = F.embedding(to_device(tokens, self.device), self.embed)
        outputs = dict.fromkeys(self.aux_layers) if self.aux_layers else None
        x = run_layers(x, self.layers, self.spec, self.freq, cache, rows, pos_offsets, block_mask, outputs,
                       self.through)
        h = rms_norm(x.to(self.output_device), self.ln_f, self.spec.norm_eps)
        if outputs:
            h = torch.cat([h] + [outputs[i].to(h.device) for i in self.aux_layers], dim=-1)
        return (self.logits(h) if with_logits else None), h


def _bytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def pad_right(seqs: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged token lists -> tokens [B, Tmax] right-padded with `pad`, lengths [B]."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    out = torch.full((len(seqs), int(lengths.max())), pad, dtype=torch.long)
    for b, s in enumerate(seqs):
        out[b, :len(s)] = torch.tensor(s, dtype=torch.long)
    return out, lengths


@torch.inference_mode()
def forward_stepwise(model: Decoder, tokens: torch.Tensor, cache: KVCache, rows: torch.Tensor | None = None,
                     pos_offsets: torch.Tensor | None = None, block_mask: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """`model.forward` of a block that starts at the committed slots (no earlier uncommitted
    forward), computed one row and one token at a time: every forward is a batch of one, T=1.

    Why: a GEMM's result for one row depends on the shape it is part of (the library picks kernels
    and summation order per shape), so a [b', T] verify block and a one-token decode round
    differently (~1e-7). FP8 activation quantization can turn that into a different FP8 code and a
    near-tie argmax into a different token. Token t of the block writes its K/V at slot lens + t and
    attends the committed slots plus the block slots its mask row allows, which for a chain is
    exactly what a one-token decode at that position computes (batch-invariant mode, decode.py)."""
    B, T = tokens.shape
    rows = torch.arange(cache.batch) if rows is None else rows
    mask = causal(T) if block_mask is None else block_mask
    pos = torch.arange(T) if pos_offsets is None else pos_offsets
    if mask.shape[-1] != T:
        raise ValueError(f"forward_stepwise: the block must start at the committed slots (mask width "
                         f"{mask.shape[-1]}, {T} tokens)")
    logits, hidden = [], []
    for i in range(B):
        m, p = (mask[i] if mask.dim() == 3 else mask), (pos[i] if pos.dim() == 2 else pos)
        for t in range(T):
            lg, h = model.forward(tokens[i:i + 1, t:t + 1], cache, rows=rows[i:i + 1], pos_offsets=p[t:t + 1],
                                  block_mask=m[t:t + 1, :t + 1])
            logits.append(lg)
            hidden.append(h)
    return torch.cat(logits).view(B, T, -1), torch.cat(hidden).view(B, T, -1)


@torch.inference_mode()
def _prefill_rows(model: Decoder, cache: KVCache, rows: torch.Tensor, tokens: torch.Tensor,
                  lengths: torch.Tensor) -> torch.Tensor:
    """Batch-invariant prefill: each row alone; a row's first block (its prompt) in one forward, as
    a batch of one computes it, and later tokens (a drafter catching up) one at a time, as the
    target computed them. Returns hidden [b', Tmax, H]."""
    hidden = torch.zeros(*tokens.shape, model.hidden_width, dtype=model.dtype, device=model.output_device)
    for i, b in enumerate(rows.tolist()):
        n, row = int(lengths[i]), rows[i:i + 1]
        if int(cache.lens[b]) == 0:
            _, hidden[i, :n] = model.forward(tokens[i:i + 1, :n], cache, rows=row, with_logits=False)
        else:
            _, hidden[i, :n] = forward_stepwise(model, tokens[i:i + 1, :n], cache, rows=row)
    return hidden


def prefill(model: Decoder, cache: KVCache, rows: torch.Tensor, seqs: list[list[int]],
            batch_invariant: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run ragged `seqs` after the committed slots of `rows` in one right-padded causal block and
    commit exactly each row's own tokens. Returns (logits of each row's last token [b', V],
    hidden [b', Tmax, H] (rows past their length are padding), lengths [b']).
    batch_invariant: each row on its own (`_prefill_rows`)."""
    tokens, lengths = pad_right(seqs)
    if batch_invariant:
        hidden = _prefill_rows(model, cache, rows, tokens, lengths)
    else:
        _, hidden = model.forward(tokens, cache, rows=rows, with_logits=False)
    cache.advance(rows, lengths)
    last = hidden[to_device(torch.arange(len(seqs)), hidden.device), to_device(lengths - 1, hidden.device)]
    if batch_invariant:  # the lm_head GEMM per row as well
        return torch.cat([model.logits(last[i:i + 1]) for i in range(len(seqs))]), hidden, lengths
    return model.logits(last), hidden, lengths
