"""The llmapi flavor at tensor parallelism > 1 (triton.tp, llmapi_parallel.py): model.yaml, the refusals,
the memory per GPU, the GPUs the container gets, and a recipe tuning at the served tp. Tiny models."""

from __future__ import annotations

import json

import pytest
import yaml

from tiny_models import make_hf_model
from triton_fixtures import tiny_tokenizer_dir, tuning_file
from trtspec.errors import TrtspecError
from trtspec.triton_repo.container import container_command
from trtspec.triton_repo.repo import MANIFEST, RepoRequest, make_repository

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CHOICES = {"chat": [3, 2], "code": [5, 4]}
G = 2**30


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    root = tmp_path_factory.mktemp("llmapi_tp").resolve()
    make_hf_model("llama", root / "hf")  # 4 attention heads, 2 KV heads
    head = root / "eagle3"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "torch_dtype": "float16",
                                                  "eagle_config": {"use_aux_hidden_state": True,
                                                                   "eagle_aux_hidden_state_layer_ids": [0, 1]}}))
    tuning = tuning_file(root / "t3" / "tuning.json", "eagle3", CHOICES)
    repo = root / "repo"
    res = make_repository(RepoRequest(out=repo, tuning=tuning, flavor="llmapi", ckpt=root / "hf", draft_ckpt=head,
                                      tokenizer=tiny_tokenizer_dir(root / "tok"), tp=2))
    return {"root": root, "head": head, "tuning": tuning, "repo": repo, "res": res,
            "manifest": json.loads((repo / MANIFEST).read_text())}


def test_model_yaml_at_tp_2(w):
    """Every LLM model runs at tensor_parallel_size 2 (the head at the target's tp: no field of its own)."""
    text = (w["repo"] / "tensorrt_llm_k3" / "1" / "model.yaml").read_text()
    share = w["manifest"]["memory"]["free_gpu_memory_fraction"]
    assert yaml.safe_load(text) == {
        "model": str(w["root"] / "hf"), "backend": "pytorch", "tensor_parallel_size": 2, "pipeline_parallel_size": 1,
        "speculative_config": {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": str(w["head"]),
                               "eagle3_layers_to_capture": [0, 1]},
        "kv_cache_config": {"free_gpu_memory_fraction": share}, "triton_config": {"max_batch_size": 0,
                                                                                 "decoupled": True}}
    assert "\ntensor_parallel_size: 2\npipeline_parallel_size: 1\n" in text
    # tuning_file priced a tp-1 checkpoint: said, not refused
    assert any(x.startswith("triton.tp 2: tuning.json priced its steps at tp 1") for x in w["res"].warnings)


def test_a_tp_that_does_not_split_the_heads_is_refused(w, tmp_path):
    target = tmp_path / "hf32"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32,
                                                    "num_key_value_heads": 8, "intermediate_size": 14336}))

    def make(tp, flavor="llmapi", ckpt=target):
        make_repository(RepoRequest(out=tmp_path / f"r{tp}{flavor}", tuning=w["tuning"], flavor=flavor, ckpt=ckpt,
                                    draft_ckpt=w["head"], tokenizer=tiny_tokenizer_dir(tmp_path / "tok"), tp=tp))
    with pytest.raises(TrtspecError, match=r"^triton\.tp \(target .*\): num_attention_heads=32 is not divisible by "
                                           r"tp=3$"):
        make(3)
    with pytest.raises(TrtspecError, match=r"^triton\.tp: 16 exceeds the 8 GPUs of one node"):
        make(16)
    with pytest.raises(TrtspecError, match=r"^triton\.tp: the pytorch flavor"):
        make(2, "pytorch")


def test_memory_is_planned_per_gpu(w):
    """Each GPU of the tp group holds its share of every instance's weights (WeightCounter's per-rank
    rule); the plan, the KV share and the README count per GPU."""
    from trtspec.triton_repo.deploy import Artifact
    from trtspec.triton_repo.llmapi import kv_share, weight_bytes
    from trtspec.triton_repo.llmapi_parallel import gpu_share

    hf = w["root"] / "hf"
    art = Artifact(role="target", path=hf, kind="hf", config={})
    served = [("tensorrt_llm_k0", None, "")]
    whole, half = weight_bytes(served, art, 1), weight_bytes(served, art, 2)
    assert 0.5 < gpu_share(hf, 2) < 1 and half == int(whole * gpu_share(hf, 2))  # the embedding stays whole
    mem = w["manifest"]["memory"]
    assert mem["gpus"] == 2 and mem["instances"] == 2 and 0 < mem["weights_bytes_per_gpu"] < 2 * whole
    assert "on each of 2 GPU(s)" in (w["repo"] / "README.md").read_text()
    # Llama-3.3-70B in bf16 (~141 GB): one instance does not fit one H100, and says so; at tp 2 it does
    assert kv_share(1, 131 * G, 80 * G)[1].startswith("memory: 1 LLM instance of about 133.0 GiB each per GPU")
    assert kv_share(1, 131 * G // 2, 80 * G) == (None, None)


def test_the_container_gets_the_tp_gpus(w):
    manifest = w["manifest"]
    cmd = container_command(w["repo"], manifest, {})
    assert cmd[cmd.index("--gpus") + 1] == '"device=0,1"' and manifest["launch"]["world_size"] == 1
    assert "GPUs: 2 (`tensor_parallel_size: 2`" in (w["repo"] / "README.md").read_text()


def test_the_manifest_says_the_served_tp_of_every_artifact(w):
    """One truth for a manifest reader: artifacts[].tp is the tp the LLMs run at (the head at the
    target's), as launch and memory say, not the HF directories' 1."""
    manifest = w["manifest"]
    assert [(a["role"], a["tp"], a["pp"]) for a in manifest["artifacts"]] == [("target", 2, 1), ("draft", 2, 1)]
    assert manifest["launch"]["engine_world_size"] == manifest["memory"]["gpus"] == 2


def test_a_recipe_serving_llmapi_at_tp_2_tunes_at_tp_2(w, tmp_path):
    """triton.tp sets the recipe's tp: the checkpoint is converted at it, the tuner's cost model reads
    it from that checkpoint, and the repository serves it (checkpoint_tp) when triton.tp is unset."""
    from trtspec.checkpoints.stage import convert
    from trtspec.pipeline.stages import convert_options
    from trtspec.recipe import Recipe
    from trtspec.triton_repo.llmapi_parallel import checkpoint_tp
    from trtspec.tuning.cost import shapes_from_checkpoint

    base = {"target": "default", "workloads": {"chat": "mt-bench"}, "ngram": True}
    r = Recipe.model_validate({**base, "triton": {"flavor": "llmapi", "tp": 2}})
    assert r.tp == 2
    ckpt = convert(w["root"] / "hf", tmp_path / "ckpt", convert_options(r))
    assert shapes_from_checkpoint(ckpt)["target"].tp == 2 and checkpoint_tp(ckpt) == 2
    with pytest.raises(ValueError, match=r"triton\.tp: 2 differs from tp 1"):
        Recipe.model_validate({**base, "tp": 1, "triton": {"flavor": "llmapi", "tp": 2}})
    with pytest.raises(ValueError, match=r"triton\.tp: the pytorch flavor"):
        Recipe.model_validate({**base, "triton": {"flavor": "pytorch", "tp": 2}})
