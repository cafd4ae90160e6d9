"""`trtspec tune --calibrate`: the step-time fit recovers the parameters that generated a sweep,
written by perf's own schema (a sweep whose tokens/s the cost model computed from known numbers),
and a bad results.json is one line naming the file and field."""

from __future__ import annotations

import json

import pytest

from closed_loop import closed_loop
from trtspec.errors import TrtspecError
from trtspec.perf import sweep as perf_sweep
from trtspec.perf.schema import PerfResults, RequestRecord, Settings, SweepSetting, dump_results
from trtspec.tuning import calibrate as cal
from trtspec.tuning.cost import CostModel, prefill_time, price
from trtspec.tuning.gpus import gpu_preset, with_framework
from trtspec.tuning.cost import forward_time as cost_forward
from trtspec.tuning.fit import fit_steps
from trtspec.tuning.report import calibration_lines, calibration_table
from trtspec.tuning.tuning_schema import CostInfo
from trtspec.tuning.synthetic import llama31_8b_shapes
from trtspec.tuning.trees import level_sizes

CTX = {"chat": 300.0, "code": 700.0}
PROMPT = {"chat": 150.0, "code": 500.0}
TOKENS = 1000


def _setting(drafter: str, k: int, tree=None) -> SweepSetting:
    if k == 0 and tree is None:
        return perf_sweep.OFF
    return SweepSetting(label=f"K={k}" if tree is None else f"tree{k}", speculation=True, drafter=drafter,
                        num_draft_tokens=k, max_matching_ngram_size=2 if drafter == "ngram" else None,
                        route_model=None if tree is None else f"m{k}", eagle_choices=tree)


def write_sweep(path, model: CostModel, points, e2e_of=None) -> None:
    """results.json whose requests take what `model` predicts: one request per point, TOKENS tokens
    in E2E = its prefill + TOKENS / AL steps (the window, so tokens/s = TOKENS / E2E), AL as given.
    e2e_of(workload, concurrency, setting, al): the request time (default: calibrate's own forwards)."""
    s = perf_sweep.new_sweep({"mode": "draft-target"}, 4)
    shapes = model.shapes
    for w, c, setting, al in points:
        al = al if setting.speculation else 1.0
        if e2e_of is None:
            fw = cal.request_forwards(cal.SettingView(**setting.model_dump()), c, CTX[w], PROMPT[w], TOKENS / al,
                                      shapes)
            e2e = price(model.gpu, shapes, fw).total_s
        else:
            e2e = e2e_of(w, c, setting, al)
        rec = RequestRecord(index=0, prompt_id="p", start_s=0.0, status="ok", ttft_s=0.0, e2e_s=e2e,
                            output_tokens=TOKENS, acceptance_length=al)
        s.runs.append(perf_sweep.sweep_run(w, c, setting, "t", [rec], None))
    res = PerfResults(created="x", trtspec_version="0", completed=True, runs=[], sweep=s,
                      settings=Settings(url="u", model="generate", workloads={w: w for w in CTX}, warmup=0,
                                        timeout_s=1, max_tokens=8, baseline=False, seed=0, sweep=True))
    path.write_text(dump_results(res))


def _truth(preset: str, **params) -> CostModel:
    s = llama31_8b_shapes()
    return CostModel(gpu=gpu_preset(preset).model_copy(update=params), target=s["target"], draft=s["draft"])


def _info(model: CostModel) -> CostInfo:
    return CostInfo(source="analytic", gpu=model.gpu, target=model.target, draft=model.draft)


def _chain_points(drafters=("model", "ngram"), batches=(1, 4, 16, 64)):
    return [(w, c, _setting(d, k), 1.0 + 0.45 * k) for w in CTX for c in batches for d in drafters for k in range(5)]


