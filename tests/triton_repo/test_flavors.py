"""The flavor names: `pytorch` is the runtime flavor's name, `cpu` its old one, accepted wherever a
flavor is read and meaning the same everywhere."""

from __future__ import annotations

import json

import pytest

from triton_fixtures import DRAFT, LLAMA, fake_ckpt, tiny_tokenizer_dir, tuning_file
from trtspec.errors import TrtspecError
from trtspec.recipe import Recipe
from trtspec.triton_repo.flavors import FLAVORS, canonical, is_pytorch
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.sampling import route_sampling
from trtspec.triton_repo import serve


def test_names():
    assert canonical("cpu") == canonical("pytorch") == "pytorch" and canonical("trtllm") == "trtllm"
    assert is_pytorch("cpu") and is_pytorch("pytorch") and not is_pytorch("llmapi") and not is_pytorch(None)
    assert set(FLAVORS) == {"trtllm", "llmapi", "pytorch", "cpu"}


@pytest.mark.parametrize("mode", ["draft-target", "eagle"])
def test_both_names_run_the_same_accept_rule(mode):
    assert route_sampling("pytorch", mode) == route_sampling("cpu", mode)


def test_a_recipe_takes_either_name():
    base = {"target": "default", "workloads": {"chat": "mt-bench"}, "draft": "x"}
    rules = {f: Recipe.model_validate({**base, "triton": {"flavor": f}}).profile.accept_rule
             for f in ("cpu", "pytorch")}
    assert rules["cpu"] == rules["pytorch"]


class PastTheFlavorCheck(Exception):
    pass


def test_serve_reads_both_names_in_a_manifest(tmp_path, monkeypatch):
    def next_step(ports):
        raise PastTheFlavorCheck
    monkeypatch.setattr(serve, "check_ports", next_step)  # what start() does right after the flavor check
    for name in ("cpu", "pytorch", "trtllm"):
        repo = tmp_path / name
        repo.mkdir()
        (repo / "trtspec-repo.json").write_text(json.dumps({"flavor": name}))
        refused = name == "trtllm"
        error, match = (TrtspecError, "only the pytorch \\(cpu\\) flavor") if refused else (PastTheFlavorCheck, None)
        with pytest.raises(error, match=match):
            serve.CpuServer(repo).start()


def test_the_manifest_keeps_the_requested_spelling(tmp_path):
    pair, tok = tmp_path / "pair", tiny_tokenizer_dir(tmp_path / "tok")
    fake_ckpt(pair / "target", LLAMA)
    fake_ckpt(pair / "draft", DRAFT)
    tuning = tuning_file(tmp_path / "t" / "tuning.json", "draft-target", {"chat": [3, 2]})
    for name in ("cpu", "pytorch"):
        make_repository(RepoRequest(tuning=tuning, flavor=name, out=tmp_path / name, ckpt=pair, tokenizer=tok))
        assert json.loads((tmp_path / name / "trtspec-repo.json").read_text())["flavor"] == name


def test_an_unknown_flavor_is_refused_with_every_name(tmp_path):
    with pytest.raises(TrtspecError, match="triton.flavor: 'torch' is not one of trtllm, llmapi, cpu, pytorch"):
        make_repository(RepoRequest(tuning=tmp_path / "t.json", flavor="torch", out=tmp_path / "r"))
