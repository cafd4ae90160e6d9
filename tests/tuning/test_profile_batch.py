"""Batched profiling (profile.batch_size, tuning/profile_pass.py) records exactly what profiling one
prompt at a time records: chain match lengths, EAGLE rank paths and EAGLE-3 match lengths, over
ragged prompts (a 1-token one included) and batches that split them unevenly."""

from __future__ import annotations

import pytest
import torch

from tiny_models import bigram_drafters, eagle3_dirs
from trtspec.runtime.generate import load_models
from trtspec.tuning.profile import profile_prompts

pytestmark = pytest.mark.usefixtures("one_torch_thread")
NEW, MAX_K, BATCHES = 20, 4, (2, 5)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """A near-bigram target, a bigram draft, an EAGLE-1 head and an EAGLE-3 head: partial acceptance."""
    d = tmp_path_factory.mktemp("profile_batch")
    bigram_drafters(d)
    eagle3_dirs(d / "e3", 48)
    return d


def prompts(vocab: int) -> list[tuple[str, list[int]]]:
    g = torch.Generator().manual_seed(3)
    return [(f"p{i}", torch.randint(3, vocab, (n,), generator=g).tolist()) for i, n in enumerate((5, 11, 1, 8, 2))]


def recorded(models, ps, key: str, **kw) -> dict[int, list]:
    return {b: [getattr(sp, key) for sp in profile_prompts(models, ps, NEW, MAX_K, ignore_eos=True, batch_size=b, **kw)]
            for b in (1,) + BATCHES}


def check(by_batch: dict[int, list], partial) -> None:
    one = by_batch[1]
    for b in BATCHES:
        assert by_batch[b] == one, b
    assert all(len(x) == NEW for x in one)
    assert partial(one)  # the lists vary: the comparison is not between constants


def test_chain_match_lengths(dirs, device):
    models = load_models(dirs / "target", dirs / "draft", tokenizer=False, device=device)
    check(recorded(models, prompts(1001), "match_lengths"), lambda ls: len({m for x in ls for m in x}) > 2)


def test_eagle_rank_paths(dirs, device):
    models = load_models(dirs / "eagle", tokenizer=False, device=device)
    by_batch = recorded(models, prompts(1001), "rank_paths", tree_top_k=5)
    check(by_batch, lambda ls: len({tuple(p) for x in ls for p in x}) > 3)
    assert by_batch[1][2][0] == []  # the 1-token prompt's state 0 has no committed pair


def test_eagle3_match_lengths(dirs, device):
    models = load_models(dirs / "e3" / "ckpt", tokenizer=False, eagle3_head=dirs / "e3" / "bigram_head", device=device)
    check(recorded(models, prompts(48), "match_lengths"), lambda ls: len({m for x in ls for m in x}) > 2)


def test_profile_command_batched_on_placed_models_writes_the_same_samples(dirs, tmp_path, capsys):
    """`trtspec profile --device cpu,cpu --batch-size 3` (layers placed over two devices, three
    sequences per forward) writes the samples the defaults write."""
    import json

    from cli_helpers import run_cli
    from tiny_models import save_tiny_tokenizer

    for ckpt in ("target", "draft"):
        save_tiny_tokenizer(dirs / ckpt)
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("\n".join(json.dumps({"prompt": " ".join(f"t{i + j}" for j in range(i))}) for i in range(3, 8)))
    samples = []
    for flags in ([], ["--device", "cpu,cpu", "--batch-size", "3"]):
        out = tmp_path / f"profile{len(flags)}.json"
        code, _, err = run_cli(capsys, "profile", "--ckpt", dirs / "target", "--draft-ckpt", dirs / "draft",
                               "--workloads", f"logs={traffic}", "--max-k", "3", "--max-new-tokens", "12",
                               "--out", out, *flags)
        assert code == 0, err
        samples.append(json.loads(out.read_text())["workloads"]["logs"]["samples"])
    assert samples[0] == samples[1] and len(samples[0]) == 5
