"""The SmolLM2-135M-Instruct cpu-flavor repository the serving benchmarks run against
(bench_genai_perf.py, bench_soak.py): the embedded default model, a draft of its first 6 layers, and a
fixed draft length per workload. Built under a work directory and reused."""

from __future__ import annotations

from pathlib import Path

from trtspec.checkpoints.default_model import smollm2_dir
from trtspec.checkpoints.derive import truncate_layers
from trtspec.checkpoints.pair import convert_pair
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.tuning.schema import dump_json
from trtspec.tuning.select import SelectConfig
from trtspec.tuning.synthetic import chain_profile
from trtspec.tuning.tune import run_tune


def build_repository(work: Path, k: dict[str, int]) -> tuple[Path, Path]:
    """SmolLM2 + 6-layer draft -> pair -> tuning.json (draft length k[w] fixed per workload) -> cpu
    repository under `work` (built once, reused). Returns (repository, tokenizer directory)."""
    hf = smollm2_dir()
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "draft" / "config.json").exists():
        truncate_layers(hf, work / "draft", 6, overwrite=True)
    if not (work / "pair" / "target" / "config.json").exists():
        convert_pair(hf, work / "draft", work / "pair", dtype="float32")
    # the tuner's choice is not what is measured here: a synthetic profile gives a valid tuning.json,
    # and K is then fixed per workload (as tests/triton_fixtures.tuning_file does)
    prof = chain_profile({w: 0.5 for w in k}, num_samples=2, T=32, max_k=4, target=str(work / "pair" / "target"),
                         draft=str(work / "pair" / "draft"))
    (work / "profile.json").write_text(dump_json(prof))
    tuning = run_tune(work / "profile.json", "h100", work / "pair" / "target", work / "pair" / "draft",
                      SelectConfig(concurrency_bands=[1, 4]))
    for w, kw in k.items():
        for band in tuning.workloads[w].bands:
            band.draft_len, band.speculate = kw, True
    tuning.max_draft_len = max(k.values())
    (work / "tuning.json").write_text(dump_json(tuning))
    make_repository(RepoRequest(tuning=work / "tuning.json", flavor="cpu", out=work / "repo", ckpt=work / "pair",
                                overwrite=True))
    return work / "repo", hf
