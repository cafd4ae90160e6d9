"""Reproduce a `trtspec perf` invocation with genai-perf 0.0.16 (NVIDIA's LLM benchmark over
perf_analyzer), so our numbers can be checked against a tool we did not write.

`export_genai_perf` writes into a directory:
- `inputs/<workload>.jsonl`: the prompts of each workload, one `{"text": ...}` per line, in the order
  `trtspec perf` sends them (rendered and shuffled exactly as trtspec.perf.prompts does);
- `run_genai_perf.sh`: one `genai-perf profile` command per run of the perf invocation (workload x
  load point x speculation on/off, the two modes in perf's order: alternating from load point to
  load point), against the same model and URL, streaming, with the same max_tokens, request count
  and warm-up;
- `genai_perf_export.json`: the runs with their artifact directories and argv (what
  scripts/bench_genai_perf.py reads to pair genai-perf's numbers with ours).
A sweep (perf.sweep) or interleaved blocks (perf.blocks > 1) are refused: plain runs one after the
other reproduce neither.

How our request maps onto genai-perf's, and why each flag (genai-perf 0.0.16 source, read):
- `--endpoint-type kserve --backend tensorrtllm --streaming`: gRPC streaming to a Triton model with
  text_input / max_tokens / stream inputs. Its payload always adds `exclude_input_in_output: true`,
  which the repository's `generate` declares for that reason.
- `--output-tokens-mean N --output-tokens-stddev 0`: the only way to set max_tokens (a bounded
  normal sample; stddev 0 gives exactly N). Not `--output-tokens-mean-deterministic`: that adds
  `min_length` (generate takes it as min_tokens), which perf does not send.
- `--extra-inputs '{"workload": ...}'`, and `'{"speculation": false}'` for baseline runs (speculation
  runs send no speculation input, as perf does): the JSON form, because the NAME:VALUE form breaks
  on a ':' in a workload name.
- sampled workloads (trtspec.perf.sampling): `--extra-inputs '{"temperature": T, "top_p": P,
  "top_k": K, "seed": S}'`. genai-perf's extra inputs are the same for every request, so the seed is
  one per run (the workload's sampling seed) where perf sends one per prompt: the same settings,
  other random draws, so compare distributions, not texts.
- `--request-count` / `--warmup-request-count` / `--concurrency` or `--request-rate` (plus
  perf_analyzer's `--request-distribution poisson` after `--`, as our open loop is Poisson);
  `--measurement-interval` for a duration-bounded run (perf_analyzer's windows, not one run: the
  closest genai-perf has).
- `--tokenizer DIR`: genai-perf counts output tokens by re-tokenizing the streamed text; it must
  be the served model's tokenizer (we count with the server's num_output_tokens), and a local
  directory (`HF_HUB_OFFLINE=1`: never the hub).
Known difference: genai-perf strips leading and trailing whitespace from every prompt of an input
file (its file retriever calls `.strip()`), so a prompt ending in a newline (every chat-template
prompt of SmolLM2 ends with "assistant\\n") reaches the model without it. The export counts such
prompts and says so in the script and the manifest; for identical requests use prompts that do not
start or end with whitespace (scripts/bench_genai_perf.py does).
"""

from __future__ import annotations

import asyncio
import json
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import TrtspecError
from ..fsutil import atomic_dir, read_json, write_text_atomic
from ..upstream.triton import GENAI_PERF_VERSION
from . import client, prompts
from .compare import load_predictions
from .options import default_requests, points_of
from .load import block_schedule
from .sampling import workload_sampling

SCRIPT = "run_genai_perf.sh"
MANIFEST = "genai_perf_export.json"


@dataclass
class GenaiPerfRun:
    workload: str
    speculation: bool
    concurrency: int | None
    request_rate: float | None
    artifact_dir: str  # relative to the export directory
    argv: list[str]


def _safe(name: str) -> str:
    """A workload name as a file name (any string is a valid workload name)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).strip("._") or "workload"


def _run_name(workload: str, speculation: bool, concurrency: int | None, rate: float | None) -> str:
    point = f"c{concurrency}" if concurrency is not None else f"r{rate:g}"
    return f"{_safe(workload)}-{'spec' if speculation else 'base'}-{point}"


def pa_warmup(warmup: int, concurrency: int | None) -> int:
    """perf_analyzer 2.51 never finishes its warm-up when 0 < warm-up requests < concurrency (seen here:
    warm-up 1 at concurrency 2 hangs, 2 and 3 finish), so the export sends at least `concurrency`
    warm-up requests. Warm-up requests are not measured; only the server's warm state can differ."""
    return max(warmup, concurrency or 0) if warmup else 0