@pytest.mark.parametrize("preset, truth", [
    ("cpu", dict(forward_overhead_s=4e-3, bandwidth_efficiency=0.5, compute_efficiency=0.3)),
    ("h100", dict(forward_overhead_s=9e-4, bandwidth_efficiency=0.62, compute_efficiency=0.41)),
])
def test_the_fit_recovers_the_parameters_that_generated_the_sweep(tmp_path, preset, truth):
    true = _truth(preset, **truth)
    write_sweep(tmp_path / "results.json", true, _chain_points(batches=(1, 4, 16, 64, 256)))
    start = _truth(preset)  # the preset's own numbers: the "before"
    model, info = cal.calibrate_cost(tmp_path / "results.json", start, _info(start), CTX, PROMPT, preset)
    for name, value in truth.items():
        assert getattr(model.gpu, name) == pytest.approx(value, rel=1e-6), name
    c = info.calibration
    assert info.source == "calibrated" and c.before == preset and c.skipped == [] and len(c.points) == 2 * 5 * 2 * 5
    assert all(p.predicted_after == pytest.approx(p.tokens_per_s, rel=1e-6) for p in c.points)
    assert cal.within_share(c.points, after=True) == 1.0
    assert cal.within_share(c.points, after=False) < 0.5  # the preset was wrong, and it shows
    lines = calibration_lines(c)
    assert f"after 100% of the {len(c.points)} points the fit used" in lines[0]
    # a row of the fit is a sweep point's mean request, not a request (they each held one here)
    assert f"calibration fit: {len(c.points)} sweep points (each its mean request)" in lines[1]
    # one request per point: no interval, so no point "differs by more than the measurement's noise"
    assert "after calibration 0 of the 0 predictions with a measured tokens/s 95% interval" in lines[2]
    assert calibration_table(c).row_count == len(c.points)


def test_held_out_points_are_predicted_by_a_fit_on_the_others(tmp_path):
    true = _truth("cpu", forward_overhead_s=2e-3, bandwidth_efficiency=0.7, compute_efficiency=0.2)
    write_sweep(tmp_path / "results.json", true, _chain_points())
    start = _truth("cpu")
    pts, _ = cal.points(cal.load_sweep(tmp_path / "results.json"), CTX, PROMPT, start.shapes)
    gpu, _, table = cal.calibrate_points(pts, start.shapes, start.gpu,
                                         fit_on=lambda p: p.run.setting.num_draft_tokens in (0, 1, 3))
    held = [p for p in table if not p.fitted]
    assert {p.num_draft_tokens for p in held} == {2, 4}
    assert all(p.predicted_after == pytest.approx(p.tokens_per_s, rel=1e-6) for p in held)
    assert cal.within_share(table, True, fitted=False) == 1.0


def test_eagle_tree_points_fit_the_level_overhead(tmp_path):
    s = llama31_8b_shapes()
    tree = [[0], [1], [0, 0], [0, 1], [0, 0, 0]]
    true = CostModel(gpu=gpu_preset("h100").model_copy(update={"eagle_level_overhead_s": 2e-4,
                                                                 "forward_overhead_s": 6e-4}),
                     target=s["target"], draft=s["eagle"])
    pts = [(w, c, _setting("eagle", n, tree[:n] if n != 2 else [[0], [0, 0]]), 1.0 + 0.5 * n)
           for w in CTX for c in (1, 8, 64) for n in (2, 3, 5)]
    write_sweep(tmp_path / "results.json", true, pts)
    start = CostModel(gpu=gpu_preset("h100"), target=s["target"], draft=s["eagle"])
    model, info = cal.calibrate_cost(tmp_path / "results.json", start, _info(start), CTX, PROMPT, "h100")
    assert model.gpu.eagle_level_overhead_s == pytest.approx(2e-4, rel=1e-4)
    assert all(p.predicted_after == pytest.approx(p.tokens_per_s, rel=1e-4) for p in info.calibration.points)


