"""Time the PyTorch runtime's forwards on this machine and write them as a cost table.

This is the measured side of the cost model for the device at hand (`cfg.device`: the CPU, or a
GPU, where each timed run ends with torch.cuda.synchronize so that it times the kernels, not their
launch): for each network (target, draft model, EAGLE drafter level), batch
size and token count, one forward of `num_tokens` new tokens after `context` committed tokens,
exactly the call the decoding loops make (`Decoder.forward` / `EagleNet.forward`, cache writes
not committed, so every repeat sees the same state). The median of `repeats` timed runs after
`warmup` untimed ones is recorded. Fitting the analytic model to it (`trtspec.tuning.fit`) then
predicts the shapes that were not timed.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from ..checkpoints.trtllm_ckpt import load_checkpoint
from ..errors import TrtspecError
from ..runtime.device import compute_dtype, describe, resolve, synchronize
from ..runtime.eagle_net import EagleNet
from ..runtime.model import Decoder
from ..runtime.quant import set_fp8_gemm
from .fit import CostRow, CostTable
from .options import MeasureConfig


def _time(fn, repeats: int, warmup: int, device: torch.device) -> float:
    """Median wall time of `fn` with the device's queue drained before and after each run."""
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def _decoder_rows(model, role: str, cfg: MeasureConfig, g: torch.Generator) -> list[CostRow]:
    rows = []
    vocab = model.vocab_size
    for b in cfg.batches:
        cache = model.new_cache(b, cfg.context + max(cfg.num_tokens))
        ctx = torch.randint(0, vocab, (b, cfg.context), generator=g)
        model.forward(ctx, cache, with_logits=False)
        cache.advance(torch.arange(b), cfg.context)
        for n in cfg.num_tokens:
            block = torch.randint(0, vocab, (b, n), generator=g).to(model.device)  # inputs in place before timing
            s = _time(lambda: model.forward(block, cache), cfg.repeats, cfg.warmup, model.output_device)
            rows.append(CostRow(role=role, batch=b, num_tokens=n, context=cfg.context, seconds=s))
    return rows


def _eagle_rows(net, cfg: MeasureConfig, g: torch.Generator) -> list[CostRow]:
    rows = []
    H, vocab = net.spec.hidden_size, net.nets[0].lm_head.shape[0]
    for b in cfg.batches:
        cache = net.new_cache(b, cfg.context + max(cfg.num_tokens))
        # no logits, as the decoder's fill: b x context x vocab float32 would be GBs at a long context
        net.forward(torch.randint(0, vocab, (b, cfg.context), generator=g),
                    torch.randn(b, cfg.context, H, generator=g), cache, with_logits=False)
        cache.advance(torch.arange(b), cfg.context)
        for n in cfg.num_tokens:
            tok = torch.randint(0, vocab, (b, n), generator=g).to(net.device)
            feat = torch.randn(b, n, H, generator=g).to(net.device, net.dtype)
            s = _time(lambda: net.forward(tok, feat, cache, level=min(1, net.num_levels - 1)),
                      cfg.repeats, cfg.warmup, net.device)
            rows.append(CostRow(role="eagle", batch=b, num_tokens=n, context=cfg.context, seconds=s))
    return rows


def _check_positions(ckpt, cfg: MeasureConfig, path: Path) -> None:
    """The timed KV length (context + the most new tokens) must fit the model's positions."""
    need, have = cfg.context + max(cfg.num_tokens), ckpt.spec.max_position_embeddings
    if need > have:
        raise TrtspecError(f"measure_cost.context: {cfg.context} + {max(cfg.num_tokens)} new tokens exceed "
                           f"{path}'s max_position_embeddings={have}; lower measure_cost.context or "
                           "measure_cost.num_tokens")


def _decoder(ckpt, dtype: torch.dtype, devices: list[torch.device], cfg: MeasureConfig) -> Decoder:
    model = Decoder(ckpt, dtype, device=devices)
    set_fp8_gemm([lin for w in model.layers for lin in w.linears()], cfg.fp8_gemm)  # timed as it would be served
    if cfg.compile_layers:  # compiled during the warm-up runs (warmup >= 1 keeps compilation out of the timings)
        model.compile_layers()
    return model


def preset_for(devices: list[torch.device]) -> str:
    """The GPU preset a table timed on `devices` is fitted from (fit.fit_gpu): "cpu" on the CPU
    (memory and compute times add), else the H200's or, for any other GPU, the H100's peaks, whose
    efficiencies the fit rescales (memory and compute overlap on a GPU)."""
    cuda = [d for d in devices if d.type == "cuda"]
    if not cuda:
        return "cpu"
    return "h200" if "H200" in torch.cuda.get_device_name(cuda[0]) else "h100"


@torch.inference_mode()
def measure_runtime(target_ckpt: Path, draft_ckpt: Path | None = None, cfg: MeasureConfig | None = None,
                    gpu: str | None = None) -> CostTable:
    """A cost table of the target (and draft / EAGLE drafter) timed with the PyTorch runtime on
    cfg.device in cfg.dtype (errors name measure_cost.device / .dtype); the table's `device` text
    names the GPU (or the CPU and its threads) and the dtype when it is not float32, its `gpu` the
    preset it is fitted from (default: preset_for the devices)."""
    cfg = cfg or MeasureConfig()
    g = torch.Generator().manual_seed(cfg.seed)
    devices = resolve(cfg.device, "measure_cost.device")
    gpu = gpu or preset_for(devices)
    dtype = compute_dtype(cfg.dtype, devices, "measure_cost.dtype")
    c = load_checkpoint(Path(target_ckpt))
    d = load_checkpoint(Path(draft_ckpt)) if draft_ckpt is not None else None
    for ckpt, path in ((c, target_ckpt), (d, draft_ckpt)):
        if ckpt is not None:
            _check_positions(ckpt, cfg, path)
    target = _decoder(c, dtype, devices, cfg)
    rows = _decoder_rows(target, "target", cfg, g)
    if d is not None:
        rows += _decoder_rows(_decoder(d, dtype, devices, cfg), "draft", cfg, g)
    if c.is_eagle:
        net = EagleNet(c, dtype, target.output_device)
        set_fp8_gemm(net.linears(), cfg.fp8_gemm)
        rows += _eagle_rows(net, cfg, g)
    text = describe(devices) + ("" if dtype == torch.float32 else f", {str(dtype).removeprefix('torch.')}")
    return CostTable(gpu=gpu, device=text, rows=rows)
