"""The trtllm repository's memory plan per GPU (triton_repo/memory.py), its KV parameters, the KV
shortfall warnings, and `--check`'s gpu_device_ids count. Fake engines (tests/fake_trtllm_build.py):
no GPU, seconds."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from triton_fixtures import DRAFT, LLAMA, fake_engine, tiny_tokenizer_dir, tuning_file
from trtspec.builders import memory as bm
from trtspec.triton_repo.configs import parse_file, params
from trtspec.triton_repo.memory import GpuMemory, MemoryPlan, ModelMemory, check_demand
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.validate import check_repository
from trtspec.upstream import trtllm

CHOICES = {"chat": [3, 2], "code": [5, 4]}
TP2 = {**LLAMA, "mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1}}


@pytest.fixture(scope="module")
def tp2_repo(tmp_path_factory):
    """TP-2 target + TP-1 draft in orchestrator mode: the draft is on GPU 0 only."""
    root = tmp_path_factory.mktemp("memory_plan").resolve()
    target = fake_engine(root / "target_tp2", TP2, spec_mode="draft_tokens_external", max_draft_len=8)
    draft = fake_engine(root / "draft_tp1", DRAFT)
    tuning = tuning_file(root / "tdt" / "tuning.json", "draft-target", CHOICES)
    repo = root / "dt_tp2"
    make_repository(RepoRequest(out=repo, tuning=tuning, flavor="trtllm", engines=target, draft_engines=draft,
                                tokenizer=tiny_tokenizer_dir(root / "tok")))
    return repo


def test_the_plan_is_per_gpu_and_the_tightest_gpu_sizes_the_kv(tp2_repo):
    mem = json.loads((tp2_repo / "trtspec-repo.json").read_text())["memory"]
    gpus = {g["gpu"]: g for g in mem["gpus"]}
    assert gpus[0]["models"] == ["tensorrt_llm", "tensorrt_llm_draft"] and gpus[1]["models"] == ["tensorrt_llm"]
    m = {x["model"]: x for x in mem["models"]}
    target, draft = m["tensorrt_llm"], m["tensorrt_llm_draft"]
    total = trtllm.GPU_MEMORY_MIB["h100"] * 2**20
    assert gpus[1]["free_after_load_bytes"] == total - target["instance_bytes"]  # GPU 1: target rank 1 only
    assert gpus[0]["free_after_load_bytes"] == total - target["instance_bytes"] - draft["instance_bytes"]
    block = trtllm.TOKENS_PER_BLOCK
    pool0 = int(gpus[0]["free_after_load_bytes"] * trtllm.KV_CACHE_FREE_GPU_MEMORY_FRACTION)
    tokens = pool0 // ((target["kv_bytes_per_token"] + draft["kv_bytes_per_token"]) * block) * block
    assert target["kv_tokens"] == draft["kv_tokens"] == tokens and target["kv_gpu"] == draft["kv_gpu"] == 0
    assert mem["tightest_gpu"] == 0 and mem["free_after_load_bytes"] == gpus[0]["free_after_load_bytes"]
    # the target's per-rank share (TP-2: half the kv heads) is what GPU 0 holds of it
    assert target["kv_bytes_per_token"] == 2 * 32 * (8 // 2) * 128 * 1


def test_each_model_gets_a_fraction_that_reaches_its_tokens_when_it_loads_last(tp2_repo):
    """kvCacheManager.cpp @b35ac1b6: a model's pool is min(max_tokens, fraction x the memory free when
    it loads); loaded after the other model on GPU 0 it sees that one's pool gone."""
    mem = json.loads((tp2_repo / "trtspec-repo.json").read_text())["memory"]
    free0 = mem["gpus"][0]["free_after_load_bytes"]
    m = {x["model"]: x for x in mem["models"]}
    for name, other in (("tensorrt_llm", "tensorrt_llm_draft"), ("tensorrt_llm_draft", "tensorrt_llm")):
        p = params(parse_file(tp2_repo / name / "config.pbtxt"))
        frac = float(p["kv_cache_free_gpu_mem_fraction"])
        assert int(p["max_tokens_in_paged_kv_cache"]) == m[name]["kv_tokens"] and frac == m[name]["kv_fraction"]
        mine, theirs = (m[n]["kv_tokens"] * m[n]["kv_bytes_per_token"] for n in (name, other))
        assert frac * (free0 - theirs) >= mine and (frac - 0.01) * (free0 - theirs) < mine  # the smallest such
        assert frac < trtllm.KV_CACHE_FREE_GPU_MEMORY_FRACTION