@pytest.mark.parametrize("framework", ["trtllm", "sglang"])
def test_an_eagle_deployment_is_fitted_with_the_steps_the_tuner_prices(tmp_path, framework):
    """The tuner prices an H100 EAGLE step as more than its forwards (gpus.FRAMEWORKS: the drafter's
    logits passes, an EAGLE-3 fc on the first level only, the verify's tree kernels, SGLang's host
    time per step). Requests that take exactly what the tuner's CostModel says (the prefills, then
    T / AL of its eagle_step, trees and EAGLE-3 chains alike) are fitted exactly, and the calibrated
    model prices every step as the truth does: calibration and tuning describe a step once."""
    s = llama31_8b_shapes()
    h = s["eagle"].hidden_size
    eagle3 = s["eagle"].model_copy(update={"vocab_size": 32000, "extra_linear_params": 4 * h * h,
                                           "fc_params": 3 * h * h, "fc_first_level_only": True})
    gpu = with_framework(gpu_preset("h100"), framework)
    true = CostModel(gpu=gpu.model_copy(update={"eagle_level_overhead_s": 2e-4, "forward_overhead_s": 6e-4,
                                                "bandwidth_efficiency": 0.7}), target=s["target"], draft=eagle3)
    tree = [[0], [1], [0, 0], [0, 1], [0, 0, 0]]

    def e2e(w, c, setting, al):
        k, choices = setting.num_draft_tokens, setting.eagle_choices
        prefill = prefill_time(true.gpu, true.target, int(PROMPT[w])) + (  # the head prefills where it drafts
            prefill_time(true.gpu, eagle3, int(PROMPT[w])) if k or choices else 0.0)
        step = (true.eagle_step(c, level_sizes(choices, max(map(len, choices))), len(choices), CTX[w]) if choices
                else true.draft_target_step(c, k, CTX[w]))
        return c * prefill + TOKENS / al * step.total_s  # c context phases under in-flight batching

    pts = [(w, c, _setting("eagle", n, tree[:n] if n != 2 else [[0], [0, 0]]), 1.0 + 0.5 * n)
           for w in CTX for c in (1, 8, 64) for n in (2, 3, 5)]
    pts += [(w, c, _setting("model", k), 1.0 + 0.4 * k) for w in CTX for c in (1, 8, 64) for k in range(4)]
    write_sweep(tmp_path / "results.json", true, pts, e2e)
    start = CostModel(gpu=gpu, target=s["target"], draft=eagle3)
    model, info = cal.calibrate_cost(tmp_path / "results.json", start, _info(start), CTX, PROMPT, "h100")
    assert all(p.predicted_after == pytest.approx(p.tokens_per_s, rel=1e-4) for p in info.calibration.points)
    # the model's own numbers come back exactly; calibrate also fits a time per step length, which
    # may take a little of the overheads (the steps stay exact, below), so the check fits without them
    pts_, _ = cal.points(cal.load_sweep(tmp_path / "results.json"), CTX, PROMPT, start.shapes)
    plain, _ = fit_steps([p.row for p in pts_], start.shapes, start.gpu)
    for name in ("eagle_level_overhead_s", "forward_overhead_s", "bandwidth_efficiency", "compute_efficiency"):
        assert getattr(plain, name) == pytest.approx(getattr(true.gpu, name), rel=1e-6), name
    for c, levels, nodes in ((4, [1, 2, 1], 4), (1, [1, 1, 1], 3), (64, [1, 1], 2)):
        assert model.eagle_step(c, levels, nodes, 500.0).total_s == pytest.approx(
            true.eagle_step(c, levels, nodes, 500.0).total_s, rel=1e-3)


@pytest.mark.parametrize("c", [1, 2, 4, 8])
def test_a_request_pays_c_context_phases_under_in_flight_batching(c):
    """prefills_per_request's Little's law against a simulated engine, not against itself."""
    prefill, steps, step = 0.05, 100, 0.01
    done = closed_loop(c, prefill, steps, step)
    got = sum(r.e2e for r in done) / len(done)
    assert got == pytest.approx(cal.prefills_per_request(c) * prefill + steps * step, rel=0.01)


def test_a_server_without_in_flight_batching_has_only_its_concurrency_1_points_modelled(tmp_path):
    write_sweep(tmp_path / "results.json", _truth("cpu"), _chain_points(batches=(1, 2)))
    data = json.loads((tmp_path / "results.json").read_text())
    data["sweep"]["in_flight_batching"] = False  # the pytorch flavor: a worker thread per request
    (tmp_path / "results.json").write_text(json.dumps(data))
    pts, skipped = cal.points(cal.load_sweep(tmp_path / "results.json"), CTX, PROMPT, _truth("cpu").shapes)
    assert {p.run.concurrency for p in pts} == {1} and len(pts) == len(skipped)
    assert all("c=2" in s and "no in-flight batching" in s for s in skipped)
    assert all("no in-flight batching: the sweep's record" in s for s in skipped)
    m = _truth("cpu")
    model, info = cal.calibrate_cost(tmp_path / "results.json", m, CostInfo(source="analytic", gpu=m.gpu,
                                     target=m.target, draft=m.draft), CTX, PROMPT, "cpu")
    assert model.in_flight_batching is False and info.in_flight_batching is False  # bands priced as measured
    assert info.calibration.skipped == skipped
    # a sweep that did not record it (an older results.json): the tuner's own setting decides both
    # which points are modelled and how bands are priced, here batch 1 for both
    data["sweep"].pop("in_flight_batching")
    (tmp_path / "results.json").write_text(json.dumps(data))
    alone = m.model_copy(update={"in_flight_batching": False})
    model, info = cal.calibrate_cost(tmp_path / "results.json", alone, CostInfo(source="analytic", gpu=m.gpu,
                                     target=m.target, draft=m.draft), CTX, PROMPT, "cpu")
    assert model.in_flight_batching is False and len(info.calibration.skipped) == len(skipped)
    assert all("no in-flight batching: tune.in_flight_batching" in s for s in info.calibration.skipped)


