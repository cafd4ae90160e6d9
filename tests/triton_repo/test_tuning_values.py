"""`trtspec triton` refuses a tuning.json whose values are nonsense before it writes anything: each
case is a one-line error naming the field (the schema is right, the values are not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from triton_fixtures import build_dir, tiny_pair, tiny_tokenizer_dir, tuning_file
from trtspec.errors import TrtspecError
from trtspec.triton_repo.repo import RepoRequest, make_repository


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    root = tmp_path_factory.mktemp("tuning_values").resolve()
    tok = tiny_tokenizer_dir(root / "tokenizer")
    return {"root": root, "build": build_dir(root / "build", "draft-target", tok, max_draft_len=8),
            "tuning": tuning_file(root / "t" / "tuning.json", "draft-target", {"chat": [3, 2], "code": [5, 4]})}


def _band(data, i=0):
    return data["workloads"]["chat"]["bands"][i]


CASES = {
    "nan_prediction": (lambda d: _band(d).update(acceptance_length=float("nan")),
                       "field 'workloads.chat.bands.0.acceptance_length': nan is not a finite number"),
    "infinite_speedup": (lambda d: _band(d).update(speedup=float("inf")),
                         "field 'workloads.chat.bands.0.speedup': inf is not a finite number"),
    "negative_band": (lambda d: d.update(concurrency_bands=[-1, 0]), "field 'concurrency_bands.0': concurrency -1"),
    "band_concurrency_zero": (lambda d: _band(d).update(concurrency=0),
                              "field 'workloads.chat.bands.0.concurrency': concurrency 0 is below 1"),
    "huge_draft_len": (lambda d: _band(d).update(draft_len=10**6),
                       "field 'workloads.chat.bands.0.draft_len': 1000000 is outside [0, max_draft_len="),
    "negative_draft_len": (lambda d: _band(d).update(draft_len=-2),
                           "field 'workloads.chat.bands.0.draft_len': -2 is outside [0, max_draft_len="),
    "negative_max_draft_len": (lambda d: d.update(max_draft_len=-1), "field 'max_draft_len': -1 is negative"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_nonsense_tuning_is_refused_naming_the_field(w, case):
    edit, message = CASES[case]
    data = json.loads(Path(w["tuning"]).read_text())
    edit(data)
    bad = w["root"] / f"{case}.json"
    bad.write_text(json.dumps(data))  # json writes NaN / Infinity, and reads them back
    out = w["root"] / f"repo_{case}"
    with pytest.raises(TrtspecError) as e:
        make_repository(RepoRequest(tuning=bad, flavor="trtllm", out=out, engines=w["build"]))
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not out.exists(), "a repository was written from a refused tuning.json"


def test_cpu_flavor_draft_len_must_fit_the_positions(tmp_path):
    """The cpu flavor has no engine max_draft_len: the checkpoint's positions bound K instead."""
    pair = tiny_pair(tmp_path)  # max_position_embeddings 256
    tuning = tuning_file(tmp_path / "t" / "tuning.json", "draft-target", {"chat": [300, 2], "code": [5, 4]})
    with pytest.raises(TrtspecError, match="num_draft_tokens 300, not below the target checkpoint's "
                                           "max_position_embeddings 256"):
        make_repository(RepoRequest(tuning=tuning, flavor="cpu", out=tmp_path / "repo", ckpt=pair))
    assert not (tmp_path / "repo").exists()