def genai_perf_argv(*, model: str, url: str, workload: str, input_file: str, tokenizer: str, max_tokens: int,
                    speculation: bool | None, concurrency: int | None, request_rate: float | None,
                    requests: int | None, duration_s: float | None, warmup: int, seed: int,
                    artifact_dir: str, sampling: dict | None = None) -> list[str]:
    """The genai-perf command (argv, `genai-perf` first) for one run. sampling: the generate inputs
    of a sampled workload ({"temperature": ..., ...}), None for greedy."""
    argv = ["genai-perf", "profile", "-m", model, "--endpoint-type", "kserve", "--backend", "tensorrtllm",
            "--streaming", "-u", url, "--tokenizer", tokenizer, "--input-file", input_file,
            "--output-tokens-mean", str(max_tokens), "--output-tokens-stddev", "0",
            "--extra-inputs", json.dumps({"workload": workload})]
    if speculation is not None:
        argv += ["--extra-inputs", json.dumps({"speculation": speculation})]
    if sampling:
        argv += ["--extra-inputs", json.dumps(sampling)]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    else:
        argv += ["--request-rate", repr(request_rate)]  # exactly the rate perf sends at (not :g's 6 digits)
    if duration_s is not None:
        argv += ["--measurement-interval", str(int(round(duration_s * 1000)))]
    else:
        argv += ["--request-count", str(requests or default_requests(concurrency, request_rate))]
    if warmup:
        argv += ["--warmup-request-count", str(pa_warmup(warmup, concurrency))]
    argv += ["--random-seed", str(seed), "--artifact-dir", artifact_dir]
    if concurrency is None:
        argv += ["--", "--request-distribution", "poisson"]
    return argv


def export_genai_perf(out_dir: Path, *, prompts: dict[str, list[tuple[str, str]]], url: str, model: str,
                      tokenizer: Path | str, max_tokens: int, concurrency: list[int], request_rate: float | None = None,
                      requests: int | None = None, duration_s: float | None = None, warmup: int = 2,
                      baseline: bool = False, seed: int = 0, overwrite: bool = True,
                      sampling: dict[str, dict] | None = None) -> Path:
    """Write the inputs, the script and the manifest (see the module docstring); returns the script.

    `prompts`: {workload: [(sample id, prompt text)]} in sending order (trtspec.perf.prompts.render_all).
    `sampling`: {workload: generate's sampling inputs} for sampled workloads (genai_perf_inputs).
    The directory is written atomically (a failed export leaves nothing half-written)."""
    if not prompts or any(not p for p in prompts.values()):
        raise TrtspecError("prompts: every workload needs at least one prompt")
    tokenizer = Path(tokenizer)
    if not tokenizer.is_dir():
        raise TrtspecError(f"tokenizer: {tokenizer} is not a directory (genai-perf re-tokenizes the streamed text "
                           "with the served model's tokenizer)")
    out_dir = Path(out_dir)
    points = points_of(concurrency, request_rate)
    runs: list[GenaiPerfRun] = []
    stripped: dict[str, list[str]] = {}
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        (tmp / "inputs").mkdir()
        files = {}
        for i, (name, items) in enumerate(prompts.items()):
            fname = f"inputs/{i:02d}-{_safe(name)}.jsonl"  # the index keeps two names that sanitise alike apart
            write_text_atomic(tmp / fname, "".join(json.dumps({"text": text}, ensure_ascii=False) + "\n"
                                                   for _, text in items))
            files[name] = fname
            stripped[name] = [pid for pid, text in items if text != text.strip()]
        for point, (name, (c, r)) in enumerate((name, p) for name in prompts for p in points):
            # speculation on and off in perf's order: which goes first alternates from load point to load
            # point (order.forward), so the half sent second, favoured by a warm server, is not always one mode
            for spec in ([on for _, on, _ in block_schedule(1, 1, point)] if baseline else [True]):
                art = f"artifacts/{len(runs):02d}-{_run_name(name, spec, c, r)}"
                argv = genai_perf_argv(model=model, url=url, workload=name, input_file=files[name],
                                       tokenizer=str(tokenizer.resolve()), max_tokens=max_tokens,
                                       speculation=None if spec else False, concurrency=c,
                                       request_rate=r, requests=requests, duration_s=duration_s, warmup=warmup,
                                       seed=seed, artifact_dir=art, sampling=(sampling or {}).get(name))
                runs.append(GenaiPerfRun(name, spec, c, r, art, argv))
        manifest = {"genai_perf_version": GENAI_PERF_VERSION, "url": url, "model": model,
                    "tokenizer": str(tokenizer.resolve()), "max_tokens": max_tokens, "inputs": files,
                    "prompts_changed_by_strip": stripped, "runs": [asdict(r) for r in runs]}
        write_text_atomic(tmp / MANIFEST, json.dumps(manifest, indent=1) + "\n")
        write_text_atomic(tmp / SCRIPT, _script(runs, stripped, warmup))
        (tmp / SCRIPT).chmod(0o755)
    return out_dir / SCRIPT