def test_points_that_cannot_be_modelled_are_skipped_with_the_reason(tmp_path):
    true = _truth("cpu")
    write_sweep(tmp_path / "results.json", true, _chain_points(batches=(1,)))
    data = json.loads((tmp_path / "results.json").read_text())
    data["sweep"]["runs"][1]["summary"]["acceptance_length"] = None
    data["sweep"]["runs"][2]["workload"] = "logs"
    (tmp_path / "results.json").write_text(json.dumps(data))
    pts, skipped = cal.points(cal.load_sweep(tmp_path / "results.json"), CTX, PROMPT, true.shapes)
    assert len(pts) == len(data["sweep"]["runs"]) - 2
    assert "sweep.runs.1 (chat c=1 K=1): no acceptance length reported" in skipped[0]
    assert "sweep.runs.2" in skipped[1] and "not in the profile" in skipped[1]
    shapes = CostModel(gpu=true.gpu, target=true.target).shapes  # an n-gram profile: no draft network
    _, skipped = cal.points(cal.load_sweep(tmp_path / "results.json"), CTX, PROMPT, shapes)
    assert any("no draft network" in s for s in skipped)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("sweep"), "field 'sweep': no sweep measured"),
    (lambda d: d.update(schema="trtspec.perf/0"), "field 'schema'"),
    (lambda d: d["sweep"].update(schema="trtspec.perf-sweep/9"), "sweep.schema"),
    (lambda d: d["sweep"]["runs"][0].update(concurrency=0), "sweep.runs.0.concurrency"),
    (lambda d: d["sweep"]["runs"][0]["setting"].pop("num_draft_tokens"), "sweep.runs.0.setting.num_draft_tokens"),
    (lambda d: d["sweep"]["runs"][0]["summary"].update(tokens_per_s_ci={"low": 1.0}),
     "sweep.runs.0.summary.tokens_per_s_ci.high"),  # was a KeyError
])
def test_a_bad_results_file_is_one_line_naming_file_and_field(tmp_path, edit, field):
    path = tmp_path / "results.json"
    write_sweep(path, _truth("cpu"), _chain_points(batches=(1,)))
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    start = _truth("cpu")
    with pytest.raises(TrtspecError) as e:
        cal.calibrate_cost(path, start, _info(start), CTX, PROMPT, "cpu")
    msg = str(e.value)
    assert str(path) in msg and field in msg and "\n" not in msg


def test_a_recipes_calibrate_path_is_resolved_and_is_an_input_of_the_tune_stage(tmp_path):
    from trtspec.pipeline.inputs import external_inputs
    from trtspec.recipe import load_recipe

    (tmp_path / "r.yaml").write_text("name: r\ntarget: /t\nngram: true\nworkloads: {chat: mt-bench}\n"
                                     "tune: {cost: cpu, calibrate: perf/results.json}\ntriton: {flavor: cpu}\n"
                                     "perf: {sweep: true, baseline: false}\n")
    recipe = load_recipe(tmp_path / "r.yaml")
    assert recipe.tune.calibrate == (tmp_path / "perf" / "results.json").resolve() and recipe.perf.sweep
    assert external_inputs(recipe)["tune.calibrate"] == str((tmp_path / "perf" / "results.json").resolve())


