"""The stages of `trtspec run`, each a small function over an existing stage API (never the CLI).

Every stage declares what it reads (`deps`: earlier stages; `section`: its part of the recipe;
`externals`: files outside OUT), where it writes (`outputs`), whether it applies to this recipe
(`applies`: None, or why not plus what to run instead) and `run`, which returns a one-line note.
The runner (runner.py) hashes the first three to decide run or skip.

Outputs live at fixed places under OUT (see `Paths`), each written atomically by the API it calls
(fsutil.atomic_dir / write_text_atomic), so a failed stage leaves the previous good output or none.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rich.console import Console

from ..builders.options import BuildOptions
from ..builders.plan import make_plan
from ..builders.run import build, find_trtllm_build
from ..calib.quantize import quantize
from ..checkpoints.default_model import smollm2_dir
from ..checkpoints.derive import truncate_layers
from ..checkpoints.options import ConvertOptions
from ..checkpoints.stage import convert
from ..errors import TrtspecError
from ..fsutil import atomic_dir, write_text_atomic
from ..options import flag_of
from ..perf.options import PerfSettings
from ..perf.report import write_report
from ..perf.output import RESULTS
from ..perf.runner import PerfOptions, PerfRunError, run_perf as perf
from ..quality.render import print_report
from ..quality.report import report_or_warning
from ..recipe import GENERAL_HEAD, Recipe
from ..triton_repo.flavors import is_pytorch
from ..triton_repo.ports import free_ports
from ..triton_repo.serve import CpuServer, ServerStartError
from ..tuning.profile import profile_workloads
from ..tuning.profile_partial import partial_path
from ..tuning.report import print_summary, setting_text, write_plots
from ..tuning.schema import dump_json
from ..tuning.select import indistinguishable
from ..tuning.tune import tune_drafters
from .inputs import default_target_dir
from .train_stage import train_heads


@dataclass
class Paths:
    out: Path

    def __post_init__(self):
        o = self.out
        self.hf_draft, self.ckpt, self.build = o / "hf-draft", o / "checkpoint", o / "build"
        self.profile, self.tuning, self.plots = o / "profile.json", o / "tuning.json", o / "tuning_plots"
        self.profile_ngram = o / "profile-ngram.json"  # the n-gram drafter's, when the recipe offers it
        self.head, self.heads = o / "draft-head", o / "draft-heads"  # trained: the general head, per workload
        self.repo, self.server_log, self.perf = o / "triton-repo", o / "tritonserver.log", o / "perf"
        self.perf_partial = o / "perf.partial"  # a perf run cut short: what it measured (not an output)
        self.report = o / "report" / "report.html"

    def drafter_tuning(self, mode: str) -> Path:
        """Each drafter's own tuning when the recipe offers several (tuning.json is the choice)."""
        return self.out / f"tuning-{mode}.json"

    def head_dir(self, name: str) -> Path:
        """A trained head's directory: GENERAL_HEAD (`eagle3`) or `eagle3-WORKLOAD`."""
        return self.head if name == GENERAL_HEAD else self.heads / name.removeprefix(f"{GENERAL_HEAD}-")

    def head_outputs(self, kind: str) -> list[Path]:
        """The per-workload heads' profiles or tunings (kind: profile | tuning) present now."""
        return sorted(self.out.glob(f"{kind}-{GENERAL_HEAD}-*.json"))


@dataclass
class Ctx:
    recipe: Recipe
    recipe_path: Path
    paths: Paths
    console: Console
    server: object | None = None  # the CpuServer the serve stage started for perf
    notes: dict = field(default_factory=dict)

    def log(self, msg: str) -> None:
        self.console.print(f"  {msg}", highlight=False)


# ---- the draft and target directories the stages read ---------------------------------------------

def target_hf(ctx: Ctx, build: bool = True) -> Path:
    """The target's HF directory; the embedded default is converted from its GGUF on first use."""
    if ctx.recipe.uses_default_target:
        if not build:
            return default_target_dir()
        return smollm2_dir()
    return Path(ctx.recipe.target)


def draft_hf(ctx: Ctx) -> Path | None:
    """The draft model's HF directory (draft-target), else None."""
    d = ctx.recipe.draft
    if d is None:
        return None
    return ctx.paths.hf_draft if d.derive is not None else Path(d.hf) if d.hf is not None else None


def eagle3_head(ctx: Ctx) -> Path | None:
    """The EAGLE-3 head: given (draft.eagle3), or the general head the derive stage trained."""
    d = ctx.recipe.draft
    if d is not None and d.train is not None:
        return ctx.paths.head
    return Path(d.eagle3) if d is not None and d.eagle3 is not None else None