def test_check_counts_gpu_device_ids_against_the_engine_ranks(tp2_repo, tmp_path):
    """A hand-edited gpu_device_ids naming another count than the engine's tp x pp fails at load
    (executorImpl.cpp @b35ac1b6, upstream.triton); --check says so."""
    assert check_repository(tp2_repo) == []
    repo = tmp_path / "edited"
    shutil.copytree(tp2_repo, repo)
    for name, old, new in (("tensorrt_llm_draft", '"0"', '"0,1"'), ("tensorrt_llm", '"0,1"', '"0"')):
        cfg = repo / name / "config.pbtxt"
        text = cfg.read_text()
        key = text.index('key: "gpu_device_ids"')
        at = text.index(f"string_value: {old}", key)
        cfg.write_text(text[:at] + f"string_value: {new}" + text[at + len(f"string_value: {old}"):])
    probs = [p for p in check_repository(repo) if "gpu_device_ids" in p]
    assert len(probs) == 2
    draft = next(p for p in probs if "tensorrt_llm_draft/config.pbtxt" in p)
    assert "instance '0,1' names 2 GPU(s), expected 1 (tp x pp x cp = 1" in draft
    target = next(p for p in probs if "tensorrt_llm/config.pbtxt" in p)
    assert "instance '0' names 1 GPU(s), expected 2 (tp x pp x cp = 2" in target


def _plan(kv_tokens: int, per_seq: int = 8200) -> MemoryPlan:
    m = ModelMemory("tensorrt_llm", "/e", [0], 0, bm.RUNTIME_OVERHEAD_BYTES, [65536], per_seq, [0, 1],
                    kv_tokens=kv_tokens, kv_gpu=1)
    return MemoryPlan("h100", 0, [m], [GpuMemory(0, ["tensorrt_llm"], 1, 1), GpuMemory(1, ["tensorrt_llm"], 1, 1)],
                      False)


def _tuning(context_tokens: float, num_tokens: int, bands=(1, 16)):
    w = SimpleNamespace(context_tokens=context_tokens, num_tokens=num_tokens, num_samples=2, prompt_tokens=None,
                        bands=[SimpleNamespace(concurrency=c) for c in bands])
    return SimpleNamespace(workloads={"chat": w})


def test_kv_short_of_the_tuned_load_is_warned_naming_the_numbers():
    plan = _plan(kv_tokens=20000)
    check_demand(plan, 64, _tuning(1000.0, 2000))  # a request: 1000 + 500 = 1500 tokens; 16 x 1500 = 24000
    (w,) = plan.warnings
    assert w.startswith("memory: GPU 1: tensorrt_llm gets about 20000 KV tokens (max_tokens_in_paged_kv_cache)")
    assert "16 concurrent requests x 1500 tokens (prompt + output of workload 'chat') = 24000" in w
    assert "triton.max_batch_size to 13" in w


def test_full_length_sequences_beyond_the_kv_are_not_warned_when_the_tuned_load_fits():
    """max_batch_size full-length sequences exceed the KV cache of nearly every deployment (the
    scheduler admits what fits): only the tuned load is checked."""
    plan = _plan(kv_tokens=100000)
    check_demand(plan, 64, _tuning(1000.0, 2000))
    assert plan.warnings == []


def test_a_context_tokens_override_does_not_shift_the_request_length_checked():
    """tune.context_tokens prices every step at its value, whatever the prompts; the demand check
    counts the profiled prompt (256 tokens) + output (32) per request, not the override."""
    from trtspec.tuning.select import SelectConfig, tune_draft_target
    from trtspec.tuning.synthetic import chain_profile, example_cost_model

    prof = chain_profile({"chat": 0.7}, num_samples=2, T=32, max_k=4, prompt_len=256)
    cfg = SelectConfig(concurrency_bands=[1, 16], context_tokens=4096)
    w = tune_draft_target(prof, example_cost_model("draft-target"), cfg)["chat"]
    per_req = 256 + w.num_tokens // w.num_samples
    assert w.context_tokens == 4096 and w.prompt_tokens == 256
    plan = _plan(kv_tokens=16 * per_req)  # exactly the tuned load: 16 requests of prompt + output
    check_demand(plan, 64, SimpleNamespace(workloads={"chat": w}))
    assert plan.warnings == []
    short = _plan(kv_tokens=16 * per_req - 1)
    check_demand(short, 64, SimpleNamespace(workloads={"chat": w}))
    assert f"16 concurrent requests x {per_req} tokens" in short.warnings[0]


