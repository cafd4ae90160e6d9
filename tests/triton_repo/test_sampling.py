"""triton_repo.sampling: a served request's settings (cpu flavor) and each route's accept rule,
as the manifest, the README and spec_decode's parameters carry it."""

from __future__ import annotations

import ast
import json
import shutil
import types
from pathlib import Path

import numpy as np
import pytest

from triton_fixtures import DRAFT, LLAMA, TREE_A, TREE_B, build_dir, fake_ckpt, tiny_tokenizer_dir, tuning_file
from trtspec.errors import TrtspecError
from trtspec.options import Sampling
from trtspec.triton_repo.configs import parse_file, params
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.models import serving_rules
from trtspec.triton_repo.sampling import request_sampling, route_sampling, tuned_rule
from trtspec.triton_repo.validate import check_repository
from trtspec.upstream.sampling import (BLS_SAMPLING_INPUTS, DRAFT_LOGITS_INPUT, DRAFT_LOGITS_REQUEST_FLAG,
                                      LLMAPI_SAMPLING_INPUTS, PATH_RULES, TRTLLM_SAMPLING_INPUTS)

MODELS = Path(__file__).resolve().parents[2] / "trtspec" / "triton_repo" / "models"

CHOICES = {"chat": [3, 2], "code": [5, 4]}


def test_request_sampling_reads_tensorrt_llm_inputs():
    values = {"temperature": 0.8, "runtime_top_k": 40, "runtime_top_p": 0.9, "seed": 7}
    assert request_sampling(values.get) == Sampling(temperature=0.8, top_k=40, top_p=0.9, seed=7)
    assert request_sampling({}.get) == Sampling()  # absent: greedy, seed 0
    off = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}  # penalties set to off
    assert request_sampling({**values, **off}.get) == request_sampling(values.get)
    # top_p 0, as the engines read it (serving_rules.engine_top_k_top_p): greedy, or top-k alone
    engine = serving_rules.engine_top_k_top_p  # what the models pass
    assert request_sampling({"temperature": 0.8, "runtime_top_p": 0.0}.get, engine).greedy
    assert request_sampling({**values, "runtime_top_p": 0.0}.get, engine) == Sampling(temperature=0.8, top_k=40, seed=7)


def test_a_seed_takes_the_whole_uint64_range():
    """Triton's seed input is UINT64, as TensorRT-LLM's executor randomSeed (upstream.sampling SEED_LIMIT)."""
    assert request_sampling({"seed": np.uint64(2 ** 64 - 1)}.get).seed == 2 ** 64 - 1


@pytest.mark.parametrize("values, message", [
    ({"temperature": -0.1}, r"^temperature: Input should be greater than or equal to 0 \(got -0.1\)$"),
    ({"runtime_top_k": -1}, r"^runtime_top_k \(top_k\): Input should be greater than or equal to 0 \(got -1\)$"),
    ({"runtime_top_p": 1.5}, r"^runtime_top_p \(top_p\): Input should be less than or equal to 1"),
    ({"seed": 2 ** 64}, r"^seed: Input should be less than 18446744073709551616"),
    ({"repetition_penalty": 1.3}, r"^repetition_penalty: 1.3; trtspec.runtime \(the cpu flavor\) applies no penalties"),
    ({"presence_penalty": 0.5}, r"^presence_penalty: 0.5; .* leave it unset or 0 "),
])
def test_bad_sampling_values_name_the_input(values, message):
    with pytest.raises(TrtspecError, match=message):
        request_sampling(values.get)


@pytest.mark.parametrize("args, rule, path", [
    (("trtllm", "draft-target"), "exact_match_resample", "engine-draft-target"),
    (("trtllm", "draft-target", True), "rejection_sampling", "engine-draft-target-logits"),
    (("trtllm", "eagle"), "greedy", "engine-eagle-triton"),
    (("cpu", "eagle"), "greedy", "engine-eagle-triton"),
    (("cpu", "draft-target", False, "exact_match"), "exact_match", "llmapi-two-model"),
    (("cpu", "draft-target", False, "rejection_sampling"), "rejection_sampling", "engine-draft-target-logits"),
    (("llmapi", "draft-target"), "exact_match", "llmapi-two-model"),
    (("llmapi", "eagle3"), "greedy", "llmapi-eagle3-one-model"),
])
def test_route_rules_come_from_upstream_path_rules(args, rule, path):
    s = route_sampling(*args)
    assert s["accept_rule"] == rule and s["path"] == path
    upstream = next(r for r in PATH_RULES if r.path == path)
    assert s["condition"] == upstream.condition and (s["sampling_fallback"] == "greedy") == (rule == "greedy")


def test_tuned_rule_is_the_one_rule_tuning_json_assumed():
    wl = lambda rule=None: types.SimpleNamespace(accept_rule=rule)  # noqa: E731
    assert tuned_rule(types.SimpleNamespace(workloads={"a": wl(), "b": wl()})) is None  # greedy tuning
    assert tuned_rule(types.SimpleNamespace(workloads={"a": wl("rejection_sampling"), "b": wl()})) == \
        "rejection_sampling"
    assert tuned_rule(types.SimpleNamespace(workloads={"a": wl("exact_match"), "b": wl("rejection_sampling")})) is None
    assert tuned_rule(types.SimpleNamespace(workloads={}, accept_rule="exact_match")) == "exact_match"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("sampling_repo").resolve()


def with_draft_logits(build: Path) -> Path:
    """The build directory with its draft engine built with --gather_generation_logits."""
    cfg_path = build / "engines" / "draft" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["build_config"]["gather_generation_logits"] = True
    cfg_path.write_text(json.dumps(cfg))
    return build