def extra_heads(ctx: Ctx) -> dict[str, Path]:
    """{drafter name: directory} of the per-workload heads (draft.train.per_workload)."""
    return {n: ctx.paths.head_dir(n) for n in ctx.recipe.trained_heads() if n != GENERAL_HEAD}


# ---- stage functions ---------------------------------------------------------------------------------

def run_derive(ctx: Ctx) -> str:
    """The draft made from the target: its first layers, or trained EAGLE-3 head(s) (run_train)."""
    if ctx.recipe.draft.train is not None:
        return train_heads(ctx.recipe, target_hf(ctx), ctx.paths, ctx.console, ctx.log)
    n = ctx.recipe.draft.derive.layers
    truncate_layers(target_hf(ctx), ctx.paths.hf_draft, n, overwrite=True)
    return f"first {n} layers of the target"


def run_convert(ctx: Ctx) -> str:
    """EAGLE-1: one EagleForCausalLM checkpoint; draft-target: the pair; EAGLE-3 and n-gram: the
    target alone (the runtime and the repository read an EAGLE-3 head where it is)."""
    r, eagle = ctx.recipe, ctx.recipe.mode == "eagle"
    convert(target_hf(ctx), ctx.paths.ckpt, convert_options(r), eagle_head=Path(r.draft.eagle) if eagle else None,
            draft_hf=None if eagle else draft_hf(ctx), overwrite=True)
    return {"eagle": "EagleForCausalLM checkpoint", "draft-target": "pair: target/ + draft/"}.get(
        r.mode, "target checkpoint" + (" (the EAGLE-3 head is read where it is)" if r.mode == "eagle3" else ""))


def convert_options(r: Recipe):
    """The recipe's top-level dtype, tp, eagle and allow_pickle (Recipe inherits ConvertOptions)."""
    return ConvertOptions(**r.model_dump(include=set(ConvertOptions.model_fields)))


def run_quantize(ctx: Ctx) -> str:
    """calib.quantize.quantize, then the quality report (a report that cannot be made is a warning,
    as in `trtspec quantize`: the checkpoint is complete and valid by then)."""
    r, out = ctx.recipe, ctx.paths.ckpt
    q = ctx.recipe.quantization
    options = q if q.calib is not None else q.model_copy(update={"calib": dict(r.workloads)})
    convert = convert_options(r)
    hf = target_hf(ctx)
    eagle = Path(r.draft.eagle) if r.mode == "eagle" else None
    draft = draft_hf(ctx) if r.mode == "draft-target" else None
    quantize(hf, out, options, convert, eagle_head=eagle, draft_hf=draft, overwrite=True)
    note = f"{q.format}" + (f" + {q.kv_cache} KV" if q.kv_cache else "")
    report_options = q.report_options()
    if report_options is not None:
        report = report_or_warning(hf, out, report_options, lambda w: ctx.log(f"warning: {w}"), seed=q.seed,
                                   draft_hf=draft, eagle_head=eagle, convert=convert, progress=ctx.log)
        if report is None:
            return note + "; quality report not written (see the warning)"
        print_report(report, ctx.console)
        agree = (report.get("summary") or {}).get("min_top1_agreement")
        if agree is not None:
            note += f"; top-1 agreement vs unquantized {agree:.1%} (checkpoint/quant_report)"
    return note


def trtllm_build_on_path() -> bool:
    return find_trtllm_build() is not None


def build_options(recipe: Recipe):
    """The recipe's build section as builders.BuildOptions; a draft-target build drafts up to
    profile.max_k tokens unless build.max_draft_len says otherwise."""
    b = recipe.build
    k = b.max_draft_len or (recipe.profile.max_k if recipe.mode == "draft-target" else None)
    return BuildOptions(**b.model_dump(exclude={"engines"}) | {"max_draft_len": k})


def run_build(ctx: Ctx) -> str:
    b = ctx.recipe.build
    plan_opts = build_options(ctx.recipe)
    plan = make_plan(ctx.paths.ckpt, plan_opts)
    for w in plan.warnings:
        ctx.log(f"warning: {w}")
    res = build(plan, ctx.paths.build, dry_run=not b.engines, timeout=plan_opts.timeout_s, overwrite=True,
                on_line=lambda name, line: ctx.log(f"[{name}] {line}"))
    if res.built:
        return f"engines built: {', '.join(x.engine_dir for x in plan.builds)}"
    why = "build.engines is false" if not b.engines else "trtllm-build is not on PATH"
    return f"plan + build.sh only ({why}); engines: run {ctx.paths.build / 'build.sh'} on the H100 host"


