"""Do `trtspec perf`'s TTFT and ITL agree with genai-perf's? Same server, prompts, max_tokens, load.

Acceptance criterion: at concurrency 1 and 4, our mean and p50 TTFT and ITL are within 10% of what
genai-perf 0.0.16 (driving perf_analyzer 2.51) reports for the same requests.

Steps:
 1. tools: genai-perf 0.0.16 and tritonclient 2.51.0 (for the perf_analyzer binary its wheel ships)
    in their own venvs under ~/.cache/trtspec/venvs (created when missing: they pin numpy,
    protobuf and transformers versions the project's venv cannot have), plus the two shared
    libraries perf_analyzer links, symlinked from the nvidia-pytriton wheel;
 2. model: SmolLM2-135M-Instruct (the embedded default) as the target, its first 6 layers as the
    draft (as tests/conftest.py), a draft-target pair, a tuning.json with K fixed per workload, the
    cpu-flavor repository, served by the bundled tritonserver. SmolLM2 takes tens of ms per token
    here; a tiny model's sub-millisecond ITLs would compare the two clients' own overheads;
 3. prompts: the shortest MT-Bench and HumanEval first turns (a long prefill on 2 cores costs more
    than the decoding measured) in SmolLM2's chat template, stripped, sent as they are (--no-chat):
    genai-perf strips every prompt it reads, so only strip-invariant prompts reach the server
    identically from both tools;
 4. one `trtspec perf` export (--export-genai-perf) of all runs; then, per concurrency, ROUNDS rounds
    of short blocks: per workload our block (run_perf) and the exported genai-perf command, back to
    back, never both at once, the one going first alternating. The box is shared: other processes'
    load swings ITL by 2x within minutes, so one long run per tool compares two different machines
    (a first version did exactly that: ratios 0.69-1.38 on identical definitions). Alternating short
    blocks and pooling them puts both tools under the same mix of load;
 5. a table per workload x concurrency: pooled TTFT / ITL (mean, p50) of ours next to genai-perf's,
    ratio ours / genai-perf, PASS within 10%, and the mean output tokens. genai-perf reports only
    per-block aggregates, so its pooled figures are computed from perf_analyzer's per-request
    timestamps with genai-perf's definitions; every block checks that this reproduces genai-perf's own
    reported numbers (printed: worst ratio), and that its re-tokenized output length equals the
    server's count (a gap would change ITL, not TTFT).

Run: .venv/bin/python scripts/bench_genai_perf.py [--out out/bench_genai_perf] [--max-tokens 16] [--rounds 3]
Writes OUT/bench.json with every figure; exits 1 if any comparison fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smollm2_repo import build_repository  # noqa: E402
from trtspec.upstream.triton import GENAI_PERF_VERSION  # noqa: E402

VENVS = Path(os.environ.get("TRTSPEC_VENVS", Path.home() / ".cache" / "trtspec" / "venvs"))
GP_VENV, PA_VENV = VENVS / f"genai-perf-{GENAI_PERF_VERSION}", VENVS / "pa251"
K = {"chat": 1, "code": 1}  # draft length served per workload
TOLERANCE = 0.10


def ensure_venv(path: Path, requirement: str, exe: str) -> Path:
    """A venv at `path` with `requirement` (created once, PyPI through pip); returns bin/<exe>."""
    if not (path / "bin" / exe).exists():
        print(f"creating {path} ({requirement}) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", requirement], check=True)
    return path / "bin" / exe


def tool_env() -> dict:
    """PATH / LD_LIBRARY_PATH for genai-perf -> perf_analyzer 2.51, which links libb64.so.0d and
    libcudart.so.12: the nvidia-pytriton wheel has both under hashed names."""
    gp = ensure_venv(GP_VENV, f"genai-perf=={GENAI_PERF_VERSION}", "genai-perf")
    pa = ensure_venv(PA_VENV, "tritonclient==2.51.0", "perf_analyzer")
    import pytriton

    wheel_libs = Path(pytriton.__file__).resolve().parent.parent / "nvidia_pytriton.libs"
    libs = VENVS / "pa_libs"
    libs.mkdir(parents=True, exist_ok=True)
    for pattern, name in (("libb64-*.so.0d", "libb64.so.0d"), ("libcudart-*.so.12*", "libcudart.so.12")):
        src = sorted(wheel_libs.glob(pattern))
        if not src:
            sys.exit(f"{wheel_libs}: no {pattern} (perf_analyzer needs it)")
        link = libs / name
        link.unlink(missing_ok=True)
        link.symlink_to(src[0])
    return dict(os.environ, PATH=f"{pa.parent}:{os.environ['PATH']}", LD_LIBRARY_PATH=str(libs),
                HF_HUB_OFFLINE="1", GENAI_PERF=str(gp))


def write_prompts(work: Path, n: int, tok_dir: Path) -> dict[str, str]:
    """The n shortest first turns of MT-Bench (chat) and HumanEval (code), rendered with SmolLM2's chat
    template as `trtspec perf` renders them, then stripped: the template ends in "assistant\n" and
    genai-perf strips every prompt, so both tools send "...assistant" (the model then writes the newline
    itself). Sent with --no-chat, i.e. as they are. Plain, untemplated prompts make this instruct model
    stop after a handful of tokens, too few for a per-token latency."""
    from transformers import AutoTokenizer

    from trtspec.workloads import load_workload, render_text

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    files = {}
    for name, source in (("chat", "mt-bench"), ("code", "humaneval")):
        samples = sorted(load_workload(f"{name}={source}").samples, key=lambda s: (len(str(s.messages)), s.id))[:n]
        texts = [render_text(s, tok, chat=True).strip() for s in samples]
        path = work / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"prompt": t, "id": s.id}) + "\n" for s, t in zip(samples, texts)))
        files[name] = str(path)
    return files


def ours(url: str, files: dict, workload: str, c: int, args, tok: Path, out: Path) -> None:
    from trtspec.perf.runner import PerfOptions, run_perf

    run_perf(PerfOptions(url=url, workloads={workload: files[workload]}, concurrency=[c], requests=args.requests * c,
                         warmup=c, max_tokens=args.max_tokens, chat=False, tokenizer=tok, timeout_s=900,
                         progress=False, out=out))


def theirs(export: Path, run: dict, env: dict, wait: bool = True, attempts: int = 2) -> subprocess.Popen:
    """Start (and with `wait`, finish) one exported genai-perf command. perf_analyzer 2.51 now and then
    leaves an empty profile export at concurrency > 1 (genai-perf then fails parsing it); such a
    block is run again once, and a second failure stops the bench."""
    for attempt in range(1, attempts + 1):
        subprocess.run(["rm", "-rf", run["artifact_dir"]], cwd=export, check=True)
        log = open(export / f"{Path(run['artifact_dir']).name}.log", "w")
        p = subprocess.Popen([env["GENAI_PERF"], *run["argv"][1:]], cwd=export, env=env, stdout=log,
                             stderr=subprocess.STDOUT)
        if not wait:
            return p
        if p.wait() == 0:
            return p
        print(f"genai-perf failed (exit {p.returncode}, attempt {attempt}/{attempts}); see {log.name}", flush=True)
    finish(p, log.name)
    return p


def finish(p: subprocess.Popen, log: str) -> None:
    if p.wait() != 0:
        sys.exit(f"genai-perf failed (exit {p.returncode}); see {log}")


def wait_for_perf_analyzer(export: Path, artifact_dir: str, gp: subprocess.Popen) -> None:
    """Until genai-perf (tokenizer loaded, inputs written) has started perf_analyzer for this run."""
    needle = f"{artifact_dir}/".encode()
    while gp.poll() is None:
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    cmd = (d / "cmdline").read_bytes()
                except OSError:
                    continue
                if cmd.startswith(b"perf_analyzer") and needle in cmd:
                    return
        time.sleep(0.2)


def our_requests(results_json: Path) -> tuple[list[float], list[float], list[int]]:
    """TTFT and ITL (seconds) and output tokens of the successful requests of one `trtspec perf` block."""
    from trtspec.perf.schema import load_results

    (run,) = load_results(results_json).runs
    ok = [q for q in run.requests if q.status == "ok"]
    return [q.ttft_s for q in ok], [q.itl_s for q in ok], [q.output_tokens for q in ok]


def their_requests(artifact_dir: Path) -> tuple[list[float], list[float], list[int]]:
    """The same per request from perf_analyzer's own timestamps (profile_export.json), with
    trtspec.perf.metrics.itl and the server's num_output_tokens. The last response of a request is the
    empty final one (no text; its other outputs are unset), so the count is the last one with text."""
    from trtspec.perf.metrics import itl

    (export,) = sorted(Path(artifact_dir).glob("*/profile_export.json"))
    ttfts, itls, ns = [], [], []
    for q in json.loads(export.read_text())["experiments"][0]["requests"]:
        ts, t0 = q["response_timestamps"], q["timestamp"]
        with_text = [o for o in q["response_outputs"] if o.get("text_output")]
        n = int(with_text[-1]["num_output_tokens"]) if with_text else 0
        ttfts.append((ts[0] - t0) / 1e9)  # ns -> s
        itls.append(itl((ts[-1] - t0) / 1e9, (ts[0] - t0) / 1e9, n))
        ns.append(n)
    return ttfts, itls, ns


def genai_perf_stats(artifact_dir: Path) -> dict:
    """genai-perf's own aggregates of a block, in ms."""
    from trtspec.perf.genai_perf import read_genai_perf_stats

    st = read_genai_perf_stats(artifact_dir)
    return {"ttft_mean": st["time_to_first_token"]["avg"], "ttft_p50": st["time_to_first_token"]["p50"],
            "itl_mean": st["inter_token_latency"]["avg"], "itl_p50": st["inter_token_latency"]["p50"],
            "osl": st["output_sequence_length"]["avg"]}


