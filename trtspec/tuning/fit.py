"""Measured step times (a cost table) and fitting the analytic model's free numbers to them.

A cost table is what a timing run produces, one row per (network, batch, tokens, context):

    {"schema": "trtspec.cost-table/1", "gpu": "h100", "device": "free text",
     "rows": [{"role": "target", "batch": 1, "num_tokens": 1, "context": 512, "seconds": 0.0031}, ...]}

`role` is target | draft | eagle (the EAGLE drafter, one level); `gpu` names the preset whose
nominal bandwidth and peaks the fit starts from (h100, h200, cpu); `tp` (default 1) the tensor-parallel
ranks each row's forward ran over, what its networks are sized at in the fit (fit_gpu).

Fit. The model of trtspec/tuning/cost.py is, per row,

    seconds = o_role + max(u * M, v * C) + u * S + fixed,   u = 1 / bandwidth_efficiency, v = 1 / compute_efficiency

with M = bytes / nominal bandwidth, C = FLOPs / nominal peak (known from the shapes), S = bytes an
EAGLE drafter level reads outside the max (its logits passes), fixed = what no fit adjusts (all-reduces,
a verify's spec-dec kernels, EAGLE host time: cost.Parts), o_role = forward_overhead_s (target, draft)
or eagle_level_overhead_s (eagle). Given which side of the max
each row is on, that is linear in (o_fwd, o_eagle, u, v): weighted least squares (numpy lstsq,
weights 1/seconds so every row counts by its relative error) solves it. The bound assignment is
then recomputed from the new parameters and the solve repeated until it stops changing, from three
starts (the preset's assignment, all memory-bound, all compute-bound); the lowest error wins.
A parameter no row informs (say v when every row is memory-bound) keeps the preset's value and is
reported as not fitted. Without overlap (`GpuSpec.memory_compute_overlap` False, the "cpu" preset)
the model is seconds = o_role + u * (M + S) + v * C + fixed, linear as it stands: every row informs both
u and v and the bound assignment plays no part.

Rows that are sums of forwards (`fit_steps`: a request measured on a deployment, its prefill and
T / AL steps as cost.py describes them for the tuner; trtspec.tuning.calibrate) are the same least squares: each
column is the count-weighted sum of the row's forwards' terms, each forward on its own side of the
max. A cost-table row is the one-forward case (fit_gpu).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import TrtspecError
from ..fsutil import read_json
from .cost import Forward, ModelShape, Step, forward_parts, price
from .gpus import GpuSpec, gpu_preset

TABLE_SCHEMA = "trtspec.cost-table/1"
PARAMS = ("forward_overhead_s", "eagle_level_overhead_s", "bandwidth_efficiency", "compute_efficiency")
FULL_NAMES = {"u": "bandwidth_efficiency", "v": "compute_efficiency"}  # the fit's 1 / efficiency unknowns


class CostRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["target", "draft", "eagle"]
    batch: int = Field(ge=1)
    num_tokens: int = Field(ge=1)
    context: int = Field(ge=0)
    seconds: float = Field(gt=0)


class CostTable(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_id: Literal["trtspec.cost-table/1"] = Field(TABLE_SCHEMA, alias="schema")
    gpu: str = "h100"
    device: str | None = None
    tp: int = Field(1, ge=1, description="tensor-parallel ranks each timed forward ran over: 1 for measure-cost, "
                    "whose runtime merges a checkpoint's TP ranks onto one device; fit_gpu sizes the rows so")
    rows: list[CostRow] = Field(min_length=1)

    def roles(self) -> set[str]:
        return {r.role for r in self.rows}


def load_cost_table(path: Path) -> CostTable:
    data = read_json(Path(path), "cost table")
    try:
        return CostTable.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise TrtspecError(f"{path}: field '{loc}': {err['msg']}") from None


def save_cost_table(table: CostTable, path: Path) -> None:
    Path(path).write_text(table.model_dump_json(by_alias=True, indent=2) + "\n", encoding="utf-8")


class FitReport(BaseModel):
    num_rows: int
    rms_relative_error: float
    max_relative_error: float
    fitted: list[str]  # parameters the rows determined
    kept: list[str]  # parameters left at the preset's value (no row informs them)
    # of the rows' forwards (each distinct forward of a row: a calibration row, a request, has
    # prefills, drafter and verify steps), those the fit found bound by memory rather than compute
    forwards: int | None = None
    memory_bound_forwards: int | None = None


class CalibrationPoint(BaseModel):
    """One sweep point of `trtspec perf --sweep` and the step-time model's tokens/s for it, with the
    measured AL, before and after calibration (trtspec.tuning.calibrate)."""
    workload: str
    concurrency: int
    label: str  # the sweep setting: off | K=3 | K=3:ngram:n=2 | a served model
    drafter: str
    num_draft_tokens: int
    acceptance_length: float  # measured
    tokens_per_s: float  # measured
    tokens_per_s_ci: list[float] | None = None  # its 95% interval [low, high]
    request_s: float  # measured mean E2E of its requests (what the fit models: prefill + T / AL steps)
    predicted_before: float  # tokens/s: concurrency * AL / modelled step, the uncalibrated cost
    predicted_after: float  # the same with the calibrated cost
    fitted: bool = True  # the fit used this point (False: held out)


class Calibration(BaseModel):
    """tuning.json `cost.calibration`: the deployment's sweep the cost model was fitted to."""
    results: str  # the perf results.json
    sha256: str
    before: str  # what the cost was before: a preset name or a cost table path
    fit: FitReport
    points: list[CalibrationPoint]
    skipped: list[str] = Field(default_factory=list)  # sweep points not used, each with why