def _script(runs: list[GenaiPerfRun], stripped: dict[str, list[str]], warmup: int) -> str:
    lines = ["#!/usr/bin/env bash",
             f"# genai-perf {GENAI_PERF_VERSION} commands reproducing a `trtspec perf` invocation (written by trtspec).",
             f"# Needs genai-perf=={GENAI_PERF_VERSION} and perf_analyzer (2.51: the tritonclient==2.51.0 wheel "
             "ships it) on PATH;",
             "# GENAI_PERF overrides the genai-perf executable. Runs one after the other, never in parallel.",
             "# Each run's results: artifacts/<run>/profile_export_genai_perf.{json,csv}."]
    if any(pa_warmup(warmup, r.concurrency) != warmup for r in runs):
        lines.append(f"# NOTE: warm-up raised from {warmup} to the concurrency where it was lower (perf_analyzer "
                     "2.51 hangs otherwise).")
    for name, ids in stripped.items():
        if ids:
            lines.append(f"# NOTE: genai-perf strips leading/trailing whitespace from prompts: {len(ids)} prompt(s) of "
                         f"workload {name!r} reach the model changed (see {MANIFEST}).")
    lines += ["set -euo pipefail", 'cd "$(dirname "$0")"', "export HF_HUB_OFFLINE=1",
              'GENAI_PERF="${GENAI_PERF:-genai-perf}"', ""]
    for r in runs:
        # perf_analyzer refuses to overwrite a profile export: a re-run starts from a clean directory
        lines.append(f"rm -rf {shlex.quote(r.artifact_dir)}")
        lines.append(f"echo '== {r.artifact_dir}' >&2")
        lines.append('"$GENAI_PERF" ' + " ".join(shlex.quote(a) for a in r.argv[1:]))
    return "\n".join(lines) + "\n"


def read_genai_perf_stats(artifact_dir: Path) -> dict:
    """genai-perf's own aggregates of one run (profile_export_genai_perf.json, times in ms), found in the
    artifact directory or its one subdirectory (genai-perf nests <model>-<backend>-<load>/ there)."""
    artifact_dir = Path(artifact_dir)
    found = sorted(artifact_dir.glob("profile_export_genai_perf.json")) or \
        sorted(artifact_dir.glob("*/profile_export_genai_perf.json"))
    if not found:
        raise TrtspecError(f"{artifact_dir}: no profile_export_genai_perf.json (did the genai-perf run finish?)")
    return read_json(found[0], "genai-perf export")  # a truncated file (genai-perf killed) names itself


def export_for_options(options, out_dir: Path, tokenizer: Path | None = None) -> Path:
    """The export for a `trtspec perf` PerfOptions: the same workloads, rendered and shuffled the same
    way (trtspec.perf.prompts), the tokenizer the perf run used (perf.tokenizer, else the repository's
    preprocessing tokenizer, asked from the server)."""
    o = options
    if o.sweep or o.blocks > 1:  # before anything is asked of the server
        raise TrtspecError(f"perf.{'sweep' if o.sweep else 'blocks'}: the genai-perf export writes plain runs, one "
                           "after the other; it reproduces neither a sweep's settings nor interleaved blocks "
                           "(export without perf.sweep and with perf.blocks 1)")
    tok_dir = tokenizer or o.tokenizer or asyncio.run(client.tokenizer_dir(o.url, o.connect_timeout_s))
    if tok_dir is None:
        raise TrtspecError("perf.tokenizer: needed for the genai-perf export (the server has no 'preprocessing' "
                           "model to take the tokenizer from)")
    texts = prompts.render_all(prompts.load_all(prompts.parse_workloads(o.workloads), o.seed), o.seed,
                               prompts.load_tokenizer(tok_dir) if o.chat else None, o.chat)
    texts = asyncio.run(prompts.drop_refused(texts, o.url, o.model, o.max_tokens, o.connect_timeout_s))  # as perf
    tuning = load_predictions(o.tuning)
    sampling = {name: genai_perf_inputs(workload_sampling(o, tuning, name)) for name in texts}
    return export_genai_perf(out_dir, prompts=texts, url=o.url, model=o.model, tokenizer=tok_dir,
                             max_tokens=o.max_tokens, concurrency=o.concurrency, request_rate=o.request_rate,
                             requests=o.requests, duration_s=o.duration_s, warmup=o.warmup, baseline=o.baseline,
                             seed=o.seed, sampling={k: v for k, v in sampling.items() if v})


def genai_perf_inputs(sampling) -> dict:
    """generate's sampling inputs as genai-perf extra inputs ({} for greedy settings)."""
    if sampling.greedy:
        return {}
    extra = {"temperature": sampling.temperature, "seed": sampling.seed}
    if sampling.top_k:
        extra["top_k"] = sampling.top_k
    if sampling.top_p < 1.0:
        extra["top_p"] = sampling.top_p
    return extra