def pooled(ttfts: list, itls: list) -> dict:
    from trtspec.perf.stats import percentiles

    t, i = percentiles(ttfts), percentiles(itls)
    return {"ttft_mean": t.mean * 1e3, "ttft_p50": t.p50 * 1e3, "itl_mean": i.mean * 1e3, "itl_p50": i.p50 * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/bench_genai_perf"))
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--requests", type=int, default=4, help="measured requests per block = this x concurrency")
    ap.add_argument("--rounds", type=int, default=3, help="alternating blocks per tool, workload and concurrency")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per workload")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--report-only", action="store_true", help="print the table of a finished run again")
    ap.add_argument("--simultaneous", action="store_true",
                    help="run both clients at once (each at concurrency c): identical machine state for both")
    args = ap.parse_args()
    concurrency = [int(x) for x in args.concurrency.split(",")]
    out = args.out.resolve()
    if args.report_only:
        return report(out, args)
    env = tool_env()

    import torch

    torch.set_num_threads(1)  # this process only sends requests; the server keeps the cores
    from trtspec.perf.genai_perf import export_for_options
    from trtspec.perf.runner import PerfOptions
    from trtspec.triton_repo.ports import server_ports
    from trtspec.triton_repo.serve import CpuServer

    t0 = time.time()
    repo, tok = build_repository(out / "work", K)
    files = write_prompts(out / "work", args.prompts, tok)
    server = CpuServer(repo, *server_ports(), log_file=out / "server.log").start(600)
    rows = []
    try:
        url = server.grpc_url
        all_opts = PerfOptions(url=url, workloads=files, concurrency=concurrency, requests=None, warmup=1,
                               max_tokens=args.max_tokens, chat=False, tokenizer=tok, progress=False, out=out / "x")
        export = export_for_options(all_opts, out / "genai_perf").parent
        man = json.loads((export / "genai_perf_export.json").read_text())
        for c in concurrency:
            for rnd in range(args.rounds):
                for wi, w in enumerate(files):
                    run = next(r for r in man["runs"] if r["workload"] == w and r["concurrency"] == c)
                    argv = list(run["argv"])  # both tools: the same explicit request count and warm-up
                    argv[argv.index("--request-count") + 1] = str(args.requests * c)
                    argv[argv.index("--warmup-request-count") + 1] = str(c)
                    art = argv[argv.index("--artifact-dir") + 1] = f"{run['artifact_dir']}-r{rnd}"
                    order = ("ours", "genai-perf") if (rnd + wi) % 2 == 0 else ("genai-perf", "ours")
                    if args.simultaneous:  # both clients at concurrency c at once: the server sees 2c
                        print(f"[{time.time() - t0:6.0f} s] {w} c={c} round {rnd}: both ...", flush=True)
                        gp = theirs(export, {"artifact_dir": art, "argv": argv}, env, wait=False)
                        wait_for_perf_analyzer(export, art, gp)
                        ours(url, files, w, c, args, tok, out / "ours" / f"{w}-c{c}-r{rnd}")
                        finish(gp, str(export / f"{Path(art).name}.log"))
                        order = ("simultaneous",)
                    for who in order if not args.simultaneous else ():
                        print(f"[{time.time() - t0:6.0f} s] {w} c={c} round {rnd}: {who} ...", flush=True)
                        if who == "ours":
                            ours(url, files, w, c, args, tok, out / "ours" / f"{w}-c{c}-r{rnd}")
                        else:
                            theirs(export, {"artifact_dir": art, "argv": argv}, env)
                    rows.append({"workload": w, "concurrency": c, "round": rnd, "first": order[0],
                                 "ours": f"ours/{w}-c{c}-r{rnd}", "genai_perf": f"genai_perf/{art}"})
    finally:
        server.stop()
    (out / "runs.json").write_text(json.dumps(rows, indent=1) + "\n")
    return report(out, args)


