"""`trtspec run RECIPE`: the stages in order, each run or skipped by its input hash (state.py).

    derive -> convert | quantize -> build -> profile -> tune -> triton -> serve -> perf -> report

derive makes the draft from the target: its first layers (draft.derive), or EAGLE-3 head(s) trained
on the target's answers to the workloads (draft.train; trtspec.drafts, cached by their inputs).

Decisions, per stage: not applicable (the recipe does not ask for it, or it needs a GPU host: the
note says what to run there), forced (`force` at or before it), or run when its input hash differs
from the one recorded in OUT/run-manifest.json or its outputs are gone, else skipped. `--dry-run`
makes the same decisions without running anything (a stage after one that would run is "run:
upstream changes", since its inputs cannot be known yet).

serve is not a stage with lasting output: it starts the cpu-flavor tritonserver when perf is about
to run and the server is stopped right after perf, and in a `finally` on any failure, so no server
outlives `trtspec run`. A failing stage is recorded as failed (it re-runs next time; so does one cut,
recorded as interrupted until it ends), the summary is printed, and the run ends with one `error:`
line naming the stage; earlier outputs stay valid. A run cut short (Ctrl-C, SIGTERM) stops the
server, prints the summary with the cut stage as interrupted, and exits 130. The summary: summary.py.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

import torch
from rich.console import Console

from ..drafts.options import device_type
from ..errors import TrtspecError
from ..fsutil import fingerprint
from ..options import default
from ..recipe import GENERAL_HEAD, Recipe, load_recipe
from ..tuning.schema import PROFILE_SCHEMA
from . import stages as st
from .triton_stage import engines_built, run_triton, triton_not_applicable, triton_options
from .inputs import missing_inputs, out_dir, stage_inputs
from .state import RunManifest, canonical, code_versions, outputs_exist, sha256_text
from .summary import Row, RunReport, print_summary, summary_console

ORDER = ("derive", "convert", "quantize", "build", "profile", "tune", "triton", "serve", "perf", "report")


def _ck(r: Recipe) -> str:
    return "quantize" if r.quantization is not None else "convert"


def _models_section(r: Recipe) -> dict:
    """What convert and quantize read. Not an EAGLE-3 head's path (read where it is by profile and
    triton; blanked, not dropped, so the other modes' hashes stay as they were)."""
    draft = r.draft.model_dump(exclude={"train"}) | {"eagle3": None} if r.draft else None
    return {"target": r.target, "draft": draft, "mode": r.mode,
            "dtype": r.dtype,
            "tp": r.tp,
            "eagle": r.eagle.model_dump() if r.mode == "eagle" else None,
            "allow_pickle": r.allow_pickle if r.mode == "eagle" else None}


def _build_section(r: Recipe) -> dict:
    """The build options; timeout_s is how long a trtllm-build may take, not what it makes: raising it
    must not rebuild engines that took hours (held at its default, so the hashes stay as they were)."""
    b = r.build.model_dump() | {"timeout_s": default(type(r.build), "timeout_s")}
    b["max_draft_len"] = st.build_options(r).max_draft_len
    b["trtllm_build_on_path"] = st.trtllm_build_on_path() if r.build.engines else None
    return b


def _trains(r: Recipe) -> bool:
    return r.draft is not None and r.draft.train is not None


def _derive_section(r: Recipe) -> dict:
    """The derived draft's inputs; a trained head's also the options of each head (the content of the
    prompt files it trains on is an external input, `draft.train.workloads.*`; packaged sets are named:
    they change with trtspec's version) and, when it is CUDA, where it trains: the head cache keys
    the device (drafts.cache.head_key), so a head trained on the CPU must not be kept for a recipe now
    training on a GPU (added only then, so CPU recipes keep their hashes)."""
    section = {"target": r.target, "derive": r.draft.model_dump(exclude={"train"}) if r.draft else None}
    if _trains(r):
        section["train"] = {"heads": {n: r.draft.train.head_options(e, r.threads, general=n == GENERAL_HEAD).written()
                                      for n, e in r.trained_heads().items()}}
        if device_type(r.draft.train.device) == "cuda":
            section["train"]["device"] = "cuda"
    return section


