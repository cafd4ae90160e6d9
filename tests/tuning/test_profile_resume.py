"""`profile` writes each finished workload to a partial file and resumes from it; `--categories`."""

from __future__ import annotations

import json

import pytest

from cli_helpers import run_cli
from tiny_models import make_hf_model, save_tiny_tokenizer
from trtspec.checkpoints.convert import convert_hf
from trtspec.errors import TrtspecError
from trtspec.tuning.options import ProfileOptions
from trtspec.tuning.profile import profile_workloads
from trtspec.tuning.profile_partial import partial_path
from trtspec.tuning.schema import dump_json


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    make_hf_model("llama", d / "hf")
    make_hf_model("llama", d / "hf_draft", seed=1)
    for name, hf in (("target", "hf"), ("draft", "hf_draft")):
        convert_hf(d / hf, d / name, dtype="float32")
        save_tiny_tokenizer(d / name)
    rows = [{"prompt": " ".join(f"t{i + j}" for j in range(6)), "category": "ab"[i % 2]} for i in range(3, 9)]
    (d / "cats.jsonl").write_text("\n".join(map(json.dumps, rows)))
    (d / "plain.jsonl").write_text("\n".join(json.dumps({"prompt": r["prompt"]}) for r in rows[:3]))
    return d


WORKLOADS = lambda d: [f"one={d / 'cats.jsonl'}", f"two={d / 'plain.jsonl'}"]  # noqa: E731
OPTIONS = ProfileOptions(max_k=3, max_new_tokens=8)


class Interrupt(Exception):
    pass


def test_an_interrupted_profile_resumes_from_its_finished_workloads(d, tmp_path):
    partial = tmp_path / "profile.partial.json"
    full = profile_workloads(d / "target", WORKLOADS(d), OPTIONS, d / "draft")

    def stop_at_second(msg):
        if msg.startswith("profiling two"):
            raise Interrupt

    with pytest.raises(Interrupt):
        profile_workloads(d / "target", WORKLOADS(d), OPTIONS, d / "draft", progress=stop_at_second, partial=partial)
    saved = json.loads(partial.read_text())
    assert set(saved["workloads"]) == {"one"}
    said = []
    resumed = profile_workloads(d / "target", WORKLOADS(d), OPTIONS, d / "draft", progress=said.append,
                                partial=partial)
    assert any(m.startswith("profiling one: reusing its 6 finished samples") for m in said)
    assert any(m.startswith("profiling two: 3 samples") for m in said)
    assert dump_json(resumed) == dump_json(full)
    assert set(json.loads(partial.read_text())["workloads"]) == {"one", "two"}
    # other inputs: the partial file is not used
    said.clear()
    other = profile_workloads(d / "target", WORKLOADS(d), ProfileOptions(max_k=2, max_new_tokens=8), d / "draft",
                              progress=said.append, partial=partial)
    assert any(m.startswith("ignoring") for m in said) and not any("reusing" in m for m in said)
    assert other.num_speculative_tokens == 2


def test_a_partial_file_of_another_profile_schema_is_not_resumed(d, tmp_path, monkeypatch):
    """Finished samples are recorded for one schema's rule (an n-gram step list's last step is cut at
    the end only from /2 on): a partial file written for another schema starts afresh."""
    import trtspec.tuning.profile as profile

    partial = tmp_path / "profile.partial.json"

    def stop_at_second(msg):
        if msg.startswith("profiling two"):
            raise Interrupt

    with monkeypatch.context() as m, pytest.raises(Interrupt):
        m.setattr(profile, "PROFILE_SCHEMA", "trtspec.profile/1")
        profile_workloads(d / "target", WORKLOADS(d), OPTIONS, d / "draft", progress=stop_at_second, partial=partial)
    said = []
    profile_workloads(d / "target", WORKLOADS(d), OPTIONS, d / "draft", progress=said.append, partial=partial)
    assert any(m.startswith("ignoring") for m in said) and not any("reusing" in m for m in said)


def test_categories_filter_workloads_that_have_them(d):
    p = profile_workloads(d / "target", WORKLOADS(d), ProfileOptions(max_k=2, max_new_tokens=4, categories=["a"]),
                          d / "draft")
    assert p.workloads["one"].num_samples == 3 and p.workloads["two"].num_samples == 3
    assert p.measurement_conditions.workloads["one"]["options"]["categories"] == ["a"]
    with pytest.raises(TrtspecError, match="unknown category c; available: a, b"):
        profile_workloads(d / "target", WORKLOADS(d), ProfileOptions(max_k=2, categories=["c"]), d / "draft")
    with pytest.raises(ValueError, match="expected category names"):
        ProfileOptions(categories=[" "])


def test_profile_command_categories_and_no_partial_left(d, tmp_path, capsys):
    out = tmp_path / "profile.json"
    code, _, err = run_cli(capsys, "profile", "--ckpt", d / "target", "--draft-ckpt", d / "draft",
                           "--workloads", ",".join(WORKLOADS(d)), "--categories", "b", "--max-k", "2",
                           "--max-new-tokens", "4", "--out", out)
    assert code == 0, err
    assert json.loads(out.read_text())["workloads"]["one"]["num_samples"] == 3
    assert not partial_path(out).exists()
