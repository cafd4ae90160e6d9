"""On the real default model: n-gram drafting is accepted far more on the copy-heavy `code-edit`
workload (HumanEval functions quoted for a rename the answer repeats them in) than on MT-Bench chat,
in the profile's exact AL, and the tuner turns n-gram on for it.

SmolLM2-135M-Instruct converted as the target alone, 4 prompts per workload, 64 new tokens, K <= 4,
max_matching_ngram_size 2 and 3. Figures at this setting (greedy, one thread): AL(n=2, K=4) about
1.3 on chat and about 3 on code-edit. Slow: the cached SmolLM2, about a minute on 2 shared cores.
"""

from __future__ import annotations

import pytest

from trtspec.checkpoints.convert import convert_hf
from trtspec.tuning.profile import run_profile
from trtspec.tuning.schema import dump_json
from trtspec.tuning.tune import run_tune
from trtspec.tuning.select import SelectConfig
from trtspec.workloads import load_workloads

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
MAX_K, SIZES = 4, [2, 3]


def test_copy_heavy_workload_accepts_ngram_drafts_far_more_than_chat(smollm2_hf, tmp_path):
    ckpt = convert_hf(smollm2_hf, tmp_path / "target", dtype="float32")
    workloads = load_workloads("chat=mt-bench,edit=code-edit", samples=4, max_new_tokens=64)
    profile = run_profile(ckpt, workloads, MAX_K, ngram_sizes=SIZES)
    assert profile.mode == "ngram" and profile.measurement_conditions.model_extra["ngram_pool"] == "per-request"
    chat, edit = (profile.workloads[n].accept_length_by_n_k for n in ("chat", "edit"))
    for n in map(str, SIZES):
        assert edit[n][str(MAX_K)] > chat[n][str(MAX_K)] + 1.0, (chat, edit)
    assert edit["2"][str(MAX_K)] > 2.0, edit
    path = tmp_path / "profile.json"
    path.write_text(dump_json(profile))
    tuning = run_tune(path, "h100", target_ckpt=ckpt, cfg=SelectConfig(concurrency_bands=[1, 64]))
    assert tuning.mode == "ngram"
    for b in tuning.workloads["edit"].bands:
        assert b.speculate and b.drafter == "ngram" and b.draft_len >= 2 and b.max_matching_ngram_size in SIZES
