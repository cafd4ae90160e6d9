"""The recipe's derived settings (trtspec/recipe.py)."""

from __future__ import annotations

import pytest

from trtspec.recipe import Recipe, parse_recipe
from trtspec.upstream.sampling import PATH_RULES

BASE = {"target": "default", "workloads": {"chat": "mt-bench"}}


@pytest.mark.parametrize("flavor,draft,build,path", [
    ("trtllm", "x", None, "engine-draft-target"),
    ("trtllm", "x", {"gpu": "h100", "draft_logits": True}, "engine-draft-target-logits"),
    ("trtllm", {"eagle": "/head"}, None, "engine-eagle-triton"),
    ("llmapi", "x", None, "llmapi-two-model"),
    ("cpu", "x", None, "llmapi-two-model"),  # the cpu flavor's spec_decode runs exact_match by default
])
def test_the_profile_predicts_the_served_routes_accept_rule(flavor, draft, build, path):
    """At T > 0 the profile must assume the rule the repository's route will run (upstream facts)."""
    data = {**BASE, "draft": draft, "triton": {"flavor": flavor}, **({"build": build} if build else {})}
    expected = next(r.rule for r in PATH_RULES if r.path == path)
    assert Recipe.model_validate(data).profile.accept_rule == expected


def test_a_named_accept_rule_wins_and_no_triton_section_keeps_the_default():
    named = {**BASE, "draft": "x", "triton": {"flavor": "trtllm"}, "profile": {"accept_rule": "exact_match"}}
    assert Recipe.model_validate(named).profile.accept_rule == "exact_match"
    assert Recipe.model_validate({**BASE, "draft": "x"}).profile.accept_rule == "exact_match"


@pytest.mark.parametrize("flavor,batching", [("trtllm", True), ("llmapi", True), ("cpu", False)])
def test_the_tuner_prices_bands_as_the_flavor_serves_concurrent_requests(flavor, batching):
    draft = {"eagle": "/head"} if flavor == "trtllm" else "x"
    assert Recipe.model_validate({**BASE, "draft": draft, "triton": {"flavor": flavor}}).tune.in_flight_batching \
        is batching
    named = {**BASE, "draft": "x", "triton": {"flavor": "cpu"}, "tune": {"in_flight_batching": True}}
    assert Recipe.model_validate(named).tune.in_flight_batching is True  # what the recipe says wins
    assert Recipe.model_validate({**BASE, "draft": "x"}).tune.in_flight_batching is True  # no triton: TRT-LLM's


def test_per_workload_heads_are_named_by_the_workload_names_the_prompts_get():
    """A training entry without NAME= is named by its file's stem (workloads.spec), never by its path."""
    r = parse_recipe({"target": "t", "workloads": {"chat": "mt-bench"},
                      "draft": {"train": {"workloads": "/data/support.jsonl,code=humaneval", "per_workload": True}}})
    assert r.trained_heads() == {"eagle3": "/data/support.jsonl,code=humaneval",
                                 "eagle3-support": "/data/support.jsonl", "eagle3-code": "code=humaneval"}
    # and the pipeline hashes that file as an input of the derive stage under the same name
    from trtspec.pipeline.inputs import external_inputs

    found = {k: v for k, v in external_inputs(r).items() if k.startswith("draft.train.")}
    assert found == {"draft.train.workloads.support": "/data/support.jsonl"}  # packaged humaneval is no file


