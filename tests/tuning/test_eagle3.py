"""EAGLE-3 profiles are exact: one teacher-forced pass (tuning/profile.py eagle3_match_lengths)
replays to the acceptance length the runtime's EAGLE-3 decoding measures, for every K <= max_k;
the tuner picks max_draft_len per workload x band from such a profile."""

from __future__ import annotations

import pytest
import torch

from tiny_models import eagle3_dirs
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.tuning.acceptance import summarize
from trtspec.tuning.profile import profile_prompts

pytestmark = pytest.mark.usefixtures("one_torch_thread")
V, NEW, MAX_K = 48, 24, 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("eagle3_profile")
    eagle3_dirs(d, V)
    g = torch.Generator().manual_seed(1)
    prompts = [(f"p{i}", torch.randint(3, V, (n,), generator=g).tolist()) for i, n in enumerate((5, 11, 2, 8))]
    return d, prompts, load_models(d / "ckpt", tokenizer=False, eagle3_head=d / "bigram_head")


def replay(match_lengths, k, T):
    """Reference replay (independent of trtspec.tuning.acceptance): state 1 follows the prefill
    token; a step at state t accepts min(match_lengths[t], k) drafts and emits one more, but never
    more than the T - t tokens left (TensorRT-LLM stops a request at its length and counts no more)."""
    steps = total = 0
    t = 1
    while t < T:
        a = min(match_lengths[t], k, T - t - 1)
        steps, total, t = steps + 1, total + a + 1, t + a + 1
    return total / steps


def test_one_profile_gives_the_runtimes_acceptance_length_for_every_k(setup):
    d, prompts, models = setup
    profiles = profile_prompts(models, prompts, NEW + MAX_K + 1, MAX_K, ignore_eos=True)
    seen = set()
    for k in range(1, MAX_K + 1):
        runtime = generate_batch(models, [p for _, p in prompts], NEW, mode="eagle3", draft_len=k, ignore_eos=True)
        for sp, r in zip(profiles, runtime):
            assert sp.output_ids[:NEW] == r.output_ids
            al = replay(sp.match_lengths, k, NEW)
            assert al == r.stats.acceptance_length, (sp.id, k)
            seen.add(round(al, 3))
    assert len(seen) > 4 and max(seen) > 2  # acceptance is partial, deep and varies: not vacuous
    agg = summarize("eagle3", [sp.match_lengths for sp in profiles], MAX_K)
    assert agg["accept_length_by_k"]["1"] < agg["accept_length_by_k"][str(MAX_K)]


def test_the_tuner_picks_max_draft_len_per_workload_and_band(setup, tmp_path):
    from trtspec.tuning.schema import build_profile, dump_json
    from trtspec.tuning.select import SelectConfig
    from trtspec.tuning.tune import run_tune

    d, prompts, models = setup
    profiles = profile_prompts(models, prompts, NEW, MAX_K, ignore_eos=True)
    chat = [{"id": p.id, "prompt_len": p.prompt_len, "match_lengths": p.match_lengths} for p in profiles]
    never = [{**s, "match_lengths": [0] * len(s["match_lengths"])} for s in chat]  # a workload the head never gets
    conditions = {"target": str(d / "ckpt"), "max_new_tokens": NEW, "dtype": "torch.float32",
                  "trtspec_version": "test", "eagle3_head": str(d / "bigram_head")}
    path = tmp_path / "profile.json"
    path.write_text(dump_json(build_profile("eagle3", MAX_K, None, conditions, {"chat": chat, "never": never})))
    tuning = run_tune(path, "h100", cfg=SelectConfig(concurrency_bands=[1, 64]))
    assert tuning.mode == "eagle3"
    chosen = {name: [b.draft_len for b in w.bands] for name, w in tuning.workloads.items()}
    assert chosen["never"] == [0, 0]  # no speculation where nothing is accepted
    assert all(k >= 1 for k in chosen["chat"]) and tuning.max_draft_len == max(chosen["chat"])
    assert tuning.cost.draft.vocab_size == 40 and tuning.cost.draft.num_layers == 1  # the head, reduced vocabulary


def test_profile_then_tune_commands_with_an_eagle3_head(setup, tmp_path, capsys):
    import json

    from cli_helpers import run_cli
    from tiny_models import save_tiny_tokenizer

    d, _, _ = setup
    save_tiny_tokenizer(d / "ckpt", vocab_size=V)
    prompts = tmp_path / "traffic.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": " ".join(f"t{3 + (i * 7 + j) % 40}" for j in range(6))})
                                 for i in range(3)))
    code, out, err = run_cli(capsys, "profile", "--ckpt", d / "ckpt", "--eagle3-head", d / "bigram_head",
                             "--workloads", f"logs={prompts}", "--max-k", "3", "--max-new-tokens", "12",
                             "--out", tmp_path / "profile.json")
    assert code == 0, err
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert profile["mode"] == "eagle3" and profile["tree_top_k"] is None
    assert profile["measurement_conditions"]["eagle3_head"] == str((d / "bigram_head").resolve())
    assert profile["workloads"]["logs"]["accept_length_by_k"]["3"] > 1.0
    code, out, err = run_cli(capsys, "tune", "--profile", tmp_path / "profile.json", "--cost", "h100",
                             "--concurrency-bands", "1,8", "--out", tmp_path / "tuning.json")
    assert code == 0, err
    tuning = json.loads((tmp_path / "tuning.json").read_text())
    bands = [b for w in tuning["workloads"].values() for b in w["bands"]]
    assert tuning["mode"] == "eagle3" and tuning["max_draft_len"] == max(b["draft_len"] for b in bands)
    assert all(b["tokens_per_s"] == max(p["tokens_per_s"] for p in b["sweep"]) for b in bands)  # the best K
