#!/usr/bin/env python
"""Peak memory of `trtspec convert` on SmolLM2-135M-Instruct (fp32 -> float16) against the bound
`2 x largest source tensor + 300 MB`.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_convert_memory.py [--hf DIR] [--dtype float16]

The conversion runs in a child process under `/usr/bin/time -v` (or, without it, is measured with
`getrusage(RUSAGE_CHILDREN)`); a second child that only imports the converter gives the fixed cost
of the interpreter, torch and trtspec, so the part that scales with the model is visible. Prints the
numbers and PASS/FAIL; exits 1 on FAIL. MB here is 10^6 bytes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MB = 1_000_000
SLACK = 300 * MB
TIME = "/usr/bin/time"
CLI = "from trtspec.cli import main; main()"
IMPORTS = "import torch, rich.progress, trtspec.cli, trtspec.checkpoints.convert"


def largest_tensor(hf_dir: Path) -> tuple[str, int, str, tuple[int, ...]]:
    """(name, bytes in the source dtype, dtype, shape) of the largest tensor, from the headers."""
    from trtspec.checkpoints.safetensors_io import open_weights

    infos = open_weights(hf_dir).infos
    name = max(infos, key=lambda n: infos[n].end - infos[n].begin)
    i = infos[name]
    return name, i.end - i.begin, str(i.dtype).replace("torch.", ""), i.shape


def peak_rss(cmd: list[str], env: dict[str, str]) -> tuple[int, float, str]:
    """Run `cmd`; return (peak RSS bytes, wall seconds, how it was measured). Exits on failure."""
    import time

    if Path(TIME).is_file() and os.access(TIME, os.X_OK):
        t0 = time.monotonic()
        p = subprocess.run([TIME, "-v", *cmd], env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if p.returncode != 0:
            sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        if m:
            return int(m.group(1)) * 1024, wall, "/usr/bin/time -v"
        sys.exit(f"could not find the peak RSS in the output of {TIME} -v:\n{p.stderr}")
    # RUSAGE_CHILDREN holds the largest peak of all waited-for children, so measure each command in
    # a fresh helper process whose only child is the command.
    helper = ("import resource, subprocess, sys, time; t = time.monotonic(); "
              "r = subprocess.run(sys.argv[1:]).returncode; w = time.monotonic() - t; "
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, w, file=sys.stderr); sys.exit(r)")
    p = subprocess.run([sys.executable, "-c", helper, *cmd], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    kb, wall = p.stderr.strip().splitlines()[-1].split()
    return int(kb) * 1024, float(wall), "getrusage(RUSAGE_CHILDREN)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hf", type=Path, help="HF model directory (default: the embedded SmolLM2)")
    ap.add_argument("--dtype", default="float16")
    args = ap.parse_args()

    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if args.hf is None:
        from trtspec.checkpoints.default_model import smollm2_dir

        args.hf = smollm2_dir()
    name, nbytes, dtype, shape = largest_tensor(args.hf)
    bound = 2 * nbytes + SLACK

    exe = shutil.which("trtspec", path=str(Path(sys.executable).parent))
    cli = [exe] if exe else [sys.executable, "-c", CLI]
    with tempfile.TemporaryDirectory(prefix="trtspec-bench-") as tmp:
        out = Path(tmp) / "ckpt"
        peak, wall, how = peak_rss([*cli, "convert", "--hf", str(args.hf), "--out", str(out),
                                    "--dtype", args.dtype], env)
        written = sum(f.stat().st_size for f in out.glob("rank*.safetensors"))
    base, _, _ = peak_rss([sys.executable, "-c", IMPORTS], env)

    ok = peak <= bound
    print(f"model            {args.hf}")
    print(f"command          {' '.join(Path(c).name if i == 0 else c for i, c in enumerate(cli))} convert "
          f"--dtype {args.dtype}  ({wall:.1f} s, {written / MB:.1f} MB written)")
    print(f"largest tensor   {name} {dtype} {list(shape)} = {nbytes / MB:.1f} MB")
    print(f"peak RSS         {peak / MB:.1f} MB  (measured with {how})")
    print(f"  import cost    {base / MB:.1f} MB  (python + torch + trtspec, no conversion)")
    print(f"  conversion     {(peak - base) / MB:.1f} MB  above the import cost "
          f"({(peak - base) / nbytes:.2f} x largest tensor)")
    print(f"bound            {bound / MB:.1f} MB  (2 x largest tensor + {SLACK // MB} MB)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
