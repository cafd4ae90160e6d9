"""Soak: many concurrent streams for a long time against the cpu-flavor server. Does it stay correct
and bounded under sustained load?

    .venv/bin/python scripts/bench_soak.py [--concurrency 32] [--seconds 600] [--max-tokens 32]
                                           [--prompts 8] [--k 2] [--out out/bench-soak]

What it does:
1. builds (once, under --out/work) the SmolLM2-135M-Instruct repository of the serving benchmarks:
   the embedded model, a 6-layer draft, draft length --k for the `chat` workload (smollm2_repo.py);
2. serves it with the bundled tritonserver on 127.0.0.1 (CpuServer, as `trtspec serve` does);
3. drives it with `trtspec perf` (closed loop: --concurrency streams, each sending its next request
   as soon as the last one ends, for --seconds) over the --prompts shortest MT-Bench first turns,
   rendered with the chat template;
4. samples the resident memory (RSS) of the server and all its python-backend stubs every 5 s.
It prints and writes (--out/soak.json) the requests, errors, timeouts, the number of distinct outputs
per prompt (each request's streamed text is hashed by perf: `output_sha256`), and RSS at the start,
end and peak. PASS: 0 errors, 0 timeouts, one output per prompt (greedy decoding is deterministic,
whatever else is in flight), and RSS at the end within 10% of RSS after the first minute.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smollm2_repo import build_repository  # noqa: E402

from trtspec.perf.options import PerfOptions  # noqa: E402
from trtspec.perf.runner import run_perf  # noqa: E402
from trtspec.triton_repo.ports import server_ports  # noqa: E402
from trtspec.triton_repo.serve import CpuServer  # noqa: E402
from trtspec.workloads import load_workload  # noqa: E402

MEMORY_GROWTH = 0.10  # allowed RSS growth from the end of the first minute to the end of the run


def tree_rss(pid: int) -> int:
    """Bytes resident in the server process and every process under it (the model stubs)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def sample_memory(pid: int, every_s: float, samples: list, stop: threading.Event) -> None:
    start = time.monotonic()
    while not stop.is_set():
        samples.append((time.monotonic() - start, tree_rss(pid)))
        stop.wait(every_s)


def write_prompts(path: Path, n: int) -> Path:
    """The n shortest MT-Bench first turns (perf renders them with the repository's chat template)."""
    samples = sorted(load_workload("chat=mt-bench").samples, key=lambda s: (len(str(s.messages)), s.id))[:n]
    path.write_text("".join(json.dumps({"messages": s.messages, "id": s.id}) + "\n" for s in samples))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--k", type=int, default=2, help="draft length served for the chat workload")
    ap.add_argument("--out", type=Path, default=Path("out/bench-soak"))
    args = ap.parse_args()
    out = args.out.resolve()
    repo, _ = build_repository(out / "work", {"chat": args.k})
    prompts = write_prompts(out / "work" / "soak-prompts.jsonl", args.prompts)
    server = CpuServer(repo, *server_ports(), log_file=out / "server.log").start(600)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_memory, args=(server.proc.pid, 5.0, samples, stop), daemon=True)
    sampler.start()
    try:
        res = run_perf(PerfOptions(url=server.grpc_url, workloads={"chat": str(prompts)},
                                   concurrency=[args.concurrency], duration_s=args.seconds,
                                   warmup=args.concurrency, max_tokens=args.max_tokens, timeout_s=600,
                                   out=out / "perf"))
    finally:
        stop.set()
        sampler.join()
        server.stop()
    return report(res, samples, args, out)


def report(res, samples: list[tuple[float, int]], args, out: Path) -> int:
    reqs = [q for r in res.runs for q in r.requests]
    outputs: dict[str, set] = defaultdict(set)
    for q in reqs:
        if q.status == "ok":
            outputs[q.prompt_id].add(q.output_sha256)
    errors = sum(q.status == "error" for q in reqs)
    timeouts = sum(q.status == "timeout" for q in reqs)
    after_1min = next((rss for t, rss in samples if t >= 60), samples[-1][1] if samples else 0)
    end = samples[-1][1] if samples else 0
    peak = max((rss for _, rss in samples), default=0)
    growth = end / after_1min - 1 if after_1min else float("nan")
    distinct = {p: len(d) for p, d in sorted(outputs.items())}
    ok = (res.completed and errors == 0 and timeouts == 0 and all(n == 1 for n in distinct.values())
          and growth <= MEMORY_GROWTH)
    summary = {"concurrency": args.concurrency, "seconds": args.seconds, "max_tokens": args.max_tokens,
               "k": args.k, "completed": res.completed, "error": res.error, "requests": len(reqs),
               "errors": errors, "timeouts": timeouts, "distinct_outputs_per_prompt": distinct,
               "output_tokens_per_s": [r.summary.output_tokens_per_s for r in res.runs],
               "rss_mb": {"start": samples[0][1] / 2**20 if samples else None, "after_1min": after_1min / 2**20,
                          "end": end / 2**20, "peak": peak / 2**20, "growth_after_1min": growth},
               "rss_samples_mb": [(round(t, 1), round(rss / 2**20, 1)) for t, rss in samples], "pass": ok}
    (out / "soak.json").write_text(json.dumps(summary, indent=1))
    mb = summary["rss_mb"]
    print(f"{len(reqs)} requests over {args.seconds:g} s at concurrency {args.concurrency}: {errors} errors, "
          f"{timeouts} timeouts; distinct outputs per prompt: {sorted(set(distinct.values())) or '-'} "
          f"over {len(distinct)} prompts")
    print(f"server RSS (MB): start {mb['start']:.0f}, after 1 min {mb['after_1min']:.0f}, end {mb['end']:.0f}, "
          f"peak {mb['peak']:.0f} ({growth:+.1%} after the first minute; allowed {MEMORY_GROWTH:.0%})")
    print(("PASS" if ok else "FAIL") + f"  ({out / 'soak.json'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