def report(out: Path, args) -> int:
    """The comparison from the saved blocks (re-print it with --report-only).

    Per workload x concurrency, each tool's blocks are pooled: ours from results.json, genai-perf's
    from perf_analyzer's per-request timestamps through genai-perf's definitions. That the latter are
    genai-perf's own numbers is checked per block: `defs` is (our maths on its timestamps) / (genai-perf's
    reported figure) for the four statistics, worst case, and `osl` compares genai-perf's re-tokenized
    output length with the server's count."""
    rows = json.loads((out / "runs.json").read_text())
    groups: dict = {}
    worst_defs, osl_gap = 1.0, 0.0
    for r in rows:
        g = groups.setdefault((r["workload"], r["concurrency"]), {"ours": ([], [], []), "gp": ([], [], []),
                                                                   "blocks": 0})
        g["blocks"] += 1
        for key, got in (("ours", our_requests(out / r["ours"] / "results.json")),
                         ("gp", their_requests(out / r["genai_perf"]))):
            for acc, xs in zip(g[key], got):
                acc.extend(xs)
        st = genai_perf_stats(out / r["genai_perf"])
        mine = pooled(*their_requests(out / r["genai_perf"])[:2])
        for m in ("ttft_mean", "ttft_p50", "itl_mean", "itl_p50"):
            worst_defs = max(worst_defs, abs(mine[m] / st[m] - 1) + 1)
        ns = their_requests(out / r["genai_perf"])[2]
        osl_gap = max(osl_gap, abs(st["osl"] - sum(ns) / len(ns)))
    ok = True
    print(f"\nSmolLM2-135M-Instruct + 6-layer draft (K={K}), max_tokens {args.max_tokens}; per workload x "
          f"concurrency {args.rounds} alternating blocks per tool of {args.requests} x c requests; times in ms")
    print(f"{'workload':<8} {'c':>2} {'metric':<10} {'ours':>9} {'genai-perf':>11} {'ratio':>7}  verdict  (requests)")
    summary = []
    for (w, c), g in groups.items():
        a, b = pooled(*g["ours"][:2]), pooled(*g["gp"][:2])
        for m in ("ttft_mean", "ttft_p50", "itl_mean", "itl_p50"):
            ratio = a[m] / b[m]
            good = abs(ratio - 1) <= TOLERANCE
            ok &= good
            summary.append({"workload": w, "concurrency": c, "metric": m, "ours_ms": a[m], "genai_perf_ms": b[m],
                            "ratio": ratio, "pass": good})
            print(f"{w:<8} {c:>2} {m:<10} {a[m]:9.1f} {b[m]:11.1f} {ratio:7.3f}  {'PASS' if good else 'FAIL'}     "
                  f"({len(g['ours'][0])} / {len(g['gp'][0])})")
        print(f"{'':<8} {'':>2} {'tokens':<10} {np.mean(g['ours'][2]):9.2f} {np.mean(g['gp'][2]):11.2f}   "
              f"(mean output tokens per request)")
    print(f"genai-perf's definitions vs ours on the same timestamps: worst ratio {worst_defs:.4f}; "
          f"its re-tokenized output length vs the server's count: worst gap {osl_gap:.2f} tokens per request")
    (out / "bench.json").write_text(json.dumps({"tolerance": TOLERANCE, "max_tokens": args.max_tokens, "k": K,
                                                "rounds": args.rounds, "requests": args.requests, "blocks": rows,
                                                "comparison": summary, "definitions_worst_ratio": worst_defs,
                                                "osl_worst_gap": osl_gap, "pass": ok}, indent=1) + "\n")
    print(f"\n{'PASS' if ok else 'FAIL'}: every TTFT / ITL (mean, p50) within {TOLERANCE:.0%} of genai-perf's"
          f"; wrote {out / 'bench.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
