"""Does `--compile-layers` (torch.compile of the decoder layers, RuntimeDevice.compile_layers) pay?
Issue 16 asks for CUDA graphs or torch.compile "where they pay (measured)": this is the measurement.

The same greedy decode (SmolLM2-135M-Instruct, the embedded default model; MT-Bench prompts as one
ragged batch, eos ignored so every run decodes the same number of steps) runs with the layers eager
and compiled, in interleaved blocks (eager, compiled, compiled, eager, ...) after an untimed warm-up
of each, which for the compiled model includes its compilation (printed: a one-off cost per process,
paid again by every Triton model instance). Printed per variant: decode tokens/s; then the ratio
compiled / eager as the geometric mean of the per-block ratios with its 95% interval
(trtspec.perf.stats.mean_ci over the blocks' log ratios), the verdict ("no measurable difference"
when the interval holds 1), and whether both variants produced the same tokens (compiled kernels
may round differently; greedy ties can then flip a token).

    python scripts/bench_compile.py --device cpu --threads 1 --out compile-cpu.json
    python scripts/bench_compile.py --device cuda --out compile-cuda.json     # on a GPU host

What it does not measure: CUDA graphs (not implemented: the attention length changes every step,
so a graph per length would be needed), and speculative steps (a verify is the same layers over
K + 1 tokens; the decode step is where per-kernel launch overhead weighs most).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from trtspec.checkpoints.convert import convert_hf
from trtspec.perf import stats
from trtspec.perf.schema import Interval
from trtspec.perf.stats import mean_ci
from trtspec.runtime.device import compute_dtype, describe, resolve, synchronize
from trtspec.runtime.generate import generate_batch, load_models


def decode(models, prompts: list[list[int]], new: int, device: torch.device) -> tuple[list[list[int]], float]:
    synchronize(device)
    t0 = time.perf_counter()
    out = generate_batch(models, prompts, new, mode="greedy", ignore_eos=True)
    synchronize(device)
    return [r.output_ids for r in out], time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="runtime dtype (default: float32 cpu, bfloat16 GPU)")
    ap.add_argument("--samples", type=int, default=4, help="prompts decoded as one batch")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=6, help="interleaved (eager, compiled) block pairs")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's); on a shared "
                    "box use what is free: oversubscribed threads spin and a step takes 20x longer")
    ap.add_argument("--out", type=Path, required=True, help="results JSON")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from trtspec.checkpoints.default_model import smollm2_dir
    from trtspec.workloads import load_workloads, render

    (device,) = resolve(args.device, "--device")
    dtype = compute_dtype(args.dtype, [device], "--dtype")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = convert_hf(smollm2_dir(), Path(tmp) / "target", dtype="float32", overwrite=True)
        eager = load_models(ckpt, None, dtype, device=[device])
        compiled = load_models(ckpt, None, dtype, tokenizer=False, device=[device])
        compiled.compile_layers()
        (w,) = load_workloads("chat=mt-bench", samples=args.samples)
        prompts = [render(s, eager.tokenizer) for s in w.samples]
        _, eager_warm = decode(eager, prompts, 4, device)
        _, compile_s = decode(compiled, prompts, 4, device)  # compiles (dynamic shapes) on the first calls
        times = {"eager": [], "compiled": []}
        outputs = {}
        for b in range(args.blocks):
            order = ("eager", "compiled") if b % 2 == 0 else ("compiled", "eager")
            for name in order:
                outputs[name], s = decode(eager if name == "eager" else compiled, prompts, args.new_tokens, device)
                times[name].append(s)
    tokens = len(prompts) * args.new_tokens
    logs = [math.log(e / c) for e, c in zip(times["eager"], times["compiled"])]  # > 0: compiled faster
    ci = mean_ci(logs)
    ratio = math.exp(float(np.mean(logs)))
    low, high = (math.exp(ci.low), math.exp(ci.high)) if ci is not None else (None, None)
    verdict = stats.verdict(Interval(low=low, high=high) if ci is not None else None,
                            higher="compiled faster", lower="compiled slower") or stats.NO_DIFFERENCE
    result = {"device": describe([device]), "dtype": str(dtype), "torch": torch.__version__, "prompts": len(prompts),
              "new_tokens": args.new_tokens, "blocks": args.blocks, "eager_warmup_s": eager_warm,
              "compiled_first_call_s": compile_s,
              "eager_tokens_per_s": tokens / float(np.mean(times["eager"])),
              "compiled_tokens_per_s": tokens / float(np.mean(times["compiled"])),
              "speedup_compiled_vs_eager": ratio, "speedup_ci95": [low, high], "verdict": verdict,
              "same_tokens": outputs["eager"] == outputs["compiled"], "seconds": times}
    print(f"{result['device']} {dtype}: eager {result['eager_tokens_per_s']:.1f} tok/s, compiled "
          f"{result['compiled_tokens_per_s']:.1f} tok/s; compiled / eager {ratio:.3f}x "
          f"[{low:.3f}, {high:.3f}] over {args.blocks} block pairs: {verdict}; compile (first call) "
          f"{compile_s:.1f} s; same tokens: {result['same_tokens']}" if low is not None else json.dumps(result))
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
