"""Time `trtspec quantize` of the default model (SmolLM2-135M-Instruct): FP8 weights + FP8 KV cache,
calibrated on 64 MT-Bench + HumanEval prompts of at most 256 tokens, on the CPU.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_quantize.py [--threads 1] [--samples 64] [--seq-len 256]
        [--format fp8] [--kv-cache fp8] [--out DIR]

Prints the calibration time (ModelOpt's forward loop) and the whole quantize (load, calibrate,
export, self-check); the target is well under 5 minutes on a 2-core box. Measured on the shared
2-core dev VM (other jobs running): 104-109 s calibration, 115-124 s in all with 1 thread; 391 s
with 2 threads, because every small elementwise op then waits for the busy second core (a 66k-
element multiply: 19 us on 1 thread, 1.6 ms on 2). Hence the default of 1 thread here.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, see above)")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--format", default="fp8")
    ap.add_argument("--kv-cache", default="fp8")
    ap.add_argument("--calib", default="chat=mt-bench,code=humaneval")
    ap.add_argument("--out", type=Path, default=None, help="keep the checkpoint here (default: a temp dir)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trtspec.calib import CalibOptions, quantize_hf
    from trtspec.checkpoints.default_model import smollm2_dir

    hf = smollm2_dir()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "ckpt"
        start = time.perf_counter()
        quantize_hf(hf, out, fmt=args.format, kv_cache=args.kv_cache, dtype="bfloat16",
                    calib=CalibOptions(calib=args.calib, samples=args.samples, seq_len=args.seq_len, seed=0))
        total = time.perf_counter() - start
        calib = json.loads((out / "trtspec.json").read_text())["options"]["calibration"]
        size = sum(f.stat().st_size for f in out.glob("rank*.safetensors")) / 2**20
    print(f"SmolLM2-135M {args.format} + {args.kv_cache} KV, {calib['samples']} prompts / {calib['tokens']} tokens "
          f"(<= {args.seq_len} each), {args.threads} threads")
    print(f"calibration: {calib['seconds']:.1f} s   whole quantize: {total:.1f} s   checkpoint: {size:.0f} MiB")


if __name__ == "__main__":
    main()
