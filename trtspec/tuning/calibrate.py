"""`trtspec tune --calibrate results.json`: fit the step-time model to the deployment's own sweep.

Why: the analytic cost (tuning/cost.py, a GPU preset) or a cost table timed outside the server
(tuning/measure.py) misses what the deployment adds: the serving framework's per-step work, the
real kernels' efficiencies. `trtspec perf --sweep` measures every setting the repository serves
(trtspec/perf/sweep.py); each point is a run of requests at concurrency c (the batch the engine
steps) with measured mean end-to-end time E2E, output tokens T and acceptance length AL, and the
cost model writes a request as a sum of forwards (cost.py's own terms):

    E2E = c * prefill + (T / AL) * step          (prefill: one target forward of the prompt; a
                                                  draft model prefills too; c: prefills_per_request)
    step, off (K = 0):      one target forward of 1 token
          draft model, K:   K draft forwards of 1 token + one target verify of K + 1 tokens
          n-gram, K:        one target verify of K + 1 tokens (the drafts cost no device time), or
                            of 1 token where the pool had no match (ngram_step: the pytorch flavor
                            does not pad; the server's total_draft_tokens per step says how often)
          EAGLE tree:       one drafter level per depth (level_sizes) + a verify of nodes + 1 tokens
                            (with the extra terms cost.eagle_forwards gives it, as the tuner prices it)

at batch c and the workload's KV context (the profile's prompt length + half the output, as the
tuner evaluates steps). fit.fit_steps solves for the preset's four numbers (forward and EAGLE-level
overheads, bandwidth and compute efficiencies) by the same weighted least squares as a cost table,
plus one signed time per target step length n = K + 1 >= 2 (GpuSpec.step_tokens_s, per_step): the
prefill rows pin the compute efficiency down, the plain steps the rest. Why the per-length times:
the model's forward grows smoothly with a step's tokens, the deployment's need not (this project's
2-core CPU: a 3-token forward 114 ms, a 4-token one 78 ms, as the GEMM kernels change with the row
count), and the speculative path's per-step serving work has no term of its own. A length the sweep
did not measure gets no correction (scripts/bench_calibration.py's held-out-K check shows the cost).

The c prefills are the other requests' context phases that an in-flight-batching engine runs while
a request decodes (prefills_per_request). A server that does not batch across requests (the
pytorch flavor: a worker thread per request; the sweep records which, `in_flight_batching`) is
not steps at batch c at all, so its points at concurrency > 1 are skipped with that reason.

Why whole requests and not "step = c * AL / tokens/s": tokens/s includes each request's prefill, a
fixed cost per request that such a step would scale with AL (a copy-heavy workload with long prompts
then looks as if longer drafts made its steps slower). Predicted tokens/s = the measured tokens/s x
measured E2E / modelled E2E (the run's window scales with its requests' E2E).

Honest limits: tokens/s includes prefill and request turnaround, so the fitted numbers are those
that reproduce the deployment's throughput at its prompt/output lengths, not kernel times; the
prompt length is the profile's (perf does not count prompt tokens); points are predicted with the
*measured* AL (this checks the cost model, not the profile's AL). Which
points the fit used is recorded per point (`fitted`), so a held-out check (fit on some, predict the
rest) reads from the same file (scripts/bench_calibration.py).

Layering: tuning does not import perf; results.json is read here as data, through the small
pydantic view below (what calibration needs of the "trtspec.perf-sweep/1" section).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import TrtspecError
from ..fsutil import sha256_file
from ..schema_io import load_versioned
from .cost import CostModel, Forward, ModelShape, Step, baseline_forwards, draft_target_forwards, eagle_forwards
from .gpus import GpuSpec
from .fit import Calibration, CalibrationPoint, StepRow, fit_steps, step_seconds
from .trees import level_sizes

WITHIN = 0.10  # the acceptance bar's tolerance: a prediction within 10% of the measured tokens/s


# What calibration reads of results.json: a view of trtspec.perf.schema's Sweep / SweepRun (extra
# fields ignored, so perf may add to them without breaking this reader).

class SettingView(BaseModel):
    model_config = ConfigDict(extra="ignore")
    label: str
    speculation: bool
    drafter: str
    num_draft_tokens: int = Field(ge=0)
    max_matching_ngram_size: int | None = None
    eagle_choices: list[list[int]] | None = None


class MeanView(BaseModel):
    model_config = ConfigDict(extra="ignore")
    mean: float | None = Field(None, gt=0)


class IntervalView(BaseModel):
    model_config = ConfigDict(extra="ignore")
    low: float
    high: float


class SummaryView(BaseModel):
    model_config = ConfigDict(extra="ignore")
    requests_ok: int
    output_tokens: int = Field(ge=0)
    e2e_s: MeanView
    output_tokens_per_s: float = Field(ge=0)
    acceptance_length: float | None = Field(None, gt=0)
    tokens_per_s_ci: IntervalView | None = None


class RunView(BaseModel):
    model_config = ConfigDict(extra="ignore")
    workload: str
    concurrency: int = Field(ge=1)
    setting: SettingView
    completed: bool
    summary: SummaryView
    draft_tokens_per_step: float | None = Field(None, ge=0)


class SweepView(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    schema_id: Literal["trtspec.perf-sweep/1"] = Field(alias="schema")
    mode: str
    in_flight_batching: bool | None = None
    runs: list[RunView]


class ResultsView(BaseModel):
    model_config = ConfigDict(extra="ignore")
    sweep: SweepView | None = None


def load_sweep(path: Path) -> SweepView:
    """The sweep section of a perf results.json; errors are one line naming the file and field."""
    res = load_versioned(Path(path), ResultsView, "trtspec.perf/1", "perf results")
    if res.sweep is None or not res.sweep.runs:
        raise TrtspecError(f"{path}: field 'sweep': no sweep measured (results of a perf run without perf.sweep)")
    return res.sweep


class Point(BaseModel):
    """A usable sweep point: what was measured and the forwards of its mean request."""
    run: RunView
    al: float
    row: StepRow  # seconds: the measured mean E2E

    @property
    def tokens_per_s(self) -> float:
        return self.run.summary.output_tokens_per_s


def step_forwards(s: SettingView, c: int, ctx: float, shapes: dict[str, ModelShape],
                  drafted: float | None = None) -> Step | str:
    """The forwards of one step of setting `s` at batch c, as the tuner's CostModel prices them
    (cost.py's step descriptions), or why there are none. drafted: the draft tokens a step verified
    on average (the server's total_draft_tokens per step; n-gram only, see ngram_step)."""
    k = s.num_draft_tokens
    if not s.speculation or k == 0 or s.drafter == "off":
        return baseline_forwards(c, ctx)
    if s.drafter == "eagle":
        if "eagle" not in shapes or not s.eagle_choices:
            return "an EAGLE point without an EAGLE drafter network or tree"
        depth = max(len(p) for p in s.eagle_choices)
        return eagle_forwards(c, level_sizes(s.eagle_choices, depth), len(s.eagle_choices), ctx)
    if s.drafter == "ngram" or s.max_matching_ngram_size is not None:
        return ngram_step(c, k, ctx, drafted)
    drafter = next((r for r in ("draft", "eagle") if r in shapes), None)
    if drafter is None:
        return "a draft-model point, but the profile's cost model has no draft network"
    return draft_target_forwards(drafter, c, k, ctx)


def ngram_step(c: int, k: int, ctx: float, drafted: float | None) -> Step:
    """An n-gram step verifies K + 1 tokens where the pool had a full match, but the runtime (the
    pytorch flavor) does not pad: a step without a match is a plain one-token decode (TensorRT-LLM
    pads every draft to K, cost.draft_target_step). With the server's mean draft tokens per step d,
    a fraction d / K of the steps is priced at K + 1 tokens and the rest at 1 (exact when drafts are
    all or nothing, as n-gram matches mostly are; measured on this project's CPU sweep: chat steps
    averaged 72 ms at K = 4 where a 5-token forward takes 94 ms, because most chat steps found no match)."""
    full = 1.0 if drafted is None else min(1.0, drafted / k)
    return Step(tuple(f for f in (Forward("target", c, k + 1, ctx, full), Forward("target", c, 1, ctx, 1.0 - full))
                      if f.count > 0))


def prefills_per_request(c: int) -> int:
    """Context phases on the engine's timeline during one request, at concurrency c under
    in-flight batching: c (its own and, in steady state, one for each of the c - 1 requests that
    replace its neighbours). Little's law: with R requests done in a window W, every step carrying
    all c requests and each request's context phase taking P on the engine, W = (R T / (AL c)) step
    + R P, and a request's latency c W / R = (T / AL) step + c P. scripts/bench_published_setups.py
    reads A6 with it (with_context)."""
    return c


def request_forwards(s: SettingView, c: int, ctx: float, prompt: float, steps: float,
                     shapes: dict[str, ModelShape], drafted: float | None = None) -> Step | str:
    """One request at concurrency c of an in-flight-batching server: the prefill of the prompt (by
    every network that drafts from it) prefills_per_request(c) times, and `steps` steps (T / AL)
    at batch c; float counts are fine, the fit weighs each forward's terms by them."""
    step = step_forwards(s, c, ctx, shapes, drafted)
    if isinstance(step, str):
        return step
    n = max(1, round(prompt))
    drafters = sorted({f.role for f in step.forwards if f.role != "target"})
    prefill = tuple(Forward(role, 1, n, 0.0, prefills_per_request(c)) for role in ["target", *drafters])
    return Step(prefill + tuple(f._replace(count=f.count * steps) for f in step.forwards),
                eagle_steps=step.eagle_steps * steps)


def sweep_batching(sweep: SweepView, tuner: bool = True) -> tuple[bool, str]:
    """(whether the measured server stepped concurrent requests as one batch, where that was read):
    the sweep's record, else the tuner's own setting (tune.in_flight_batching)."""
    if sweep.in_flight_batching is not None:
        return sweep.in_flight_batching, "the sweep's record"
    return tuner, "tune.in_flight_batching"


def points(sweep: SweepView, contexts: dict[str, float], prompts: dict[str, float], shapes: dict[str, ModelShape],
           tuner_batching: bool = True) -> tuple[list[Point], list[str]]:
    """The sweep's usable points and a note for each one skipped; tuner_batching: the tuner's
    in_flight_batching, which decides where the sweep did not record its server's (sweep_batching)."""
    batching, source = sweep_batching(sweep, tuner_batching)
    out, skipped = [], []
    for i, run in enumerate(sweep.runs):
        where = f"sweep.runs.{i} ({run.workload} c={run.concurrency} {run.setting.label})"
        sm = run.summary
        al = sm.acceptance_length if run.setting.speculation and run.setting.num_draft_tokens else 1.0
        why = None
        if not run.completed or sm.requests_ok == 0 or sm.output_tokens_per_s <= 0 or sm.e2e_s.mean is None:
            why = "not completed or no successful request"
        elif al is None:
            why = "no acceptance length reported"
        elif run.workload not in contexts or prompts.get(run.workload) is None:
            why = "workload not in the profile (its prompt and context lengths are unknown)"
        elif run.concurrency > 1 and not batching:
            why = (f"concurrent requests are each served on their own (no in-flight batching: {source}), not "
                   "as steps at batch c: only concurrency 1 is modelled")
        fw = None if why else request_forwards(run.setting, run.concurrency, contexts[run.workload],
                                               prompts[run.workload], sm.output_tokens / sm.requests_ok / al, shapes,
                                               run.draft_tokens_per_step)
        if why is None and isinstance(fw, str):
            why = fw
        if why is not None:
            skipped.append(f"{where}: {why}")
            continue
        out.append(Point(run=run, al=al, row=StepRow(fw, sm.e2e_s.mean)))
    return out, skipped


def predicted_tps(gpu: GpuSpec, p: Point, shapes: dict[str, ModelShape]) -> float:
    """The measured tokens/s scaled by measured / modelled request time (module docstring)."""
    return p.tokens_per_s * p.row.seconds / step_seconds(gpu, p.row, shapes)


def calibrate_points(pts: list[Point], shapes: dict[str, ModelShape], base: GpuSpec, fit_on=None
                     ) -> tuple[GpuSpec, object, list[CalibrationPoint]]:
    """Fit `base` to the points selected by `fit_on(point)` (default: all) and predict every point
    before and after. Returns (calibrated GPU, fit report, per-point table)."""
    train = [p for p in pts if fit_on is None or fit_on(p)]
    if not train:
        raise TrtspecError("tune.calibrate: no sweep point to fit (every point skipped or held out)")
    gpu, report = fit_steps([p.row for p in train], shapes, base, per_step=True,
                            what="tune.calibrate: the sweep's points")
    table = []
    for p in pts:
        ci = p.run.summary.tokens_per_s_ci
        table.append(CalibrationPoint(
            workload=p.run.workload, concurrency=p.run.concurrency, label=p.run.setting.label,
            drafter=p.run.setting.drafter, num_draft_tokens=p.run.setting.num_draft_tokens, acceptance_length=p.al,
            tokens_per_s=p.tokens_per_s, tokens_per_s_ci=[ci.low, ci.high] if ci else None,
            request_s=p.row.seconds, predicted_before=predicted_tps(base, p, shapes),
            predicted_after=predicted_tps(gpu, p, shapes), fitted=fit_on is None or bool(fit_on(p))))
    return gpu, report, table


def within_share(table: list[CalibrationPoint], after: bool = True, fitted: bool | None = None) -> float | None:
    """Share of points (all, or only the fitted / held-out ones) predicted within WITHIN."""
    rows = [p for p in table if fitted is None or p.fitted == fitted]
    if not rows:
        return None
    ok = [abs((p.predicted_after if after else p.predicted_before) / p.tokens_per_s - 1) <= WITHIN for p in rows]
    return sum(ok) / len(ok)


def calibrate_cost(results: Path, model: CostModel, info, contexts: dict[str, float], prompts: dict[str, float],
                   before: str):
    """(calibrated CostModel, CostInfo recording the calibration) from results.json's sweep;
    contexts / prompts: per workload, the KV length steps are costed at and the prompt length. Where
    the sweep recorded whether its server batches concurrent requests (`in_flight_batching`), the
    calibrated model prices bands that way too: the deployment measured is the one being tuned."""
    sweep = load_sweep(results)
    shapes = model.shapes
    batching, _ = sweep_batching(sweep, model.in_flight_batching)
    pts, skipped = points(sweep, contexts, prompts, shapes, model.in_flight_batching)
    if not pts:
        raise TrtspecError(f"tune.calibrate: {results}: no usable sweep point ({skipped[0] if skipped else 'none'})")
    gpu, report, table = calibrate_points(pts, shapes, model.gpu)
    cal = Calibration(results=str(results), sha256=sha256_file(Path(results)), before=before, fit=report,
                      points=table, skipped=skipped)
    return (model.model_copy(update={"gpu": gpu, "in_flight_batching": batching}),
            info.model_copy(update={"source": "calibrated", "gpu": gpu, "calibration": cal,
                                    "in_flight_batching": batching}))