def test_an_eagle1_recipe_is_refused_for_the_llmapi_flavor_before_any_stage_runs():
    """The PyTorch backend drafts EAGLE-3 chains only (upstream.trtllm.PYTORCH_SPEC_MODES): the
    repository stage would refuse it, so the recipe does, naming the field, instead of after profiling."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="triton.flavor: llmapi's PyTorch backend drafts EAGLE-3 chains, draft models and n-grams, not eagle"):
        Recipe.model_validate({**BASE, "draft": {"eagle": "/head"}, "triton": {"flavor": "llmapi"}})
    for flavor in ("trtllm", "cpu"):
        Recipe.model_validate({**BASE, "draft": {"eagle": "/head"}, "triton": {"flavor": flavor}})


def test_the_recipe_refuses_a_flavor_with_the_repository_stages_words():
    """One rule (triton_repo.flavors.mode_refusal) for the recipe and make_repository: the same text."""
    import re
    from pydantic import ValidationError
    from trtspec.triton_repo.flavors import mode_refusal

    for draft, flavor, mode in (({"eagle": "/head"}, "llmapi", "eagle"), ({"eagle3": "/head"}, "trtllm", "eagle3")):
        with pytest.raises(ValidationError, match=re.escape(mode_refusal(flavor, mode))):
            Recipe.model_validate({**BASE, "draft": draft, "triton": {"flavor": flavor}})
    assert mode_refusal("cpu", "eagle") is None and mode_refusal("llmapi", "eagle3") is None


@pytest.mark.parametrize("train,workloads,error", [
    ({"self_prompts": 4}, {"self": "mt-bench"}, "r.yaml: workloads: the name 'self' is reserved"),
    ({"workloads": "chat=mt-bench,chat=humaneval"}, {"chat": "mt-bench"},
     "r.yaml: draft.train.workloads: workload name 'chat' used twice"),
    ({"workloads": "chat=mt-bench,,code=humaneval"}, {"chat": "mt-bench"},
     "r.yaml: draft.train.workloads: empty workload entry"),
    ({"workloads": "chat="}, {"chat": "mt-bench"}, "r.yaml: draft.train.workloads: workload 'chat': no source"),
])
def test_a_trained_heads_prompt_list_is_checked_when_the_recipe_is_read(train, workloads, error):
    """The head's NAME=SOURCE list (draft.train.workloads, else the recipe's workloads) is refused at
    load, naming the file and field: not accepted, then failing in the derive stage's hash (or, for
    `chat=`, silently trained on the recipe's directory as a prompt file)."""
    from trtspec.errors import TrtspecError

    with pytest.raises(TrtspecError) as e:
        parse_recipe({"target": "default", "draft": {"train": train}, "workloads": workloads}, "r.yaml")
    assert str(e.value).startswith(error)


@pytest.mark.parametrize("sampling,error", [
    ({"chat": {"temprature": 0.7}}, "r.yaml: workload_sampling.chat.temprature: Extra inputs are not permitted"),
    ({"chat": {"temperature": -1}}, "r.yaml: workload_sampling.chat.temperature: Input should be greater"),
    ({"chat": {"seed": 3}}, "r.yaml: workload_sampling.chat.seed: a workload has no seed"),
    ({"code": {"temperature": 0.7}}, "r.yaml: workload_sampling.code: no such workload"),
])
def test_workload_sampling_written_as_such_is_checked_as_a_workloads_entry_is(sampling, error):
    """A misspelt or out-of-range setting must not be dropped (profiling greedily) or crash the profile
    stage: the recipe is refused, naming the field, as `workloads: {chat: {source, ...}}` would be."""
    from trtspec.errors import TrtspecError

    with pytest.raises(TrtspecError) as e:
        parse_recipe({**BASE, "draft": "x", "workload_sampling": sampling}, "r.yaml")
    assert str(e.value).startswith(error)
    ok = parse_recipe({**BASE, "draft": "x", "workload_sampling": {"chat": {"temperature": 0.7}}}, "r.yaml")
    assert ok.workload_sampling == {"chat": {"temperature": 0.7}}
    # beside a workloads entry in mapping form: merged, the entry's own settings winning
    both = parse_recipe({**BASE, "draft": "x", "workloads": {"chat": {"source": "mt-bench", "top_p": 0.9}},
                         "workload_sampling": {"chat": {"temperature": 0.7, "top_p": 0.5}}}, "r.yaml")
    assert both.workload_sampling == {"chat": {"temperature": 0.7, "top_p": 0.9}}


@pytest.mark.parametrize("workloads", [{"chat": "a,chat.jsonl"}, {"chat": "a,self.jsonl"}, {"chat": "x,"}])
def test_a_workload_path_with_a_comma_is_named_as_such_before_the_heads_list_is_read(workloads):
    """A trained head's prompt list joins sources with commas: the path's comma is the problem to
    name, not the 'name used twice' or 'reserved name' the split list would give."""
    from trtspec.errors import TrtspecError

    with pytest.raises(TrtspecError, match=r"^r.yaml: workloads.chat: .*a workload path cannot contain ','"):
        parse_recipe({"target": "default", "draft": {"train": {"self_prompts": 4}}, "workloads": workloads}, "r.yaml")


