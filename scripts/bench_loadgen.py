"""How fast is the `trtspec perf` load generator itself? Requests/s against a model that does no work,
next to perf_analyzer 2.51 (Triton's C++ load generator) on the same model and server.

    .venv/bin/python scripts/bench_loadgen.py [--concurrency 32] [--processes 1] [--tokens 3] [--seconds 5] [--tries 3]
                                              [--no-perf-analyzer]

What it does:
1. writes a python-backend model repository into a temp dir: `echo`, decoupled, with generate's
   request interface (text_input, max_tokens, stream in) that answers each request with
   max_tokens text_output responses and the final flag straight from `execute`, no sleep;
2. serves it with the bundled tritonserver (the same launch as `trtspec serve`, CpuServer);
3. runs trtspec's load generator (closed loop, --concurrency workers over --processes client
   processes, --seconds per try) and prints its requests/s (best of --tries: the box is shared, so
   timings are noisy);
4. runs perf_analyzer 2.51 (gRPC streaming, same concurrency and responses per request) and prints
   its rate and the ratio. perf_analyzer comes from the tritonclient==2.51.0 wheel in its own venv
   (it pins numpy<2 / protobuf<5), created under ~/.cache/trtspec/venvs/ on first use, with the two
   libraries it needs linked from this environment's nvidia_pytriton.libs
   (reference/cpu-stack.md §5.1).
Acceptance: trtspec's rate >= 1000 requests/s on the development box (2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trtspec.triton_repo.ports import server_ports  # noqa: E402
from trtspec.triton_repo.serve import CpuServer, find_bundle  # noqa: E402

MODEL = "echo"
CONFIG = """name: "echo"
backend: "python"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input { name: "text_input" data_type: TYPE_STRING dims: 1 }
input { name: "max_tokens" data_type: TYPE_INT32 dims: 1 }
input { name: "stream" data_type: TYPE_BOOL dims: 1 optional: true }
output { name: "text_output" data_type: TYPE_STRING dims: -1 }
dynamic_batching { }
instance_group { kind: KIND_CPU count: 1 }
"""
MODEL_PY = textwrap.dedent('''
    import numpy as np
    import triton_python_backend_utils as pb_utils

    FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    PIECE = np.array([[b"tok "]], dtype=object)


    class TritonPythonModel:
        def execute(self, requests):
            for request in requests:
                n = int(pb_utils.get_input_tensor_by_name(request, "max_tokens").as_numpy().reshape(-1)[0])
                sender = request.get_response_sender()
                for _ in range(n):
                    sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", PIECE)]))
                sender.send(flags=FINAL)
            return None
''')
PA_VERSION = "2.51.0"
PA_LIBS = {"libb64.so.0d": "libb64-*.so.0d", "libcudart.so.12": "libcudart-*.so.12*"}


def write_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / MODEL / "1").mkdir(parents=True)
    (repo / MODEL / "config.pbtxt").write_text(CONFIG)
    (repo / MODEL / "1" / "model.py").write_text(MODEL_PY)
    (repo / "trtspec-repo.json").write_text(json.dumps({"flavor": "cpu"}))  # CpuServer serves cpu-flavor repos
    return repo


def trtspec_rate(url: str, concurrency: int, seconds: float, tokens: int, out: Path,
                 processes: int = 1) -> tuple[float, dict]:
    from trtspec.perf.runner import PerfOptions, run_perf

    out.mkdir(parents=True, exist_ok=True)
    prompts = out.parent / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"hello {i}"}) + "\n" for i in range(64)))
    res = run_perf(PerfOptions(url=url, model=MODEL, workloads={"bench": str(prompts)}, concurrency=[concurrency],
                               duration_s=seconds, warmup=concurrency * 4, timeout_s=30, max_tokens=tokens,
                               chat=False, progress=False, processes=processes, out=out))
    s = res.runs[0].summary
    return s.requests_per_s, {"ok": s.requests_ok, "errors": s.errors, "timeouts": s.timeouts,
                              "tokens_per_request": s.output_tokens / max(1, s.requests_ok)}


def perf_analyzer_env() -> tuple[Path, dict]:
    """perf_analyzer 2.51 in its own venv under ~/.cache/trtspec/venvs/, created if missing."""
    venv = Path(os.environ.get("TRTSPEC_CACHE", Path.home() / ".cache" / "trtspec")) / "venvs" / f"perf-analyzer-{PA_VERSION}"
    binary = venv / "bin" / "perf_analyzer"
    if not binary.is_file():
        print(f"creating {venv} (tritonclient=={PA_VERSION}, for its perf_analyzer binary)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"tritonclient=={PA_VERSION}"], check=True)
    libs = venv / "pa_libs"
    libs.mkdir(exist_ok=True)
    src = find_bundle().libs
    for name, pattern in PA_LIBS.items():
        found = sorted(src.glob(pattern))
        if not found:
            raise SystemExit(f"{src}: no {pattern} (needed by perf_analyzer as {name})")
        link = libs / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(found[0])
    env = dict(os.environ, LD_LIBRARY_PATH=str(libs), PATH=f"{venv / 'bin'}:{os.environ.get('PATH', '')}")
    return binary, env


def perf_analyzer_rate(url: str, concurrency: int, seconds: float, tokens: int, work: Path) -> float:
    binary, env = perf_analyzer_env()
    data = work / "pa_input.json"
    data.write_text(json.dumps({"data": [{"text_input": ["hello"], "max_tokens": [tokens], "stream": [True]}]}))
    cmd = [str(binary), "-m", MODEL, "-u", url, "-i", "grpc", "--streaming", "--async", "--input-data", str(data),
           "--concurrency-range", str(concurrency), "--measurement-interval", str(int(seconds * 1000)),
           "--stability-percentage", "50", "--max-trials", "3"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    m = re.search(r"Concurrency: \d+, throughput: ([\d.]+) infer/sec", proc.stdout)
    if not m:
        raise SystemExit("perf_analyzer failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--tokens", type=int, default=3, help="text_output responses per request")
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--processes", type=int, default=1, help="client processes of trtspec perf (--processes)")
    ap.add_argument("--no-perf-analyzer", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="trtspec-bench-loadgen-") as tmp:
        work = Path(tmp)
        repo = write_repo(work)
        with CpuServer(repo, *server_ports(), log_file=work / "server.log").start(120) as server:
            ours = []
            for i in range(args.tries):
                rate, info = trtspec_rate(server.grpc_url, args.concurrency, args.seconds, args.tokens, work / f"ours{i}",
                                          args.processes)
                ours.append(rate)
                print(f"trtspec perf    try {i + 1}: {rate:8.1f} requests/s  {info}", flush=True)
            pa = []
            if not args.no_perf_analyzer:
                for i in range(args.tries):
                    rate = perf_analyzer_rate(server.grpc_url, args.concurrency, args.seconds, args.tokens, work)
                    pa.append(rate)
                    print(f"perf_analyzer   try {i + 1}: {rate:8.1f} requests/s", flush=True)
    best = max(ours)
    line = f"best of {args.tries}: trtspec perf {best:.1f} requests/s at concurrency {args.concurrency} " \
           f"({args.processes} client processes), {args.tokens} responses per request"
    if pa:
        line += f"; perf_analyzer {PA_VERSION} {max(pa):.1f} requests/s; ratio {best / max(pa):.2f}"
    print(line)
    print("PASS" if best >= 1000 else "BELOW 1000 requests/s", "(acceptance: >= 1000 requests/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