def test_trtllm_draft_target_sends_draft_logits_when_the_draft_engine_has_them(root):
    tok = tiny_tokenizer_dir(root / "tokenizer")
    tuning = tuning_file(root / "t" / "tuning.json", "draft-target", CHOICES)
    plain = build_dir(root / "build_plain", "draft-target", tok)
    logits = with_draft_logits(build_dir(root / "build_logits", "draft-target", tok))
    for build, rule, switch in ((plain, "exact_match_resample", None), (logits, "rejection_sampling", "true")):
        repo = root / f"repo_{build.name}"
        make_repository(RepoRequest(tuning=tuning, flavor="trtllm", out=repo, engines=build))
        assert check_repository(repo) == []  # the draft_logits wiring matches the engines' configs
        assert params(parse_file(repo / "spec_decode" / "config.pbtxt")).get("draft_logits") == switch
        manifest = json.loads((repo / "trtspec-repo.json").read_text())
        assert manifest["sampling"]["accept_rule"] == rule and manifest["sampling"]["draft_logits"] == bool(switch)
        target_call = next(c for c in manifest["calls"] if c["callee"] == "tensorrt_llm")
        draft_call = next(c for c in manifest["calls"] if c["callee"] == "tensorrt_llm_draft")
        assert ("draft_logits" in target_call["sends"]) == bool(switch)
        assert ("generation_logits" in draft_call["reads"]) == ("temperature" in draft_call["sends"]) == bool(switch)
        readme = (repo / "README.md").read_text()
        assert "## Sampling (temperature > 0)" in readme and f"**{rule}**" in readme


def test_cpu_spec_decode_runs_exact_match_and_eagle_repositories_say_greedy(root):
    tok = root / "tokenizer"
    pair = root / "ckpt_pair"
    fake_ckpt(pair / "target", LLAMA)
    fake_ckpt(pair / "draft", DRAFT)
    tuning = tuning_file(root / "t" / "tuning.json", "draft-target", CHOICES)
    repo = root / "cpu_dt"
    make_repository(RepoRequest(tuning=tuning, flavor="cpu", out=repo, ckpt=pair, tokenizer=tok))
    assert params(parse_file(repo / "spec_decode" / "config.pbtxt"))["accept_rule"] == "exact_match"
    assert "**exact_match**" in (repo / "README.md").read_text()
    eagle = build_dir(root / "build_eagle", "eagle", tok)
    e_tuning = tuning_file(root / "te" / "tuning.json", "eagle", {"chat": TREE_A, "code": TREE_B})
    repo = root / "trt_eagle"
    make_repository(RepoRequest(tuning=e_tuning, flavor="trtllm", out=repo, engines=eagle))
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert manifest["sampling"]["accept_rule"] == "greedy" and manifest["sampling"]["sampling_fallback"] == "greedy"
    assert '`sampling_fallback` = "greedy"' in (repo / "README.md").read_text()
    shutil.rmtree(repo)


def _literal(source: Path, name: str):
    """A module-level dict literal of a python-backend model (they import triton_python_backend_utils)."""
    tree = ast.parse(source.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == name)
    return {ast.literal_eval(k): ast.literal_eval(v.elts[0]) if isinstance(v, ast.Tuple) else ast.literal_eval(v)
            for k, v in zip(node.value.keys, node.value.values)}


def test_models_send_sampling_under_upstreams_input_names():
    """generate.py and spec_decode.py run where trtspec is not installed, so they spell the names;
    they must be upstream.sampling's."""
    llmapi = _literal(MODELS / "generate.py", "LLMAPI_SAMPLING")
    trtllm = _literal(MODELS / "generate.py", "SAMPLING_TO_TRTLLM")
    for field in ("temperature", "top_k", "top_p", "seed"):
        assert llmapi[field] == LLMAPI_SAMPLING_INPUTS[field]
        assert trtllm[BLS_SAMPLING_INPUTS[field]] == TRTLLM_SAMPLING_INPUTS[field]
    spec = (MODELS / "spec_decode.py").read_text()
    assert all(f'"{n}"' in spec for n in TRTLLM_SAMPLING_INPUTS.values())
    assert f'"{DRAFT_LOGITS_INPUT}"' in spec and f'"{DRAFT_LOGITS_REQUEST_FLAG}"' in spec


def test_llmapi_eagle3_repository_flags_sampled_requests(root):
    hf = root / "hf_target"
    hf.mkdir(exist_ok=True)
    (hf / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"}))
    head = root / "hf_eagle3"
    head.mkdir(exist_ok=True)
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"],
                                                  "torch_dtype": "bfloat16",
                                                  "eagle_config": {"use_aux_hidden_state": True}}))
    tuning = tuning_file(root / "tl" / "tuning.json", "eagle3", CHOICES)
    repo = root / "llmapi"
    make_repository(RepoRequest(tuning=tuning, flavor="llmapi", out=repo, ckpt=hf, draft_ckpt=head))
    assert check_repository(repo) == []
    routing = json.loads(params(parse_file(repo / "generate" / "config.pbtxt"))["routing"])
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    assert routing["greedy_models"] == sorted(m for m in manifest["models"] if m.startswith("tensorrt_llm_k")
                                              and m != "tensorrt_llm_k0")
    assert manifest["sampling"]["path"] == "llmapi-eagle3-one-model"
    for call in manifest["calls"]:
        assert {v: k for k, v in call["sends"].items() if k.startswith("sampling_param_")}.items() >= {
            f"generate.input.{f}": n for f, n in LLMAPI_SAMPLING_INPUTS.items()}.items()
    assert '`sampling_fallback` = "greedy"' in (repo / "README.md").read_text()