def _load(tmp_path, **over):
    import yaml

    from trtspec.recipe import load_recipe

    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"target": "default", "draft": {"derive": {"layers": 1}},
                                                     "workloads": {"chat": "mt-bench"}, **over}))
    return load_recipe(tmp_path / "r.yaml")


@pytest.mark.parametrize("over, field", [
    ({"target": ""}, "target"),
    ({"workloads": {"chat": ""}}, "workloads.chat"),
    ({"workloads": {"chat": {"source": " ", "temperature": 0.5}}}, "workloads.chat"),
    ({"tune": {"cost": ""}}, "tune.cost"),
    ({"draft": {"eagle3": ""}}, "draft.eagle3"),
    ({"quantization": {"format": "fp8", "calib": {"c": ""}}}, "quantization.calib.c"),
])
def test_an_empty_path_is_refused_naming_its_field(tmp_path, over, field):
    """Resolved, an empty path is the recipe's own directory, which exists: no input would be reported
    missing, and a stage would fail later on a directory (or a GPU's cost table) it never meant."""
    from trtspec.errors import TrtspecError

    with pytest.raises(TrtspecError, match=rf"r\.yaml: {field}: empty path") as e:
        _load(tmp_path, **over)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("over, field", [
    ({"workloads": {"chat": "a,b.jsonl"}}, "workloads.chat"),
    ({"workloads": {"chat": "mt-bench"}, "draft": {"train": {}},
      "quantization": {"format": "fp8", "report": {"workloads": {"rep": "/data/x,y.csv"}}}},
     "quantization.report.workloads.rep"),
])
def test_a_workload_path_with_a_comma_is_refused_naming_its_field(tmp_path, over, field):
    """The stages carry workloads as comma-separated NAME=SOURCE lists (profile, a trained head's
    prompts): `/data/a,b.jsonl` would become `/data/a` and a workload `b`."""
    from trtspec.errors import TrtspecError

    with pytest.raises(TrtspecError, match=rf"{field}: .*cannot contain ','"):
        _load(tmp_path, **over)


def test_training_workloads_resolve_each_source_as_the_workload_parser_splits_it(tmp_path):
    """draft.train.workloads is a NAME=SOURCE list: each source is made absolute as the workloads
    parser reads the entry (a path with '=' in a directory name is one bare source), packaged sets and
    cost presets stay names, and a bare entry stays bare (its name is its file's stem either way)."""
    train = "a.jsonl,code=humaneval,logs=sub/l.jsonl,sub/run=3/x.jsonl,mt-bench"
    r = _load(tmp_path, draft={"train": {"workloads": train}}, tune={"cost": "h200"})
    assert r.draft.train.workloads == (f"{tmp_path / 'a.jsonl'},code=humaneval,logs={tmp_path / 'sub/l.jsonl'},"
                                       f"{tmp_path / 'sub/run=3/x.jsonl'},mt-bench")
    assert r.tune.cost == "h200" and _load(tmp_path, tune={"cost": "t.json"}).tune.cost == str(tmp_path / "t.json")


def test_reading_a_recipe_imports_no_torch(tmp_path):
    """The recipe takes the packaged workload names and cost presets from the torch-free modules that
    define them (workloads.packaged, tuning.gpus), never through tuning.cost: reading one stays cheap."""
    import subprocess
    import sys

    (tmp_path / "r.yaml").write_text("target: default\ndraft: {derive: {layers: 1}}\nworkloads: {chat: mt-bench}\n")
    code = ("import sys; from trtspec.recipe import load_recipe; load_recipe(sys.argv[1]); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.yaml")], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("ports, named", [
    ({"http": 9000, "grpc": 9000}, "http and grpc are both 9000"),
    ({"http": 9000, "grpc": 9001, "metrics": 9001}, "grpc and metrics are both 9001"),
])
def test_ports_given_twice_are_refused_when_the_recipe_is_read(tmp_path, ports, named):
    """Not when the serve stage starts the server, after derive .. tune have run (an hour on a real
    model); unset ports (a free one each, at serve) are not compared."""
    from trtspec.errors import TrtspecError

    with pytest.raises(TrtspecError) as e:
        _load(tmp_path, draft="x", triton={"flavor": "cpu", "ports": ports})
    assert str(e.value) == f"{tmp_path / 'r.yaml'}: triton.ports: http, grpc and metrics must differ ({named})"
    assert _load(tmp_path, draft="x", triton={"flavor": "cpu", "ports": {"http": 9000}}).triton.ports.grpc is None
