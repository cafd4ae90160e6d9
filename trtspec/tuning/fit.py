"""Measured step times (a cost table) and fitting the analytic model's free numbers to them.

A cost table is what a timing run produces, one row per (network, batch, tokens, context):

    {"schema": "trtspec.cost-table/1", "gpu": "h100", "device": "free text",
     "rows": [{"role": "target", "batch": 1, "num_tokens": 1, "context": 512, "seconds": 0.0031}, ...]}

`role` is target | draft | eagle (the EAGLE drafter, one level); `gpu` names the preset whose
nominal bandwidth and peaks the fit starts from (h100, h200, cpu).

Fit. The model of trtspec/tuning/cost.py is, per row,

    seconds = o_role + max(u * M, v * C) + comm,   u = 1 / bandwidth_efficiency, v = 1 / compute_efficiency

with M = bytes / nominal bandwidth, C = FLOPs / nominal peak (known from the shapes), o_role =
forward_overhead_s (target, draft) or eagle_level_overhead_s (eagle). Given which side of the max
each row is on, that is linear in (o_fwd, o_eagle, u, v): weighted least squares (numpy lstsq,
weights 1/seconds so every row counts by its relative error) solves it. The bound assignment is
then recomputed from the new parameters and the solve repeated until it stops changing, from three
starts (the preset's assignment, all memory-bound, all compute-bound); the lowest error wins.
A parameter no row informs (say v when every row is memory-bound) keeps the preset's value and is
reported as not fitted. Without overlap (`GpuSpec.memory_compute_overlap` False, the "cpu" preset)
the model is seconds = o_role + u * M + v * C + comm, linear as it stands: every row informs both
u and v and the bound assignment plays no part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import TrtspecError
from ..fsutil import read_json
from .cost import GpuSpec, ModelShape, forward_terms, forward_time, gpu_preset

TABLE_SCHEMA = "trtspec.cost-table/1"
PARAMS = ("forward_overhead_s", "eagle_level_overhead_s", "bandwidth_efficiency", "compute_efficiency")


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
    memory_bound_rows: int


def _terms(gpu: GpuSpec, row: CostRow, shapes: dict[str, ModelShape]) -> tuple[float, float, float]:
    m = shapes.get(row.role)
    if m is None:
        raise TrtspecError(f"cost table: rows of role '{row.role}' but no {row.role} checkpoint to size them")
    nbytes, flops = forward_terms(m, row.batch, row.num_tokens, row.context)
    comm = 2 * m.num_layers * gpu.allreduce_latency_s if m.tp > 1 else 0.0
    return nbytes / (gpu.hbm_bandwidth_gbs * 1e9), flops / (gpu.peak_tflops(m.compute_dtype) * 1e12), comm


def _solve(rows, M, C, comm, y, mem_bound, base: GpuSpec):
    """Weighted least squares for one bound assignment -> (params, names of the fitted ones)."""
    cols = {
        "forward_overhead_s": np.array([r.role != "eagle" for r in rows], float),
        "eagle_level_overhead_s": np.array([r.role == "eagle" for r in rows], float),
        "u": np.where(mem_bound, M, 0.0) if base.memory_compute_overlap else M,
        "v": np.where(mem_bound, 0.0, C) if base.memory_compute_overlap else C,
    }
    informed = [n for n, c in cols.items() if c.any()]
    names, w = list(informed), 1.0 / y
    while names:
        X = np.stack([cols[n] for n in names], 1) * w[:, None]
        sol = dict(zip(names, np.linalg.lstsq(X, (y - comm) * w, rcond=None)[0]))
        negative = [n for n, s in sol.items() if s <= 0]
        if not negative:
            break
        names = [n for n in names if n not in negative]  # clip at zero (overheads) / keep (u, v); refit
    else:
        sol = {}
    params = {"forward_overhead_s": base.forward_overhead_s, "eagle_level_overhead_s": base.eagle_level_overhead_s,
              "u": 1.0 / base.bandwidth_efficiency, "v": 1.0 / base.compute_efficiency}
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


def _errors(gpu: GpuSpec, table: CostTable, shapes: dict[str, ModelShape]) -> np.ndarray:
    pred = np.array([forward_time(gpu, shapes[r.role], r.batch, r.num_tokens, r.context) for r in table.rows])
    y = np.array([r.seconds for r in table.rows])
    return (pred - y) / y


def fit_gpu(table: CostTable, shapes: dict[str, ModelShape], base: GpuSpec | None = None,
            max_iter: int = 50) -> tuple[GpuSpec, FitReport]:
    """Fit the efficiencies and overheads of `base` (default: the table's preset) to the table."""
    base = base if base is not None else gpu_preset(table.gpu)
    rows = table.rows
    terms = np.array([_terms(base, r, shapes) for r in rows])
    M, C, comm = terms[:, 0], terms[:, 1], terms[:, 2]
    y = np.array([r.seconds for r in rows])
    starts = [M / base.bandwidth_efficiency >= C / base.compute_efficiency, np.ones(len(rows), bool),
              np.zeros(len(rows), bool)]
    best = None
    for mem_bound in starts:
        for _ in range(max_iter):
            params, fitted = _solve(rows, M, C, comm, y, mem_bound, base)
            new = params["u"] * M >= params["v"] * C
            if np.array_equal(new, mem_bound):
                break
            mem_bound = new
        gpu = _apply(base, params)
        err = _errors(gpu, table, shapes)
        score = float(np.sqrt(np.mean(err ** 2)))
        if best is None or score < best[0] - 1e-15:
            best = (score, gpu, err, fitted, mem_bound)
    score, gpu, err, fitted, mem_bound = best
    names = {"u": "bandwidth_efficiency", "v": "compute_efficiency"}
    fitted_names = sorted(names.get(n, n) for n in fitted)
    return gpu, FitReport(num_rows=len(rows), rms_relative_error=score, max_relative_error=float(np.abs(err).max()),
                          fitted=fitted_names, kept=[p for p in PARAMS if p not in fitted_names],
                          memory_bound_rows=int(mem_bound.sum()))
