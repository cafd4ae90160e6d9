"""`trtspec serve` exits with tritonserver's own status (the live shutdown tests are in
tests/integration/test_triton_shutdown.py)."""

from __future__ import annotations

import signal

import pytest

from trtspec.triton_repo.serve import exit_status


@pytest.mark.parametrize("code, status", [(0, 0), (1, 1), (-signal.SIGKILL, 137), (-signal.SIGABRT, 134),
                                          (None, 1)])
def test_exit_status_is_tritonservers(code, status):
    assert exit_status(code) == status


# ---- a repository whose artifacts moved: refused before any server starts ---------------------------

@pytest.fixture
def moved(tmp_path):
    """A cpu repository and a trtllm one whose checkpoints / engines were moved after writing."""
    from triton_fixtures import DRAFT, LLAMA, build_dir, fake_ckpt, tiny_tokenizer_dir, tuning_file
    from trtspec.triton_repo.repo import RepoRequest, make_repository

    tok = tiny_tokenizer_dir(tmp_path / "tok")
    tuning = tuning_file(tmp_path / "t" / "tuning.json", "draft-target", {"chat": [3, 2], "code": [5, 4]})
    fake_ckpt(tmp_path / "pair" / "target", LLAMA)
    fake_ckpt(tmp_path / "pair" / "draft", DRAFT)
    build = build_dir(tmp_path / "build", "draft-target", tok)
    make_repository(RepoRequest(out=tmp_path / "cpu", tuning=tuning, flavor="cpu", ckpt=tmp_path / "pair",
                                tokenizer=tok))
    make_repository(RepoRequest(out=tmp_path / "trt", tuning=tuning, flavor="trtllm", engines=build))
    (tmp_path / "pair").rename(tmp_path / "pair_moved")
    (build / "engines").rename(build / "engines_moved")
    return tmp_path


def test_serve_refuses_a_repository_whose_checkpoints_moved(moved):
    from trtspec.errors import TrtspecError
    from trtspec.triton_repo.serve import CpuServer, free_port

    server = CpuServer(moved / "cpu", free_port(), free_port(), free_port(), log_file=moved / "log.txt")
    with pytest.raises(TrtspecError) as e:
        server.start(timeout=60)
    server.stop()
    assert "parameter target_checkpoint = '" + str(moved / "pair" / "target") + "': directory not found" \
        in str(e.value) and "\n" not in str(e.value)
    assert server.proc is None  # refused before a tritonserver was started


def test_serve_exec_refuses_a_repository_whose_engines_moved(moved):
    import typer
    from typer.testing import CliRunner

    from trtspec.errors import TrtspecError
    from trtspec.triton_repo.command import serve_command

    app = typer.Typer()
    app.command()(serve_command)
    assert CliRunner().invoke(app, [str(moved / "trt")]).exit_code == 0  # printing the command is not refused
    res = CliRunner().invoke(app, [str(moved / "trt"), "--exec"], env={"PATH": "/nonexistent"})
    assert isinstance(res.exception, TrtspecError), res.output
    assert str(moved / "build" / "engines" / "target") in str(res.exception) and "gpt_model_path" in str(res.exception)