def drafter_profiles(ctx: Ctx) -> dict[str, Path]:
    """{drafter name: its profile}, one per drafter the recipe offers: the model drafter's (named by
    its mode), each per-workload head's, then n-gram's."""
    r, p = ctx.recipe, ctx.paths
    heads = {n: p.out / f"profile-{n}.json" for n in extra_heads(ctx)}
    return ({r.mode: p.profile} if r.draft is not None else {}) | heads | ({"ngram": p.profile_ngram} if r.ngram else {})


def run_profile(ctx: Ctx) -> str:
    r, extra = ctx.recipe, extra_heads(ctx)
    notes = []
    for name, path in drafter_profiles(ctx).items():
        ngram = name == "ngram"
        p = r.profile.model_copy(update={"ngram_sizes": r.ngram_sizes() if ngram else None})
        partial = partial_path(path)  # finished workloads as they finish: a cut run resumes
        head = None if ngram else extra.get(name, eagle3_head(ctx))
        result = profile_workloads(ctx.paths.ckpt, r.workload_entries(), p, progress=ctx.log, partial=partial,
                                   sampling=r.workload_sampling, eagle3_head=head)
        write_text_atomic(path, dump_json(result))
        partial.unlink(missing_ok=True)
        label = "" if name == r.mode else " n-gram" if ngram else f" {name}"
        notes += [f"{n}{label}: AL K=1 {_al(w, 1):.2f}, K={p.max_k} {_al(w, p.max_k):.2f}"
                  for n, w in result.workloads.items()]
    return "; ".join(notes)


def _al(w, k: int) -> float:
    return w.accept_length_by_k.get(str(k), float("nan"))  # profile.json keys K as strings


def run_tune(ctx: Ctx) -> str:
    """Each offered drafter tuned alone, then (several) the drafter chosen per workload x band."""
    t = ctx.recipe.tune
    tuning, each = tune_drafters(drafter_profiles(ctx), t)
    for mode, own in each.items() if len(each) > 1 else ():
        write_text_atomic(ctx.paths.drafter_tuning(mode), dump_json(own))
    write_text_atomic(ctx.paths.tuning, dump_json(tuning))
    with atomic_dir(ctx.paths.plots, overwrite=True) as tmp:
        write_plots(tuning, tmp)
    print_summary(tuning, ctx.console)
    first = min(t.concurrency_bands)
    picks = []
    for name, w in tuning.workloads.items():
        band = next(b for b in w.bands if b.concurrency == first)
        noise = band.speculate and 0 in indistinguishable(band, w.accept_length_se_by_k)
        picks.append(f"{name}@{first}: {setting_text(band)} x{band.speedup:.2f}"
                     + (" (not distinguishable from off)" if noise else ""))
    return "; ".join(picks)


def serve_not_applicable(ctx: Ctx) -> str | None:
    r = ctx.recipe
    if r.perf is None or r.triton is None:
        return "no perf section (the server is started only for perf)"
    if not is_pytorch(r.triton.flavor):
        return f"{r.triton.flavor} flavor runs in the TensorRT-LLM container; on the H100 host: " \
               f"trtspec serve {ctx.paths.repo} --exec"
    return None


def start_server(ctx: Ctx) -> str:
    t = ctx.recipe.triton
    ports = free_ports({k: getattr(t.ports, k) for k in ("http", "grpc", "metrics")})
    server = CpuServer(ctx.paths.repo, ports["http"], ports["grpc"], ports["metrics"], log_file=ctx.paths.server_log,
                       model_control=t.model_control, drain_timeout_s=t.drain_timeout_s)
    try:
        server.start(t.start_timeout_s)
    except ServerStartError as e:  # the error is one line: why the server failed is in its log
        e.print_log()
        raise
    ctx.server = server
    return f"tritonserver ready on gRPC {server.grpc_url} (stopped after perf; log {ctx.paths.server_log.name})"


def stop_server(ctx: Ctx) -> None:
    """Stop the server (a drain, then its exit timeout). A second Ctrl-C or SIGTERM during that wait
    kills it at once instead of leaving it running with no parent (stop with no grace: SIGKILL to its
    process group), and the interrupt goes on."""
    if ctx.server is not None:
        try:
            ctx.server.stop()
        except KeyboardInterrupt:
            ctx.server.stop(grace=0)
            raise
        finally:
            ctx.server = None


