"""The llmapi flavor serving a ModelOpt unified HF FP8 checkpoint (`quantize --output-format hf`):
model.yaml names the directory like any HF model (the PyTorch backend reads its
hf_quant_config.json; the KV-cache dtype follows it); the cpu flavor serves it through the runtime."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from tiny_models import make_hf_model, save_tiny_tokenizer
from triton_fixtures import tuning_file
from trtspec.calib.hf_export import quantize_hf_unified
from trtspec.calib.quantize import CalibOptions
from trtspec.errors import TrtspecError
from trtspec.triton_repo.repo import MANIFEST, RepoRequest, make_repository
from trtspec.triton_repo.validate import check_repository

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def prompts():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, 1000, (24,), generator=g).tolist() for _ in range(4)]


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    root = tmp_path_factory.mktemp("llmapi_hf").resolve()
    make_hf_model("llama", root / "hf")
    save_tiny_tokenizer(root / "hf")
    quantize_hf_unified(root / "hf", root / "fp8", CalibOptions(prompts=prompts(), samples=4), "fp8", "fp8")
    head = root / "eagle3"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "torch_dtype": "float16",
                                                  "eagle_config": {"use_aux_hidden_state": True,
                                                                   # a 2-layer target: TRT-LLM's default capture needs 6
                                                                   "eagle_aux_hidden_state_layer_ids": [0, 1]}}))
    choices = {"chat": [3, 2], "code": [5, 4]}
    return {"root": root, "head": head, "tuning": tuning_file(root / "t" / "tuning.json", "draft-target", choices),
            "tuning_eagle3": tuning_file(root / "t3" / "tuning.json", "eagle3", choices)}


def test_llmapi_serves_the_unified_hf_directory(w):
    out = w["root"] / "repo"
    make_repository(RepoRequest(out=out, tuning=w["tuning_eagle3"], flavor="llmapi", ckpt=w["root"] / "fp8",
                                draft_ckpt=w["head"]))
    assert check_repository(out) == []
    y = yaml.safe_load((out / "tensorrt_llm_k3" / "1" / "model.yaml").read_text())
    assert y["model"] == str(w["root"] / "fp8") and y["backend"] == "pytorch"
    # nothing quantization-specific: the backend reads hf_quant_config.json (kv_cache_config: several
    # LLM instances share the GPU, llmapi.kv_share)
    assert set(y) - {"kv_cache_config"} == {"model", "backend", "tensor_parallel_size", "pipeline_parallel_size",
                                            "speculative_config", "triton_config"}
    target = json.loads((out / MANIFEST).read_text())["artifacts"][0]
    assert (target["role"], target["kind"], target["path"]) == ("target", "hf", str(w["root"] / "fp8"))


def test_llmapi_refuses_a_head_under_a_draft_target_tuning(w, tmp_path):
    """A draft-target tuning measured a draft model: serving an EAGLE-3 head with its K values would
    serve numbers measured for another drafter."""
    with pytest.raises(TrtspecError, match=r"is an EAGLE-3 head, but the tuning is draft-target"):
        make_repository(RepoRequest(out=tmp_path / "repo", tuning=w["tuning"], flavor="llmapi",
                                    ckpt=w["root"] / "fp8", draft_ckpt=w["head"]))
    assert not (tmp_path / "repo").exists()


def test_cpu_flavor_serves_the_unified_hf_directory(w, tmp_path):
    from triton_fixtures import tiny_tokenizer_dir
    from trtspec.checkpoints.convert import convert_hf

    convert_hf(w["root"] / "hf", tmp_path / "draft", dtype="float32")
    out = tmp_path / "repo"
    make_repository(RepoRequest(out=out, tuning=w["tuning"], flavor="cpu", ckpt=w["root"] / "fp8",
                                draft_ckpt=tmp_path / "draft", tokenizer=tiny_tokenizer_dir(tmp_path / "tok")))
    assert check_repository(out) == []
    arts = json.loads((out / MANIFEST).read_text())["artifacts"]
    assert [(a["role"], a["path"]) for a in arts] == [("target", str(w["root"] / "fp8")),
                                                      ("draft", str(tmp_path / "draft"))]


def test_llmapi_serves_a_unified_hf_pair(w, tmp_path):
    from trtspec.calib.hf_export import quantize_pair_unified

    make_hf_model("llama", tmp_path / "d", seed=1, num_hidden_layers=1)
    save_tiny_tokenizer(tmp_path / "d")
    quantize_pair_unified(w["root"] / "hf", tmp_path / "d", tmp_path / "pair",
                          CalibOptions(prompts=prompts(), samples=4), "fp8", "fp8")
    out = tmp_path / "repo"
    make_repository(RepoRequest(out=out, tuning=w["tuning"], flavor="llmapi", ckpt=tmp_path / "pair"))
    y = yaml.safe_load((out / "tensorrt_llm_k3" / "1" / "model.yaml").read_text())
    assert y["model"] == str(tmp_path / "pair" / "target")
    assert y["speculative_config"]["speculative_model_dir"] == str(tmp_path / "pair" / "draft")


def test_profile_tune_repository_on_a_unified_hf_pair(w, tmp_path):
    """quantize --output-format hf --draft -> profile (runtime, PyTorch-backend numerics recorded)
    -> tune (cost model on the HF checkpoints) -> llmapi repository."""
    from trtspec.calib.hf_export import quantize_pair_unified
    from trtspec.runtime.hf_weights import NUMERICS
    from trtspec.tuning.profile import run_profile
    from trtspec.tuning.schema import dump_json
    from trtspec.tuning.tune import run_tune
    from trtspec.workloads import load_workloads

    make_hf_model("llama", tmp_path / "d", seed=1, num_hidden_layers=1)
    save_tiny_tokenizer(tmp_path / "d")
    quantize_pair_unified(w["root"] / "hf", tmp_path / "d", tmp_path / "pair",
                          CalibOptions(prompts=prompts(), samples=4), "fp8", "fp8")
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "prompt": " ".join(
        f"t{x}" for x in range(3 + 5 * i, 20 + 5 * i))}) + "\n" for i in range(3)))
    wl = load_workloads([f"chat={tmp_path / 'chat.jsonl'}"], max_new_tokens=8)
    prof = run_profile(tmp_path / "pair", wl, max_k=3)
    q = prof.measurement_conditions.quantization
    assert (q["quant_algo"], q["checkpoint_format"], q["runtime_numerics"]) == ("FP8", "modelopt-hf", NUMERICS)
    (tmp_path / "profile.json").write_text(dump_json(prof))
    tuning = run_tune(tmp_path / "profile.json")
    assert tuning.cost.target.compute_dtype == "fp8"
    (tmp_path / "tuning.json").write_text(dump_json(tuning))
    out = tmp_path / "repo"
    make_repository(RepoRequest(out=out, tuning=tmp_path / "tuning.json", flavor="llmapi", ckpt=tmp_path / "pair"))
    assert check_repository(out) == []
