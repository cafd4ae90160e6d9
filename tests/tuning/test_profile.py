"""The profile is exact: replaying its step boundaries gives the same acceptance length as running
the speculative loop, for every K of a chain draft and for several EAGLE trees, from one pass.

Models: a tiny Llama whose layers write only 10% into the residual stream (close to a bigram
model), a bigram draft and a bigram-ish EAGLE head, so acceptance is partial (see
tiny_models.bigram_drafters)."""

from __future__ import annotations

import pytest
import torch

from tiny_models import bigram_drafters
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.tuning.profile import profile_prompts

NEW, MAX_K = 40, 6
TREES = {
    "chain4": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]],
    "wide": [[0], [1], [2], [0, 0], [1, 0], [0, 1], [0, 0, 0], [0, 0, 0, 0]],
    "mixed": [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1]],
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("profile")
    bigram_drafters(d)
    g = torch.Generator().manual_seed(1)
    prompts = [(f"p{i}", torch.randint(3, 1001, (n,), generator=g).tolist()) for i, n in enumerate((5, 11, 2))]
    return d, prompts


def replay(lists, accepted_at, T):
    """Reference replay (written independently of trtspec.tuning.acceptance): state t=1 follows the
    prefill token; each step accepts a = accepted_at(t) draft tokens and emits a + 1, but never more
    than the T - t tokens left (TensorRT-LLM stops a request at its length and counts no more)."""
    steps = total = 0
    t = 1
    while t < T:
        a = min(accepted_at(lists[t]), T - t - 1)
        steps, total, t = steps + 1, total + a + 1, t + a + 1
    return total / steps


def tree_accepts(tree):
    nodes = {tuple(p) for p in tree}

    def accepted(path):
        a = 0
        while a < len(path) and path[a] >= 0 and tuple(path[:a + 1]) in nodes:
            a += 1
        return a
    return accepted


def test_chain_profile_replays_to_the_runtime_acceptance(setup):
    d, prompts = setup
    models = load_models(d / "target", d / "draft")
    # profile a little past NEW: the runs of the last states are recorded past the end, which the count ignores
    profiles = profile_prompts(models, prompts, NEW + MAX_K + 1, MAX_K, ignore_eos=True)
    seen = set()
    for k in range(1, MAX_K + 1):
        runtime = generate_batch(models, [p for _, p in prompts], NEW, mode="draft-target", draft_len=k,
                                 ignore_eos=True)
        for sp, r in zip(profiles, runtime):
            assert sp.output_ids[:NEW] == r.output_ids
            al = replay(sp.match_lengths, lambda m: min(m, k), NEW)
            assert al == pytest.approx(r.stats.acceptance_length, abs=1e-12), (sp.id, k)
            seen.add(round(al, 3))
    assert len(seen) > 3  # acceptance is partial and varies: the check is not vacuous


@pytest.mark.parametrize("tree", list(TREES))
def test_eagle_profile_replays_to_the_runtime_acceptance(setup, tree):
    d, prompts = setup
    models = load_models(d / "eagle")
    profiles = profile_prompts(models, prompts, NEW + 5, 4, tree_top_k=10, ignore_eos=True)
    runtime = generate_batch(models, [p for _, p in prompts], NEW, mode="eagle", eagle_choices=TREES[tree],
                             ignore_eos=True)
    als = []
    for sp, r in zip(profiles, runtime):
        assert sp.output_ids[:NEW] == r.output_ids
        al = replay(sp.rank_paths, tree_accepts(TREES[tree]), NEW)
        assert al == pytest.approx(r.stats.acceptance_length, abs=1e-12), sp.id
        als.append(al)
    assert max(als) > 1.3  # the head is accepted often enough for the trees to differ


def test_rank_paths_shape(setup):
    d, prompts = setup
    models = load_models(d / "eagle")
    sp = profile_prompts(models, prompts[:1], 12, 4, tree_top_k=3, ignore_eos=True)[0]
    assert len(sp.rank_paths) == 12
    for path in sp.rank_paths[1:-4]:
        assert 1 <= len(path) <= 4
        assert all(0 <= r < 3 for r in path[:-1]) and (path[-1] >= -1)
        assert -1 not in path[:-1]


def test_profile_then_tune_commands(setup, tmp_path, capsys):
    """trtspec profile -> profile.json (validated by its schema) -> trtspec tune -> tuning.json."""
    import json

    from cli_helpers import run_cli
    from tiny_models import save_tiny_tokenizer

    d, _ = setup
    for ckpt in ("target", "draft"):
        save_tiny_tokenizer(d / ckpt)
    prompts = tmp_path / "traffic.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": " ".join(f"t{i + j}" for j in range(6))}) for i in range(3, 9)))
    code, out, err = run_cli(capsys, "profile", "--ckpt", d / "target", "--draft-ckpt", d / "draft",
                             "--workloads", f"logs={prompts}", "--max-k", "4", "--samples", "3",
                             "--max-new-tokens", "16", "--out", tmp_path / "profile.json")
    assert code == 0, err
    profile = json.loads((tmp_path / "profile.json").read_text())
    w = profile["workloads"]["logs"]
    assert profile["mode"] == "draft-target" and w["num_samples"] == 3
    assert set(w["accept_length_by_k"]) == {"1", "2", "3", "4"}
    assert all(1.0 <= v <= 5.0 for v in w["accept_length_by_k"].values())
    assert profile["measurement_conditions"]["workloads"]["logs"]["num_samples"] == 3
    code, out, err = run_cli(capsys, "tune", "--profile", tmp_path / "profile.json", "--cost", "h100",
                             "--concurrency-bands", "1,8", "--out", tmp_path / "tuning.json")
    assert code == 0, err
    tuning = json.loads((tmp_path / "tuning.json").read_text())
    bands = tuning["workloads"]["logs"]["bands"]
    assert [b["concurrency"] for b in bands] == [1, 8]
    assert all(b["tokens_per_s"] >= b["baseline_tokens_per_s"] * (1 - 1e-9) for b in bands)