def test_the_readme_shows_every_gpu_of_the_plan(tp2_repo):
    """Target ranks on GPUs 0 and 1, the draft on GPU 0 only: both rows, GPU 0 marked tightest."""
    text = (tp2_repo / "README.md").read_text()
    mem = json.loads((tp2_repo / "trtspec-repo.json").read_text())["memory"]
    g0, g1 = mem["gpus"]
    assert f"| 0 (tightest) | `tensorrt_llm`, `tensorrt_llm_draft` | {g0['free_after_load_bytes'] / 2**30:.2f} |" in text
    assert f"| 1 | `tensorrt_llm` | {g1['free_after_load_bytes'] / 2**30:.2f} |" in text


def _pp_repo(root, name: str, tp: int, pp: int, layers: int):
    """A draft_tokens_external LLAMA engine of tp x pp ranks (orchestrator-less: one model) served with n-gram."""
    mapping = {"world_size": tp * pp, "tp_size": tp, "pp_size": pp}
    engine = fake_engine(root / name, {**LLAMA, "num_hidden_layers": layers, "mapping": mapping},
                         spec_mode="draft_tokens_external", max_draft_len=8)
    tuning = tuning_file(root / f"t_{name}" / "tuning.json", "ngram", {"chat": (3, 2)})
    repo = root / f"repo_{name}"
    make_repository(RepoRequest(out=repo, tuning=tuning, flavor="trtllm", engines=engine,
                                tokenizer=tiny_tokenizer_dir(root / f"tok_{name}")))
    return json.loads((repo / "trtspec-repo.json").read_text())["memory"], repo


def _llama_stage_by_hand(tp: int, layers: int, first: bool, last: bool) -> tuple[int, int]:
    """Weights and KV bytes per token of one rank of a LLAMA (fixture) pipeline stage holding `layers`
    layers: FP8 linears (1 byte), bf16 norms, embedding (not vocab-parallel) and lm_head (excluded from
    FP8); FP8 KV; the embedding on the first stage, ln_f and lm_head on the last."""
    q, kv = 32 // tp, 8 // tp
    layer = (q + 2 * kv) * 128 * 4096 + 4096 * q * 128 + 3 * 4096 * (14336 // tp) + 2 * 4096 * 2
    weights = layers * layer + (128256 * 4096 * 2 if first else 0)
    weights += (4096 * 2 + (128256 // tp) * 4096 * 2) if last else 0
    return weights, 2 * layers * kv * 128 * 1


@pytest.mark.parametrize("tp, layers, stage_layers", [(1, 31, (16, 15)), (2, 32, (16, 16))])
def test_pipeline_parallel_charges_each_gpu_its_own_stage(tmp_path, tp, layers, stage_layers):
    """pp = 2 (tensorrt_llm/mapping.py pp_layers @b35ac1b6: the first num_layers % pp stages take the
    extra layer; rank r on stage r // tp, on GPU r): each GPU holds its stage's layers and their KV,
    GPU(s) of stage 0 the embedding, those of stage 1 ln_f + lm_head; the executor MIN-reduces the
    KV blocks over every rank (kvCacheManager.cpp calculateMaxNumBlocks)."""
    mem, repo = _pp_repo(tmp_path, f"tp{tp}pp2", tp, 2, layers)
    total = trtllm.GPU_MEMORY_MIB["h100"] * 2**20
    activations = 8192 * 4096 * 16 * 2 + 64 * (8 + 1) * 128256 * 4  # max_num_tokens x H x 16 bf16 + fp32 logits
    stages = [_llama_stage_by_hand(tp, n, first=s == 0, last=s == 1) for s, n in enumerate(stage_layers)]
    gpus = {g["gpu"]: g for g in mem["gpus"]}
    assert sorted(gpus) == list(range(2 * tp))
    block, tokens = trtllm.TOKENS_PER_BLOCK, {}
    for g in gpus:
        weights, kv = stages[g // tp]
        free = total - weights - activations - 2 * 1024**3
        assert gpus[g]["free_after_load_bytes"] == free
        tokens[g] = int(free * trtllm.KV_CACHE_FREE_GPU_MEMORY_FRACTION) // (kv * block) * block
    (m,) = mem["models"]
    assert m["stage_weights_bytes"] == [w for w, _ in stages]
    assert m["stage_kv_bytes_per_token"] == [kv for _, kv in stages]
    assert m["kv_tokens"] == min(tokens.values())
    p = params(parse_file(repo / "tensorrt_llm" / "config.pbtxt"))
    assert int(p["max_tokens_in_paged_kv_cache"]) == min(tokens.values())