def perf_command(ctx: Ctx) -> str:
    """The perf run as a command line, for flavors that are served elsewhere (the H100 host)."""
    p = ctx.recipe.perf
    grpc = ctx.recipe.triton.ports.grpc or 8001
    args = ["trtspec", "perf", "--url", f"127.0.0.1:{grpc}", "--workloads", ",".join(ctx.recipe.workload_entries()),
            "--tuning", str(ctx.paths.tuning), "--max-tokens", str(p.max_tokens), "--warmup", str(p.warmup),
            "--timeout", f"{p.timeout_s:g}", "--seed", str(p.seed), "--out", str(ctx.paths.perf)]
    if p.concurrency:
        args += ["--concurrency", ",".join(map(str, p.concurrency))]
    if p.request_rate:
        args += ["--request-rate", f"{p.request_rate:g}"]
    if p.requests:
        args += ["--requests", str(p.requests)]
    if p.duration_s:
        args += ["--duration", f"{p.duration_s:g}"]
    if p.baseline:
        args.append("--baseline")
    args += _changed_perf_flags(p)
    return shlex.join(args)


def _changed_perf_flags(p) -> list[str]:
    """The recipe's other perf settings that differ from the CLI's defaults (the same PerfSettings)."""
    d = PerfSettings()
    flags = [("--model", p.model, d.model),
             ("--connect-timeout", f"{p.connect_timeout_s:g}", f"{d.connect_timeout_s:g}"),
             ("--processes", str(p.processes), str(d.processes)), ("--blocks", str(p.blocks), str(d.blocks))]
    flags += [(flag_of(k), f"{getattr(p, k):g}", None) for k in ("temperature", "top_k", "top_p")
              if getattr(p, k) is not None]  # every request's sampling (the CLI's default: none)
    out = [x for flag, v, dv in flags if v != dv for x in (flag, v)]
    out += [] if p.chat == d.chat else ["--no-chat" if not p.chat else "--chat"]
    return out + (["--sweep"] if p.sweep else [])


def perf_not_applicable(ctx: Ctx) -> str | None:
    r = ctx.recipe
    if r.perf is None:
        return "no perf section"
    if not is_pytorch(r.triton.flavor):
        return f"served on the H100 host; with the server up there: {perf_command(ctx)}"
    return None


def run_perf(ctx: Ctx) -> str:
    """perf/ holds complete results only (a later run, and report, take it as such); a run cut short
    keeps what it measured in perf.partial/ (an hour of measurements), which a complete run removes.
    perf returns only a completed run: one cut short raises PerfRunError."""
    if ctx.server is None:
        raise TrtspecError("perf: no server is running (the serve stage starts it)")
    p = ctx.recipe.perf
    with atomic_dir(ctx.paths.perf, overwrite=True) as tmp:
        try:
            results = perf(PerfOptions(**p.model_dump(), url=ctx.server.grpc_url,
                                       workloads=dict(ctx.recipe.workloads), tuning=ctx.paths.tuning, out=tmp))
        except PerfRunError as e:
            raise TrtspecError(f"{e.results.error}; {_keep_partial(ctx, tmp)}") from None
        except KeyboardInterrupt:
            if (tmp / RESULTS).is_file():
                ctx.log(f"perf interrupted; {_keep_partial(ctx, tmp)}")
            raise
    remove_output(ctx.paths.perf_partial)
    return f"{len(results.runs)} runs, {len(results.comparisons)} comparisons"


def _keep_partial(ctx: Ctx, tmp: Path) -> str:
    """Move the cut run's files (results.json last written, the CSVs with it) to perf.partial/; where they
    are, and the command that renders them (marked incomplete: trtspec.perf.incomplete)."""
    remove_output(ctx.paths.perf_partial)
    os.replace(tmp, ctx.paths.perf_partial)
    path = ctx.paths.perf_partial / RESULTS
    return f"partial results in {path} (report: trtspec perf-report {path})"


def run_report(ctx: Ctx) -> str:
    target = ctx.paths.report
    with atomic_dir(target.parent, overwrite=True) as tmp:
        write_report(ctx.paths.perf / "results.json", tmp / target.name, ctx.paths.tuning)
    return str(target)


def remove_output(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


@dataclass(frozen=True)
class Stage:
    name: str
    deps: Callable[[Recipe], list[str]]
    section: Callable[[Recipe], object]
    outputs: Callable[[Paths], list[Path]]
    applies: Callable[[Ctx], str | None]  # None: applies; else the reason (and what to do instead)
    run: Callable[[Ctx], str]