class StepRow(NamedTuple):
    """A measured time that is a sum of forwards: a request on a deployment (its prefill and T / AL
    speculative steps; trtspec.tuning.calibrate); a cost-table row is one forward."""
    step: Step
    seconds: float


class _Parts:
    """Every forward of every row, flattened: row index, count and cost.Parts, so that a row's
    column of the least squares is the count-weighted sum of its forwards' (linear in the params).
    What no fit adjusts (all-reduces, spec-dec kernels, EAGLE host time) is each row's `fixed`."""

    def __init__(self, rows: list[StepRow], shapes: dict[str, ModelShape], base: GpuSpec):
        fs = [(i, f) for i, r in enumerate(rows) for f in r.step.forwards]
        self.n = len(rows)
        self.row = np.array([i for i, _ in fs], int)
        self.count = np.array([f.count for _, f in fs], float)
        parts = [forward_parts(base, _shape(shapes, f.role), f) for _, f in fs]
        self.eagle = np.array([p.eagle for p in parts], bool)
        # each row's count of target decode/verify steps of n tokens, n >= 2 (GpuSpec.step_tokens_s)
        lengths = np.array([p.step_tokens for p in parts], int)
        self.steps = {int(n): self.sum(lengths == n) for n in sorted(set(lengths.tolist()) - {0, 1})}
        terms = np.array([(p.mem_s, p.comp_s, p.serial_s, p.fixed_s) for p in parts], float).reshape(-1, 4)
        self.M, self.C, self.serial = terms[:, 0], terms[:, 1], self.sum(terms[:, 2])
        self.fixed = self.sum(terms[:, 3]) + np.array([r.step.eagle_steps for r in rows]) * base.eagle_step_overhead_s

    def sum(self, x) -> np.ndarray:
        return np.bincount(self.row, weights=self.count * np.asarray(x, float), minlength=self.n)


def _shape(shapes: dict[str, ModelShape], role: str) -> ModelShape:
    m = shapes.get(role)
    if m is None:
        raise TrtspecError(f"cost table: rows of role '{role}' but no {role} checkpoint to size them")
    return m


