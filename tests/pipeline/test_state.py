"""pipeline/state.py: the fingerprints (fsutil.fingerprint) that decide whether a stage re-runs."""

from __future__ import annotations

import os

import pytest

from trtspec.errors import TrtspecError
from trtspec.fsutil import fingerprint


def test_a_symlinked_folder_is_hashed_by_its_files_content(tmp_path):
    """An HF cache snapshot is links into blobs/: an edited file under a linked folder must count."""
    (tmp_path / "blobs" / "sub").mkdir(parents=True)
    (tmp_path / "snap").mkdir()
    weights = tmp_path / "blobs" / "sub" / "w.bin"
    weights.write_text("one")
    os.symlink(tmp_path / "blobs" / "sub", tmp_path / "snap" / "sub")
    os.symlink(tmp_path / "snap", tmp_path / "snap" / "sub" / "loop")  # a cycle ends
    before = fingerprint(tmp_path / "snap")
    weights.write_text("two")
    assert fingerprint(tmp_path / "snap") != before


def test_a_dangling_link_is_an_error_naming_it(tmp_path):
    """A half-downloaded snapshot: one line naming the link, not a FileNotFoundError crashing the run."""
    os.symlink(tmp_path / "gone.incomplete", tmp_path / "model.safetensors")
    with pytest.raises(TrtspecError, match="model.safetensors: broken symbolic link to .*gone.incomplete"):
        fingerprint(tmp_path)


def test_a_run_over_a_target_with_a_dangling_link_ends_with_one_line_naming_it(tmp_path, capsys):
    import yaml
    from cli_helpers import run_cli

    (tmp_path / "hf").mkdir()
    os.symlink(tmp_path / "blob.incomplete", tmp_path / "hf" / "model.safetensors")
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"target": "hf", "draft": {"derive": {"layers": 1}},
                                                     "workloads": {"chat": "mt-bench"}}))
    code, _, err = run_cli(capsys, "run", tmp_path / "r.yaml", "--dry-run", "--out", tmp_path / "out")
    assert code == 2 and err.strip().splitlines() == [err.strip()] and "hf/model.safetensors: broken" in err, err