def test_per_step_length_corrections_are_recovered_with_the_model(tmp_path):
    """A deployment whose steps of n tokens take a fixed extra time the roofline has no term for
    (a CPU's GEMM kernels: 3 tokens slower than 4): the fit finds those times and the model's own
    numbers, exactly, from n-gram points at every K."""
    extra = {2: 0.03, 3: 0.06, 4: 0.02, 5: -0.004}
    true = _truth("cpu", forward_overhead_s=4e-3, bandwidth_efficiency=0.5, compute_efficiency=0.3,
                  step_tokens_s=extra)
    write_sweep(tmp_path / "results.json", true, _chain_points(drafters=("ngram",), batches=(1, 2, 4)))
    start = _truth("cpu")
    model, info = cal.calibrate_cost(tmp_path / "results.json", start, _info(start), CTX, PROMPT, "cpu")
    assert model.gpu.step_tokens_s == pytest.approx(extra, abs=1e-5)  # alternating fits converge linearly
    assert model.gpu.compute_efficiency == pytest.approx(0.3, rel=1e-3)
    assert "step_tokens_s" in info.calibration.fit.fitted
    fit = info.calibration.fit  # a row is a request: its prefill and its steps are several forwards
    assert fit.forwards > fit.num_rows and 0 <= fit.memory_bound_forwards <= fit.forwards
    assert cal.within_share(info.calibration.points) == 1.0
    # a prefill (context 0) and the draft network get no correction, a 1-token step neither
    assert cost_forward(model.gpu, model.target, 1, 3, 0.0) == cost_forward(start.gpu.model_copy(
        update={k: getattr(model.gpu, k) for k in ("forward_overhead_s", "bandwidth_efficiency",
                                                     "compute_efficiency")}), model.target, 1, 3, 0.0)


def test_an_ngram_step_without_a_match_is_a_one_token_forward():
    """The pytorch flavor does not pad n-gram drafts: with d draft tokens per step on average, d / K
    of the steps verify K + 1 tokens and the rest decode one."""
    full, plain = cal.ngram_step(2, 4, 100.0, drafted=1.0).forwards
    assert (full.num_tokens, full.count, plain.num_tokens, plain.count) == (5, 0.25, 1, 0.75)
    assert full.batch == plain.batch == 2 and full.context == plain.context == 100.0
    assert [(f.num_tokens, f.count) for f in cal.ngram_step(1, 4, 100.0, None).forwards] == [(5, 1.0)]  # padded, as TRT-LLM
    assert [(f.num_tokens, f.count) for f in cal.ngram_step(1, 3, 100.0, 3.0).forwards] == [(4, 1.0)]


def test_draft_tokens_per_step_counts_the_verified_drafts_over_the_steps():
    recs = [RequestRecord(index=i, prompt_id="p", start_s=0.0, status="ok", e2e_s=1.0, output_tokens=t,
                          acceptance_length=al, draft_tokens=d) for i, (t, al, d) in enumerate([(30, 1.5, 12),
                                                                                               (20, 2.0, 30)])]
    assert perf_sweep.draft_tokens_per_step(recs) == pytest.approx(42 / (20 + 10))
    recs.append(RequestRecord(index=2, prompt_id="q", start_s=0.0, status="error", output_tokens=0))
    assert perf_sweep.draft_tokens_per_step(recs) == pytest.approx(42 / 30)
    assert perf_sweep.draft_tokens_per_step(recs[2:]) is None


def test_only_points_with_an_interval_are_judged_against_it():
    """A point of one request has no tokens/s interval: it was counted among the predictions that
    'differ by more than the measurement's own noise'."""
    from trtspec.tuning.fit import Calibration, CalibrationPoint, FitReport

    def point(ci, after):
        return CalibrationPoint(workload="chat", concurrency=1, label="K=1", drafter="model", num_draft_tokens=1,
                                acceptance_length=1.5, tokens_per_s=100.0, tokens_per_s_ci=ci, request_s=1.0,
                                predicted_before=80.0, predicted_after=after)

    fit = FitReport(num_rows=3, rms_relative_error=0.01, max_relative_error=0.02, fitted=[], kept=[])
    cal_ = Calibration(results="r.json", sha256="0", before="cpu", fit=fit,
                       points=[point([95.0, 105.0], 101.0), point([99.0, 101.0], 110.0), point(None, 150.0)])
    assert ("after calibration 1 of the 2 predictions with a measured tokens/s 95% interval lie inside it"
            in calibration_lines(cal_)[2])