def _solve(parts: _Parts, y, mem_bound, base: GpuSpec, w):
    """Weighted least squares for one bound assignment -> (params, names of the fitted ones), or
    (None, (rank, names)) when the rows cannot tell those parameters apart (one row, or rows of one
    shape): lstsq would return its minimum-norm solution, an arbitrary point of a line (a 1e5
    bandwidth efficiency), reported as fitted."""
    overlap = base.memory_compute_overlap
    cols = {
        "forward_overhead_s": parts.sum(~parts.eagle),
        "eagle_level_overhead_s": parts.sum(parts.eagle),
        "u": parts.sum(np.where(mem_bound, parts.M, 0.0) if overlap else parts.M) + parts.serial,
        "v": parts.sum(np.where(mem_bound, 0.0, parts.C) if overlap else parts.C),
    }
    informed = [n for n, c in cols.items() if c.any()]
    params = {"forward_overhead_s": base.forward_overhead_s, "eagle_level_overhead_s": base.eagle_level_overhead_s,
              "u": 1.0 / base.bandwidth_efficiency, "v": 1.0 / base.compute_efficiency}
    names = list(informed)  # w: the rows' weights (_fit_model: relative error of the measured times)
    while names:
        # a dropped overhead is zero; a dropped u or v keeps the base's value, whose time is then known
        known = sum(params[n] * cols[n] for n in informed if n not in names and not n.endswith("_s"))
        X = np.stack([cols[n] for n in names], 1) * w[:, None]
        rank = int(np.linalg.matrix_rank(X))
        if rank < len(names):
            return None, (rank, names)
        sol = dict(zip(names, np.linalg.lstsq(X, (y - parts.fixed - known) * w, rcond=None)[0]))
        negative = [n for n, s in sol.items() if s <= 0]
        if not negative:
            break
        names = [n for n in names if n not in negative]  # clip at zero (overheads) / keep (u, v); refit
    else:
        sol = {}
    fitted = set()
    for n in informed:
        if n in sol:
            params[n] = float(sol[n])
            fitted.add(n)
        elif n.endswith("_s"):  # an informed overhead that wanted to be negative: zero is its best value
            params[n] = 0.0
            fitted.add(n)
    return params, fitted


def _apply(base: GpuSpec, params: dict) -> GpuSpec:
    return base.model_copy(update={"forward_overhead_s": params["forward_overhead_s"],
                                   "eagle_level_overhead_s": params["eagle_level_overhead_s"],
                                   "bandwidth_efficiency": 1.0 / params["u"],
                                   "compute_efficiency": 1.0 / params["v"]})


def step_seconds(gpu: GpuSpec, row: StepRow, shapes: dict[str, ModelShape]) -> float:
    """The model's time of a row (cost.price: the sum of its forwards and host time)."""
    return price(gpu, shapes, row.step).total_s


def _errors(gpu: GpuSpec, rows: list[StepRow], shapes: dict[str, ModelShape]) -> np.ndarray:
    pred = np.array([step_seconds(gpu, r, shapes) for r in rows])
    y = np.array([r.seconds for r in rows])
    return (pred - y) / y


def fit_gpu(table: CostTable, shapes: dict[str, ModelShape], base: GpuSpec | None = None,
            max_iter: int = 50) -> tuple[GpuSpec, FitReport]:
    """Fit the efficiencies and overheads of `base` (default: the table's preset) to the table.

    The rows are sized at the table's tp, not the deployment's (`shapes`): a forward timed on one
    device moved all of its network's bytes, and sizing it as one rank of a TP group would halve the
    fitted efficiencies and price the TP deployment at a single GPU's step."""
    rows = [StepRow(Step((Forward(r.role, r.batch, r.num_tokens, r.context),)), r.seconds) for r in table.rows]
    timed = {role: ModelShape(**{**m.model_dump(), "tp": table.tp}) for role, m in shapes.items()}  # checked
    return fit_steps(rows, timed, base if base is not None else gpu_preset(table.gpu), max_iter)


