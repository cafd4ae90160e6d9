"""EAGLE-3 tunings served by the llmapi flavor: one LLM model per distinct tuned max_draft_len,
routed by workload, the head's captured layers written when they are not TensorRT-LLM's default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from triton_fixtures import tuning_file
from trtspec.errors import TrtspecError
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.validate import check_repository

CHOICES = {"chat": [3, 2], "code": [5, 4], "math": [0, 0]}


def _hf(path: Path, config: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle3_repo").resolve()
    tuning_file(root / "t" / "tuning.json", "eagle3", CHOICES)
    _hf(root / "target", {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "num_hidden_layers": 32})
    return root


def head(root: Path, name: str, ids=None) -> Path:
    eagle = {"use_aux_hidden_state": True, **({"eagle_aux_hidden_state_layer_ids": ids} if ids else {})}
    return _hf(root / name, {"architectures": ["LlamaForCausalLMEagle3"], "torch_dtype": "bfloat16",
                             "eagle_config": eagle})


def test_llmapi_serves_each_tuned_max_draft_len_routed_by_workload(root):
    out = root / "repo"
    make_repository(RepoRequest(out=out, tuning=root / "t" / "tuning.json", flavor="llmapi", ckpt=root / "target",
                                draft_ckpt=head(root, "head", [1, 15, 28]), default_workload="code"))  # = TensorRT-LLM's default for 32 layers
    assert check_repository(out) == []
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["generate", "tensorrt_llm_k0", "tensorrt_llm_k3",
                                                                    "tensorrt_llm_k5"]
    yml = yaml.safe_load((out / "tensorrt_llm_k5" / "1" / "model.yaml").read_text())
    spec = yml["speculative_config"]
    assert spec == {"decoding_type": "Eagle", "max_draft_len": 5, "speculative_model_dir": str(root / "head")}
    # three LLM instances share the GPU: each sizes its KV cache from a third of the default 90%, not
    # 90% of what is free (the first would leave the others no room for their weights)
    assert yml["kv_cache_config"] == {"free_gpu_memory_fraction": 0.3}
    readme = (out / "README.md").read_text()  # one-model EAGLE-3 decodes greedily; the K=0 model samples
    assert "routed to `tensorrt_llm_k3`, `tensorrt_llm_k5` is answered with the greedy tokens" in readme
    assert "`tensorrt_llm_k0` sample: no speculation, or drafts tested with **exact_match**" in readme
    manifest = json.loads((out / "trtspec-repo.json").read_text())
    assert manifest["mode"] == "eagle3"
    routing = manifest["routing"]  # the smallest band's K per workload (one LLM instance per K)
    assert {w: e["model"] for w, e in routing["workloads"].items()} == {
        "chat": "tensorrt_llm_k3", "code": "tensorrt_llm_k5", "math": "tensorrt_llm_k0"}
    # the LLM API model returns text only: generate counts its tokens with the target's tokenizer
    assert 'key: "tokenizer_dir"' in (out / "generate" / "config.pbtxt").read_text()
    assert manifest["tokenizer"] == str(root / "target")


def test_captured_layers_other_than_the_default_are_written(root):
    out = root / "repo_ids"
    make_repository(RepoRequest(out=out, tuning=root / "t" / "tuning.json", flavor="llmapi", ckpt=root / "target",
                                draft_ckpt=head(root, "head_ids", [2, 16, 29])))
    spec = yaml.safe_load((out / "tensorrt_llm_k3" / "1" / "model.yaml").read_text())["speculative_config"]
    assert spec["eagle3_layers_to_capture"] == [2, 16, 29] and spec["max_draft_len"] == 3


def test_an_eagle3_tuning_needs_an_eagle3_head(root):
    draft = _hf(root / "draft", {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"})
    with pytest.raises(TrtspecError, match="not an EAGLE-3 head, but the tuning is eagle3"):
        make_repository(RepoRequest(out=root / "repo_bad", tuning=root / "t" / "tuning.json", flavor="llmapi",
                                    ckpt=root / "target", draft_ckpt=draft))


def test_the_kv_share_leaves_every_instance_room_in_either_load_order():
    """N LLM instances each size their KV cache from a share of the memory free at that moment: with
    the share kv_share gives, the last instance (weights and runtime overhead) still fits when they
    load one after another, and the caches stay within 90% of what the instances leave when they
    load together."""
    from trtspec.builders.memory import RUNTIME_OVERHEAD_BYTES
    from trtspec.triton_repo.llmapi import kv_share

    G = 2**30
    for n, w, m in ((2, 30 * G, 80 * G), (4, 16 * G, 80 * G), (3, 1 * G, 80 * G)):
        f, warning = kv_share(n, w, m)
        assert warning is None and 0 < f <= 0.9 / n
        instance, free = w + RUNTIME_OVERHEAD_BYTES, m
        for _ in range(n):  # one after another: an instance, then its cache from what is free
            free -= instance
            assert free >= 0
            free -= f * free
        assert n * f * (m - n * instance) <= 0.9 * (m - n * instance) + 1  # together
    assert kv_share(1, 30 * G, 80 * G) == (None, None)
    f, warning = kv_share(3, 30 * G, 80 * G)  # they do not fit: the even share, and say so
    assert f == 0.3 and warning.startswith("memory: 3 LLM instances of about 32.0 GiB each")
    f, warning = kv_share(3, 0, 80 * G)
    assert f == 0.3 and "no weight files found" in warning


def test_instance_weights_are_read_as_the_loader_would(tmp_path):
    """The index's shards only (a consolidated copy beside them is not loaded), and a head's
    pytorch_model.bin by its size (never unpickled)."""
    import json

    from safetensors.torch import save_file

    from trtspec.triton_repo.deploy import Artifact
    from trtspec.triton_repo.llmapi import weight_bytes

    target, head = tmp_path / "target", tmp_path / "head"
    target.mkdir(), head.mkdir()
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        save_file({name[:11]: torch.zeros(1000)}, str(target / name))
    save_file({"all": torch.zeros(2000)}, str(target / "consolidated.safetensors"))
    (target / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model-00001": "model-00001-of-00002.safetensors", "model-00002": "model-00002-of-00002.safetensors"}}))
    (head / "pytorch_model.bin").write_bytes(b"\0" * 5000)
    shards = sum((target / f).stat().st_size for f in ("model-00001-of-00002.safetensors",
                                                       "model-00002-of-00002.safetensors"))
    art = Artifact(role="target", path=target, kind="hf", config={})
    served = [("tensorrt_llm_k0", None, ""), ("tensorrt_llm_k3", {"speculative_model_dir": str(head)}, "")]
    assert weight_bytes(served, art) == shards + 5000


def test_unknown_workloads_share_a_served_llmapi_setting():
    """Every llmapi setting is a model instance, and the drafter choice's memory counts the workloads'
    settings only: a computed default K no workload got would load one more target and drafter. The
    default takes the setting most workloads are served with instead."""
    from trtspec.triton_repo.llmapi import routing

    def bands(k):
        return [{"concurrency": 1, "num_draft_tokens": k}]

    routes = {"workloads": {"chat": bands(4), "edit": bands(1), "code": bands(4)},
              "default": {"source": "computed", "bands": bands(2)}}
    table = routing(routes)
    assert {e["model"] for e in table["workloads"].values()} == {"tensorrt_llm_k4", "tensorrt_llm_k1"}
    assert table["default"]["model"] == "tensorrt_llm_k4" and "not served" in table["default"]["source"]
    routes["default"]["bands"] = bands(1)  # a served one stays as computed
    assert routing(routes)["default"] == {"source": "computed", "model": "tensorrt_llm_k1", "num_draft_tokens": 1}
