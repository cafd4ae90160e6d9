"""triton.device: the pytorch flavor's runtime models on a GPU (KIND_GPU, the `device` parameter),
everything else as on the CPU; generated and validated against Triton's protobuf schema without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_fixtures import DRAFT, EAGLE, LLAMA, TREE_A, fake_ckpt, tiny_tokenizer_dir, tuning_file
from trtspec.errors import TrtspecError
from trtspec.triton_repo.configs import parse_file, params, pb
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.validate import check_repository

KIND = pb().ModelInstanceGroup.Kind


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime_device").resolve()
    pair, eagle = root / "pair", root / "eagle"
    fake_ckpt(pair / "target", LLAMA)
    fake_ckpt(pair / "draft", DRAFT)
    fake_ckpt(eagle, EAGLE)
    return {"root": root, "tok": tiny_tokenizer_dir(root / "tok"), "pair": pair, "eagle": eagle,
            "dt": tuning_file(root / "dt" / "tuning.json", "draft-target", {"chat": [3, 2], "code": [5, 4]}),
            "et": tuning_file(root / "et" / "tuning.json", "eagle", {"chat": TREE_A, "code": TREE_A})}


def make(w, name: str, tuning: str = "dt", **kw) -> Path:
    out = w["root"] / name
    ckpt = w["pair"] if tuning == "dt" else w["eagle"]
    make_repository(RepoRequest(tuning=w[tuning], out=out, ckpt=ckpt, tokenizer=w["tok"], **kw))
    return out


def configs(repo: Path) -> dict:
    return {p.parent.name: parse_file(p) for p in sorted(repo.glob("*/config.pbtxt"))}


@pytest.mark.parametrize("tuning", ["dt", "et"])
def test_cuda_puts_the_runtime_models_on_that_gpu(w, tuning):
    repo = make(w, f"gpu_{tuning}", tuning, flavor="pytorch", device="cuda:1")
    assert check_repository(repo) == []  # Triton's protobuf schema and the repository's own rules
    runtime = set()
    for name, cfg in configs(repo).items():
        (group,) = cfg.instance_group
        p = params(cfg)
        if "checkpoint_dir" in p or p.get("engine") == "trtspec.runtime":
            runtime.add(name)
            assert (group.kind, list(group.gpus), p["device"]) == (KIND.KIND_GPU, [1], "cuda:1"), name
        else:
            assert (group.kind, list(group.gpus), "device" in p) == (KIND.KIND_CPU, [], False), name
    assert runtime == ({"tensorrt_llm", "tensorrt_llm_draft", "spec_decode"} if tuning == "dt"
                       else {n for n in configs(repo) if n.startswith("tensorrt_llm")})


def test_cuda_without_an_index_is_gpu_0(w):
    cfg = configs(make(w, "gpu0", flavor="pytorch", device="cuda"))["spec_decode"]
    assert list(cfg.instance_group[0].gpus) == [0] and params(cfg)["device"] == "cuda:0"


def test_cpu_and_the_old_flavor_name_write_the_same_configs(w):
    old = configs(make(w, "old", flavor="cpu"))
    assert configs(make(w, "new", flavor="pytorch", device="cpu")) == old
    assert all(c.instance_group[0].kind == KIND.KIND_CPU and "device" not in params(c) for c in old.values())


def test_a_device_that_is_not_one_is_refused_by_field(w):
    with pytest.raises(TrtspecError, match="triton.device: 'gpu' is not a device"):
        make(w, "bad", flavor="pytorch", device="gpu")
    assert not (w["root"] / "bad").exists()


def test_a_device_for_the_trtllm_flavor_is_refused(w):
    from triton_fixtures import build_dir

    build = build_dir(w["root"] / "build", "draft-target", w["tok"], max_draft_len=8)
    with pytest.raises(TrtspecError, match="triton.device: 'cuda' applies to the pytorch flavor only"):
        make_repository(RepoRequest(tuning=w["dt"], out=w["root"] / "trt", engines=build, flavor="trtllm",
                                    device="cuda"))
