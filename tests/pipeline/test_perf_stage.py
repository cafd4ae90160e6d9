"""The perf stage of `trtspec run` when the perf run is cut short (server gone, a run's guard,
Ctrl-C): perf/ holds complete results only, what was measured is kept in perf.partial/ and the
error names that file. perf itself is replaced by a stand-in that does what trtspec.perf.runner
does on such a failure: write results.json and the CSVs into its `out`, then raise PerfRunError
(the live cases are tests/integration/test_perf_faults.py and test_lifecycle.py)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from trtspec.errors import TrtspecError
from trtspec.perf.output import write_results
from trtspec.perf.runner import PerfRunError, _settings
from trtspec.perf.schema import PerfResults, load_results
from trtspec.pipeline import stages as st
from trtspec.recipe import parse_recipe


def perf_ctx(tmp_path) -> st.Ctx:
    recipe = parse_recipe({"target": "default", "ngram": True, "workloads": {"chat": "mt-bench"},
                           "triton": {"flavor": "cpu"}, "perf": {"concurrency": [1], "requests": 2}})
    ctx = st.Ctx(recipe, tmp_path / "r.yaml", st.Paths(tmp_path / "out"), Console(file=io.StringIO()))
    ctx.server = SimpleNamespace(grpc_url="127.0.0.1:1")
    return ctx


def cut_perf(error: str, raised: type[BaseException] = PerfRunError):
    """perf.runner.run_perf cut short: the partial results written into `out`, then the error."""
    def run(o):
        res = PerfResults(created="2024-01-01T00:00:00+00:00", trtspec_version="x", settings=_settings(o, {}),
                          completed=False, error=error, runs=[])
        path = write_results(res, o.out)
        raise PerfRunError(f"{error}; partial results in {path}", res) if raised is PerfRunError else raised()
    return run


@pytest.mark.parametrize("error", ["run 3 (chat, speculation off, concurrency 1): interrupted",
                                   "sweep chat c=1: lost the connection to the server"])
def test_a_perf_run_cut_short_names_partial_results_that_exist(tmp_path, monkeypatch, error):
    ctx = perf_ctx(tmp_path)
    monkeypatch.setattr(st, "perf", cut_perf(error))
    with pytest.raises(TrtspecError) as e:
        st.run_perf(ctx)
    kept = ctx.paths.out / "perf.partial" / "results.json"
    assert str(e.value) == f"{error}; partial results in {kept} (report: trtspec perf-report {kept})"
    assert load_results(kept).error == error and (kept.parent / "requests.csv").is_file()
    assert not ctx.paths.perf.exists()  # no half results where a later run or report reads complete ones
    assert [p.name for p in ctx.paths.out.iterdir()] == ["perf.partial"]  # no temporary left


def test_an_interrupted_perf_keeps_its_partial_results_and_a_complete_run_removes_them(tmp_path, monkeypatch):
    ctx = perf_ctx(tmp_path)
    monkeypatch.setattr(st, "perf", cut_perf("run 1 (chat): interrupted", KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        st.run_perf(ctx)
    assert (ctx.paths.out / "perf.partial" / "results.json").is_file() and not ctx.paths.perf.exists()

    def complete(o):
        res = PerfResults(created="2024-01-01T00:00:00+00:00", trtspec_version="x", settings=_settings(o, {}),
                          completed=True, runs=[])
        write_results(res, o.out)
        return res
    monkeypatch.setattr(st, "perf", complete)
    st.run_perf(ctx)
    assert load_results(ctx.paths.perf / "results.json").completed
    assert not (ctx.paths.out / "perf.partial").exists()  # older than the complete results