def fit_steps(rows: list[StepRow], shapes: dict[str, ModelShape], base: GpuSpec,
              max_iter: int = 50, per_step: bool = False,
              what: str = "cost table: field 'rows'") -> tuple[GpuSpec, FitReport]:
    """Fit the efficiencies and overheads of `base` to rows that are sums of forwards (module
    docstring; a forward's bound side is its own, so the max stays per forward).

    per_step: also GpuSpec.step_tokens_s, one signed number per target step length n >= 2 that the
    rows contain (a length no row has gets none). The model and the corrections are fitted in turn
    (the model on the times less the corrections, the corrections by least squares on what the
    model leaves) until they settle, so the corrections take only what the model's smooth terms
    cannot."""
    base = base.model_copy(update={"step_tokens_s": {}})
    parts = _Parts(rows, shapes, base)
    y = np.array([r.seconds for r in rows])
    gpu, fitted, mem_bound = _fit_model(parts, y, base, max_iter, None, what)
    if per_step and parts.steps:
        corr = None
        for _ in range(200):  # alternating least squares: converges linearly
            new = _fit_corrections(parts, y, gpu)
            if corr is not None and max(abs(new[n] - corr[n]) for n in new) < 1e-9:
                break
            corr = new
            gpu, fitted, mem_bound = _fit_model(parts, y - sum(c * parts.steps[n] for n, c in corr.items()),
                                                base, max_iter, 1.0 / y, what)
        gpu = gpu.model_copy(update={"step_tokens_s": _fit_corrections(parts, y, gpu)})
        fitted = fitted | {"step_tokens_s"}
    err = _errors(gpu, rows, shapes)
    fitted_names = sorted(FULL_NAMES.get(n, n) for n in fitted)
    return gpu, FitReport(num_rows=len(rows), rms_relative_error=float(np.sqrt(np.mean(err ** 2))),
                          max_relative_error=float(np.abs(err).max()), fitted=fitted_names,
                          kept=[p for p in PARAMS if p not in fitted_names], forwards=int(mem_bound.size),
                          memory_bound_forwards=int(mem_bound.sum()))


def _fit_model(parts: _Parts, y, base: GpuSpec, max_iter: int, w, what: str):
    """The four numbers by weighted least squares from three starting bound assignments; the lowest
    weighted error wins -> (gpu, names fitted, bound assignment). w: the rows' weights (None: 1 / y;
    fit_steps passes 1 / the measured times when y has the step corrections taken off, so that both
    halves of its alternation minimise the same relative error)."""
    M, C = parts.M, parts.C
    w = 1.0 / y if w is None else w
    starts = [M / base.bandwidth_efficiency >= C / base.compute_efficiency, np.ones(len(M), bool),
              np.zeros(len(M), bool)]
    best, undetermined = None, None
    for mem_bound in starts:
        for _ in range(max_iter):
            params, fitted = _solve(parts, y, mem_bound, base, w)
            if params is None:
                undetermined = undetermined or fitted  # the preset's assignment's, in the error
                break
            new = params["u"] * M >= params["v"] * C
            if np.array_equal(new, mem_bound):
                break
            mem_bound = new
        if params is None:  # this start's assignment leaves the parameters undetermined; try the others
            continue
        gpu = _apply(base, params)
        score = float(np.sqrt(np.mean(((_model_seconds(parts, gpu) - y) * w) ** 2)))
        if best is None or score < best[0] - 1e-15:
            best = (score, gpu, fitted, mem_bound)
    if best is None:
        rank, names = undetermined
        raise TrtspecError(f"{what}: {parts.n} rows determine only {rank} of "
                           f"{', '.join(FULL_NAMES.get(n, n) for n in names)}; "
                           "time more distinct shapes (batch sizes, token counts)")
    return best[1:]


def _model_seconds(parts: _Parts, gpu: GpuSpec) -> np.ndarray:
    """Each row's time under `gpu` without step corrections (cost.parts_seconds over the flattened parts)."""
    u, v = 1.0 / gpu.bandwidth_efficiency, 1.0 / gpu.compute_efficiency
    busy = np.maximum(u * parts.M, v * parts.C) if gpu.memory_compute_overlap else u * parts.M + v * parts.C
    over = np.where(parts.eagle, gpu.eagle_level_overhead_s, gpu.forward_overhead_s)
    return parts.sum(busy + over) + u * parts.serial + parts.fixed


def _fit_corrections(parts: _Parts, y, gpu: GpuSpec) -> dict[int, float]:
    """step_tokens_s by weighted least squares on what the uncorrected model leaves of each row."""
    ns = list(parts.steps)
    X = np.stack([parts.steps[n] for n in ns], 1) / y[:, None]
    sol = np.linalg.lstsq(X, (y - _model_seconds(parts, gpu)) / y, rcond=None)[0]
    return {n: float(c) for n, c in zip(ns, sol)}
