"""EAGLE-3 tunings served by the llmapi flavor: one LLM model per distinct tuned max_draft_len,
routed by workload, the head's captured layers written when they are not TensorRT-LLM's default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
    assert spec == {"decoding_type": "Eagle3", "max_draft_len": 5, "speculative_model_dir": str(root / "head")}
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
    the share kv_share gives, the last instance's weights still fit when they load one after another,
    and the caches stay within 90% of what the weights leave when they load together."""
    from trtspec.triton_repo.llmapi import kv_share

    G = 2**30
    for n, w, m in ((2, 30 * G, 80 * G), (4, 16 * G, 80 * G), (3, 1 * G, 80 * G)):
        f, warning = kv_share(n, w, m)
        assert warning is None and 0 < f <= 0.9 / n
        free = m
        for _ in range(n):  # one after another: weights, then a cache from what is free
            free -= w
            assert free >= 0
            free -= f * free
        assert n * f * (m - n * w) <= 0.9 * (m - n * w) + 1  # together
    assert kv_share(1, 30 * G, 80 * G) == (None, None)
    f, warning = kv_share(3, 30 * G, 80 * G)
    assert f is None and warning.startswith("memory: 3 LLM instances of 30.0 GiB weights each do not fit")
