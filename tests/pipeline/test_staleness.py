"""Cache invalidation of `trtspec run`: no stage is skipped, or resumed, with outputs of inputs other
than its own (a silent stale result), and no stage re-runs for a setting that does not reach its output.

Each test changes one thing and checks what re-runs, on the tiny models of test_runner.py or on input
hashes alone.
"""

from __future__ import annotations

import io
import json

import pytest
import yaml
from rich.console import Console

from tiny_models import near_bigram_llama
from trtspec.pipeline.runner import STAGES, Runner, run_recipe

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = ["t5 t17 t300 t42 t9", "t9 t8 t7 t100", "t100 t200 t301", "t11 t12 t13 t14 t15"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer HF target (its 1-layer and 2-layer derived drafts accept differently) and two workloads."""
    d = tmp_path_factory.mktemp("staleness")
    near_bigram_llama(d / "hf")
    for name in ("a", "b"):
        (d / f"{name}.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return d


def write_recipe(d, layers: int = 1, bands=(1,), **over):
    recipe = {"target": str(d / "hf"), "draft": {"derive": {"layers": layers}}, "dtype": "float32",
              "workloads": {"a": str(d / "a.jsonl"), "b": str(d / "b.jsonl")},
              "profile": {"samples": 2, "max_new_tokens": 12, "max_k": 3},
              "tune": {"cost": "h100", "concurrency_bands": list(bands)}, **over}
    path = d / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def statuses(report) -> dict[str, str]:
    return {r.stage: r.status for r in report.rows}


def accept_lengths(out) -> dict:
    return {n: w["accept_length_by_k"] for n, w in json.loads((out / "profile.json").read_text())["workloads"].items()}


def cut_on_call(monkeypatch, module, name: str, call: int):
    """Make `module.name` raise KeyboardInterrupt (Ctrl-C) on its `call`-th call."""
    orig, calls = getattr(module, name), []

    def cut(*a, **k):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt(f"{name} cut")
        return orig(*a, **k)
    monkeypatch.setattr(module, name, cut)


def test_a_cut_profile_resumes_only_over_the_same_models(tiny, tmp_path, monkeypatch):
    """profile.partial.json keeps a cut profile's finished workloads. The checkpoints are named by path
    in its key, and a re-derived draft is written to the same path: resuming then kept workload a's
    samples of the 1-layer draft in a profile of the 2-layer one (AL 1.47 where it is 2.00)."""
    import trtspec.tuning.profile as profile

    out = tmp_path / "out"
    with monkeypatch.context() as m:
        cut_on_call(m, profile, "profile_prompts", 2)  # a done, b cut
        with pytest.raises(KeyboardInterrupt):
            run_recipe(write_recipe(tiny, layers=1), out, until="profile")
    assert (out / "profile.partial.json").is_file()
    log = io.StringIO()
    with monkeypatch.context() as m:  # unchanged: it resumes (a is not profiled again), then is cut again
        cut_on_call(m, profile, "profile_prompts", 1)
        with pytest.raises(KeyboardInterrupt):
            run_recipe(write_recipe(tiny, layers=1), out, until="profile", console=Console(file=log, width=200))
    assert "profiling a: reusing its 2 finished samples" in log.getvalue()

    assert statuses(run_recipe(write_recipe(tiny, layers=2), out, until="profile"))["profile"] == "ran"
    fresh = tmp_path / "fresh"
    run_recipe(write_recipe(tiny, layers=2), fresh, until="profile")
    assert accept_lengths(out) == accept_lengths(fresh)


def test_a_stage_cut_between_its_outputs_is_not_taken_for_its_last_run(tiny, tmp_path, monkeypatch):
    """tune writes tuning.json, then its plots. Cut between them, its manifest entry was still the last
    run's, so the recipe edited back to that run matched it: tune was skipped with the cut run's
    tuning.json (bands [1, 4] for a recipe of band 1)."""
    import trtspec.pipeline.stages as stages

    out = tmp_path / "out"
    run_recipe(write_recipe(tiny, bands=(1,)), out, until="tune")
    with monkeypatch.context() as m:
        cut_on_call(m, stages, "write_plots", 1)
        with pytest.raises(KeyboardInterrupt):
            run_recipe(write_recipe(tiny, bands=(1, 4)), out, until="tune")
    entry = json.loads((out / "run-manifest.json").read_text())["stages"]["tune"]
    assert entry["status"] == "interrupted"
    again = run_recipe(write_recipe(tiny, bands=(1,)), out, until="tune")
    assert statuses(again)["tune"] == "ran" and statuses(again)["profile"] == "skipped"
    assert json.loads((out / "tuning.json").read_text())["concurrency_bands"] == [1]


def _hash(tmp_path, stage: str, **over) -> str:
    (tmp_path / "hf").mkdir(exist_ok=True)
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi"}\n')
    recipe = {"target": "hf", "draft": {"derive": {"layers": 1}}, "workloads": {"w": "p.jsonl"}, **over}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    return Runner(tmp_path / "r.yaml", tmp_path / "out").input_hash(STAGES[stage])


def test_a_profile_of_an_earlier_schema_is_profiled_again(tmp_path, monkeypatch):
    """profile.json's schema moved to /2 when a request's last step came to be counted as it is
    emitted; the profile stage's hash did not change with it (same recipe, same installed version),
    so a /1 profile was skipped as up to date and then refused by tune. The schema is an input."""
    import trtspec.pipeline.runner as runner

    now = _hash(tmp_path, "profile")
    monkeypatch.setattr(runner, "PROFILE_SCHEMA", "trtspec.profile/1")
    assert _hash(tmp_path, "profile") != now


def test_where_a_head_trains_is_a_derive_input(tmp_path, monkeypatch):
    """The head cache keys the device the target answers on (drafts.cache.head_key); the derive stage's
    hash left it out, so a recipe switched to draft.train.device cuda kept OUT's CPU-trained head while
    another OUT got a GPU-trained one. auto is the device it resolves to here."""
    import torch

    def derive(device: str, cuda: bool) -> str:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        return _hash(tmp_path, "derive", draft={"train": {"device": device}})

    cpu = derive("cpu", cuda=True)
    assert derive("auto", cuda=False) == derive("cpu", cuda=False) == cpu
    assert derive("cuda", cuda=True) == derive("auto", cuda=True) != cpu


def test_the_build_timeout_does_not_rebuild_engines(tmp_path):
    """build.timeout_s only bounds trtllm-build: raising it must not rebuild engines that took hours
    (and re-run the repository over them); a build limit does."""
    build = {"gpu": "h100"}
    base = _hash(tmp_path, "build", build=build)
    assert _hash(tmp_path, "build", build={**build, "timeout_s": 60}) == base
    assert _hash(tmp_path, "build", build={**build, "max_batch_size": 8}) != base


def test_a_workload_written_as_a_mapping_without_settings_is_the_plain_workload(tmp_path):
    """`w: {source: p.jsonl}` is `w: p.jsonl` (an empty workload_sampling entry re-ran the profile);
    a workload's own temperature is not."""
    plain = _hash(tmp_path, "profile")
    assert _hash(tmp_path, "profile", workloads={"w": {"source": "p.jsonl"}}) == plain
    assert _hash(tmp_path, "profile", workloads={"w": {"source": "p.jsonl", "temperature": 0.5}}) != plain