def _profile_section(r: Recipe) -> dict:
    """What the profile stage reads, and the schema its profile.json is written in: a profile of an
    earlier schema (another way of counting, say) is profiled again, not reused by an unchanged hash."""
    return ({"profile": r.profile.model_dump(), "workloads": r.workloads, "schema": PROFILE_SCHEMA}
            | ({"workload_sampling": r.workload_sampling} if r.workload_sampling else {})
            | ({"ngram": r.ngram_sizes()} if r.ngram else {}) | ({"eagle3": r.draft.eagle3} if r.mode == "eagle3" else {})
            | ({"heads": sorted(r.trained_heads())} if _trains(r) else {}))


def _calib_workloads(r: Recipe) -> dict | None:
    """The workloads quantize calibrates on: none when quantization.calib names its own sources."""
    return r.workloads if r.quantization.calib is None else None


def _reads_derived(r: Recipe) -> list[str]:
    """convert / quantize read a derived draft model; a trained head is read where it is, later."""
    return [] if _trains(r) else ["derive"]


def _na(cond, why: str):
    return lambda ctx: None if cond(ctx.recipe) else why


STAGES = {s.name: s for s in (
    st.Stage("derive", lambda r: [], _derive_section, lambda p: [p.hf_draft, p.head, p.heads],
             _na(lambda r: r.draft is not None and (r.draft.derive is not None or r.draft.train is not None),
                 "the draft is given, not derived"),
             st.run_derive),
    st.Stage("convert", _reads_derived, _models_section, lambda p: [p.ckpt],
             _na(lambda r: r.quantization is None, "quantization is set: quantize writes the checkpoint"),
             st.run_convert),
    st.Stage("quantize", _reads_derived,
             lambda r: _models_section(r) | {"quantization": r.quantization.model_dump(),
                                             "workloads": _calib_workloads(r)},
             lambda p: [p.ckpt], _na(lambda r: r.quantization is not None, "no quantization (convert instead)"),
             st.run_quantize),
    st.Stage("build", lambda r: [_ck(r)], _build_section, lambda p: [p.build],
             _na(lambda r: r.build is not None, "no build section"), st.run_build),
    st.Stage("profile", lambda r: [_ck(r)] + (["derive"] if _trains(r) else []), _profile_section,
             lambda p: [p.profile, p.profile_ngram, *p.head_outputs("profile")], lambda ctx: None, st.run_profile),
    st.Stage("tune", lambda r: [_ck(r), "profile"], lambda r: r.tune.model_dump(),
             lambda p: [p.tuning, p.plots, *p.head_outputs("tuning")]
             + [p.drafter_tuning(m) for m in ("draft-target", "eagle3", "ngram")],
             lambda ctx: None, st.run_tune),
    st.Stage("triton", lambda r: [_ck(r), "tune"] + (["build"] if r.triton and r.triton.flavor == "trtllm" else [])
             + (["derive"] if _trains(r) else []), triton_options, lambda p: [p.repo],
             lambda ctx: triton_not_applicable(ctx, ctx.notes.get("engines_predicted")), run_triton),
    st.Stage("serve", lambda r: ["triton"], lambda r: r.triton.ports.model_dump(), lambda p: [p.server_log],
             st.serve_not_applicable, st.start_server),
    st.Stage("perf", lambda r: ["triton", "tune"], lambda r: {"perf": r.perf.model_dump(), "workloads": r.workloads},
             lambda p: [p.perf], st.perf_not_applicable, st.run_perf),
    st.Stage("report", lambda r: ["perf", "tune"], lambda r: {}, lambda p: [p.report],
             lambda ctx: st.perf_not_applicable(ctx) and "no perf results here (perf did not run)", st.run_report),
)}

def check_stage(name: str | None, param: str) -> str | None:
    """`param`: the Runner.run argument that named the stage (until, force), for the error."""
    if name is not None and name not in ORDER:
        raise TrtspecError(f"{param}: unknown stage {name!r} (stages: {', '.join(ORDER)})")
    return name


