"""The container launch command (triton_repo/container.py) and the README text that describes it,
checked against upstream's launcher as trtspec.upstream.triton records it: llmapi under `mpirun -n 1`,
orchestrator mode with one GPU per engine rank in each `gpu_device_ids` and a zero pool on every GPU
the container sees. Fake engines and HF directories: no GPU, seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from triton_fixtures import DRAFT, LLAMA, fake_engine, tiny_tokenizer_dir, tuning_file
from trtspec.triton_repo.configs import parse_file, params
from trtspec.triton_repo.container import container_command
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.validate import check_repository
from trtspec.upstream.triton import (LLMAPI_WORLD_SIZE, MPIRUN, ORCHESTRATOR_CUDA_POOL_FLAG, PYTHON_SHM_PREFIX,
                                     TRITON_CONTAINER)

CHOICES = {"chat": [3, 2], "code": [5, 4]}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("container").resolve()


def _launch(repo: Path) -> tuple[dict, list[str]]:
    manifest = json.loads((repo / "trtspec-repo.json").read_text())
    return manifest, container_command(repo, manifest, {})


def _after_image(cmd: list[str]) -> list[str]:
    return cmd[cmd.index(TRITON_CONTAINER) + 1:]


def test_llmapi_launch_is_one_tritonserver_under_mpirun(root):
    """launch_triton_server.py's default for the LLM-API model: `mpirun --allow-run-as-root -n 1
    tritonserver ... shm prefix0_` (world size 1; the LLM spawns its own workers)."""
    target = root / "hf_target"
    head = root / "hf_eagle3"
    for path, cfg in ((target, {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"}),
                      (head, {"architectures": ["LlamaForCausalLMEagle3"], "torch_dtype": "bfloat16",
                              "eagle_config": {"use_aux_hidden_state": True}})):
        path.mkdir()
        (path / "config.json").write_text(json.dumps(cfg))
    tuning = tuning_file(root / "te3" / "tuning.json", "eagle3", CHOICES)
    repo = root / "llmapi"
    make_repository(RepoRequest(out=repo, tuning=tuning, flavor="llmapi", ckpt=target, draft_ckpt=head,
                                tokenizer=tiny_tokenizer_dir(root / "tok")))
    manifest, cmd = _launch(repo)
    run = _after_image(cmd)
    assert tuple(run[:len(MPIRUN)]) == MPIRUN and ":" not in run
    assert run.count("-n") == LLMAPI_WORLD_SIZE and run[len(MPIRUN):len(MPIRUN) + 2] == ["-n", "1"]
    assert run[-1] == f"--backend-config=python,shm-region-prefix-name={PYTHON_SHM_PREFIX.format(rank=0)}"
    # tp 1: every LLM on GPU 0, the one GPU the container is given (llmapi_parallel; tp 2: test_llmapi_tp.py)
    assert cmd[cmd.index("--gpus") + 1] == '"device=0"' and not any("memory-pool" in a for a in cmd)
    readme = (repo / "README.md").read_text()
    assert "MPI world size: 1" in readme and "mpirun --allow-run-as-root -n 1 " in readme


def test_draft_target_engines_each_name_their_own_gpus(root):
    """TP-2 target + TP-1 draft in orchestrator mode: each gpu_device_ids lists one GPU per rank of its
    engine (the executor refuses another count), and every GPU the container sees gets a zero pool."""
    target = fake_engine(root / "target_tp2", {**LLAMA, "mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1}},
                         spec_mode="draft_tokens_external", max_draft_len=8)
    draft = fake_engine(root / "draft_tp1", DRAFT)
    tuning = tuning_file(root / "tdt" / "tuning.json", "draft-target", CHOICES)
    repo = root / "dt_tp2"
    make_repository(RepoRequest(out=repo, tuning=tuning, flavor="trtllm", engines=target, draft_engines=draft,
                                tokenizer=tiny_tokenizer_dir(root / "tok_dt")))
    assert check_repository(repo) == []
    ids = {m: params(parse_file(repo / m / "config.pbtxt"))["gpu_device_ids"] for m in ("tensorrt_llm",
                                                                                       "tensorrt_llm_draft")}
    assert ids == {"tensorrt_llm": "0,1", "tensorrt_llm_draft": "0"}
    manifest, cmd = _launch(repo)
    assert manifest["launch"]["orchestrator"] and manifest["launch"]["engine_world_size"] == 2
    assert cmd[cmd.index("--gpus") + 1] == '"device=0,1"'
    pools = [a for a in cmd if a.startswith("--cuda-memory-pool-byte-size=")]
    assert pools == [ORCHESTRATOR_CUDA_POOL_FLAG.format(gpu=g) for g in (0, 1)]
    readme = (repo / "README.md").read_text()
    assert "sees only GPUs 0-1" in readme and "a TP-1 draft shares GPU 0 with the target" in readme
    assert """--gpus '"device=0,1"'""" in readme