class Runner:
    def __init__(self, recipe_path: Path, out: Path, console: Console | None = None):
        self.recipe_path = Path(recipe_path)
        self.recipe = load_recipe(self.recipe_path)
        self.ctx = st.Ctx(self.recipe, self.recipe_path, st.Paths(out_dir(self.recipe, out)),
                          console or summary_console())
        self.manifest = RunManifest(self.ctx.paths.out, self.recipe_path)
        self.planned: dict[str, str] = {}  # stage -> run | skip | n/a, decided this invocation
        self.code = code_versions()  # part of every input hash: a new release re-runs the stages
        self.dry_run = False

    # ---- hashing ----

    def input_hash(self, stage: st.Stage) -> str | None:
        """None when an upstream stage will run first (dry run): its outputs are not known yet."""
        r = self.recipe
        ext = {k: fingerprint(p) for k, p in stage_inputs(r, stage.name).items()}
        up = {}
        for dep in stage.deps(r):
            if self.planned.get(dep) == "run" and self.dry_run:
                return None
            entry = self.manifest.get(dep) or {}
            up[dep] = {"status": entry.get("status"), "input_hash": entry.get("input_hash"),
                       "outputs": self._outputs_now(dep, entry)}
        return sha256_text(canonical({"stage": stage.name, "section": stage.section(r), "externals": ext,
                                      "upstream": up, "code": self.code}))

    def _outputs_now(self, dep: str, entry: dict) -> list:
        """Fingerprints of an upstream stage's outputs: those it recorded or, where it does not apply
        to this recipe, whatever lies at its outputs anyway (engines built by hand on the H100 host,
        or by a run before the build section was removed): its reader must re-run when they change."""
        stage = STAGES[dep]
        if stage.applies(self.ctx) is not None:
            return [fingerprint(p) for p in stage.outputs(self.ctx.paths) if p.exists()]
        return [fingerprint(Path(p)) for p in entry.get("outputs", [])]

    def decide(self, stage: st.Stage, forced: bool) -> tuple[str, str, str | None]:
        """(decision, reason, input hash) with decision run | skip | n/a."""
        why_not = stage.applies(self.ctx)
        if why_not is not None:
            return "n/a", why_not, None
        h = self.input_hash(stage)
        if h is None:
            return "run", "upstream changes", None
        if forced:
            return "run", "forced", h
        prev = self.manifest.get(stage.name)
        if prev is None or prev.get("status") != "ran":
            return "run", "not run before" if prev is None else f"last run {prev.get('status')}", h
        if prev.get("input_hash") != h:
            return "run", "inputs changed", h
        if not outputs_exist(prev):
            return "run", "outputs missing", h
        return "skip", "inputs unchanged", h

    # ---- running ----

    def run(self, until: str | None = None, force: str | None = None, dry_run: bool = False) -> RunReport:
        check_stage(until, "until")
        check_stage(force, "force")
        self.dry_run = dry_run
        last = ORDER.index(until) if until else len(ORDER) - 1
        first_forced = ORDER.index(force) if force else len(ORDER)
        self.perf_forced = ORDER.index("perf") >= first_forced
        report = RunReport()
        missing = missing_inputs(self.recipe)
        if missing and not dry_run:
            raise TrtspecError(f"{self.recipe_path}: input not found: {missing[0]} (edit the recipe)")
        if not dry_run and self.recipe.threads:
            torch.set_num_threads(self.recipe.threads)
        if not dry_run and self.recipe.uses_default_target:
            st.target_hf(self.ctx)  # build the embedded default once, before any input hash reads it
        try:
            try:
                for i, name in enumerate(ORDER[: last + 1]):
                    row = self._stage(STAGES[name], i >= first_forced, until)
                    report.rows.append(row)
                    if name == "perf":
                        st.stop_server(self.ctx)
                    if row.status == "failed":
                        self.print_summary(report)
                        raise TrtspecError(f"stage {name} failed: {row.note}")
            finally:
                st.stop_server(self.ctx)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (signals.py): the server is stopped; what ran, where it was cut
            if not report.rows or report.rows[-1].stage != name:  # else cut after its row (stopping the server)
                report.rows.append(Row(name, "interrupted", note="cut short (Ctrl-C or a signal)"))
            self.print_summary(report)
            raise
        if missing:
            report.rows.append(Row("inputs", "missing", note="; ".join(missing) + " (edit the recipe before running)"))
        if not dry_run and (self.ctx.paths.perf / "results.json").is_file() and last >= ORDER.index("perf"):
            report.results = self.ctx.paths.perf / "results.json"
        if not dry_run and self.ctx.paths.report.is_file() and last >= ORDER.index("report"):
            report.report = self.ctx.paths.report
        return report

    def _stage(self, stage: st.Stage, forced: bool, until: str | None) -> Row:
        if stage.name == "serve":  # starts the server only when perf is about to run
            return self._serve(stage, until)
        if stage.name == "triton" and self.dry_run:
            b = self.recipe.build
            self.ctx.notes["engines_predicted"] = (engines_built(self.ctx) if self.planned.get("build") in ("skip", "n/a")
                                                   else bool(b and b.engines and st.trtllm_build_on_path()))
        decision, reason, h = self.decide(stage, forced)
        self.planned[stage.name] = decision
        outputs = [str(p) for p in stage.outputs(self.ctx.paths)]
        if decision == "n/a":
            if not self.dry_run:
                self.manifest.record(stage.name, {"status": "n/a", "note": reason})
            return Row(stage.name, "n/a", note=reason)
        if self.dry_run:
            return Row(stage.name, decision, output=_short(outputs, self.ctx.paths.out), note=reason)
        if decision == "skip":  # what its run wrote (recorded), not all it may write
            entry = self.manifest.get(stage.name)
            return Row(stage.name, "skipped", output=_short(entry.get("outputs", []), self.ctx.paths.out),
                       note=entry.get("note", ""))
        return self._execute(stage, h, reason)

    def _execute(self, stage: st.Stage, h: str | None, reason: str) -> Row:
        self.ctx.console.print(f"[bold]{stage.name}[/] ({reason})")
        # Until its result is recorded the stage counts as interrupted: a stage writes its outputs one by
        # one, and one cut between them (Ctrl-C, kill -9) must not leave its last entry, which a recipe
        # edited back would match, passing those mixed outputs as that run's.
        self.manifest.record(stage.name, {"status": "interrupted", "input_hash": h})
        start = time.perf_counter()
        try:
            note = stage.run(self.ctx)
        except TrtspecError as e:
            return self._failed(stage, h, start, str(e))
        except Exception as e:  # a bug, not a user mistake: keep the traceback next to the outputs
            log = self.ctx.paths.out / "logs" / f"{stage.name}.traceback.txt"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(traceback.format_exc())
            return self._failed(stage, h, start, f"{type(e).__name__}: {e} (traceback: {log})")
        seconds = time.perf_counter() - start
        # what this recipe made (n-gram profile: if offered), listed again now that the stage ran: a
        # per-workload head's profile / tuning (Paths.head_outputs) exists only from now on
        outputs = [str(p) for p in stage.outputs(self.ctx.paths) if Path(p).exists()]
        self.manifest.record(stage.name, {"status": "ran", "input_hash": h, "outputs": outputs, "note": note,
                                          "seconds": round(seconds, 2),
                                          "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        return Row(stage.name, "ran", seconds, _short(outputs, self.ctx.paths.out), note)

    def _failed(self, stage: st.Stage, h: str | None, start: float, msg: str) -> Row:
        seconds = time.perf_counter() - start
        self.manifest.record(stage.name, {"status": "failed", "input_hash": h, "error": msg,
                                          "seconds": round(seconds, 2)})
        return Row(stage.name, "failed", seconds, note=msg)

    def _serve(self, stage: st.Stage, until: str | None) -> Row:
        why_not = stage.applies(self.ctx)
        if why_not is not None:
            self.planned["serve"] = "n/a"
            return Row("serve", "n/a", note=why_not)
        perf_decision = "run" if until == "serve" else self.decide(STAGES["perf"], self.perf_forced)[0]
        self.planned["serve"] = perf_decision
        if self.dry_run:
            return Row("serve", perf_decision, note="for perf" if perf_decision == "run" else "perf is skipped")
        if perf_decision != "run":
            return Row("serve", "skipped", note="perf is skipped")
        row = self._execute(stage, self.input_hash(stage), "for perf")
        if until == "serve":
            st.stop_server(self.ctx)
        return row

    # ---- output ----

    def print_summary(self, report: RunReport) -> None:
        title = f"trtspec run {self.recipe_path.name} -> {self.ctx.paths.out}" + (" (dry run)" if self.dry_run else "")
        print_summary(report, title, self.ctx.console)


def _short(outputs: list[str], out: Path) -> str:
    return ", ".join(str(Path(p).relative_to(out)) if Path(p).is_relative_to(out) else p for p in outputs)


def run_recipe(recipe: Path, out: Path, until: str | None = None, force: str | None = None, dry_run: bool = False,
               console: Console | None = None) -> RunReport:
    """Load, run (or plan) and summarise; raises TrtspecError naming the failed stage."""
    runner = Runner(recipe, out, console)
    report = runner.run(until, force, dry_run)
    runner.print_summary(report)
    return report
