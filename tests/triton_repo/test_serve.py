"""`trtspec serve` exits with tritonserver's own status (the live shutdown tests are in
tests/integration/test_triton_shutdown.py)."""

from __future__ import annotations

import signal
from pathlib import Path

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
    from trtspec.triton_repo.ports import server_ports
    from trtspec.triton_repo.serve import CpuServer

    server = CpuServer(moved / "cpu", *server_ports(), log_file=moved / "log.txt")
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


def test_serve_refuses_ports_given_twice_before_reading_the_repository(tmp_path, capsys):
    """Refused when the flags are read (before the repository is), naming the flags the user typed."""
    from cli_helpers import run_cli

    code, _, err = run_cli(capsys, "serve", tmp_path / "none", "--http-port", "9000", "--grpc-port", "9000")
    assert code == 2 and err.strip() == ("error: --http-port/--grpc-port/--metrics-port: http, grpc and metrics "
                                         "must differ (http and grpc are both 9000)"), err


# ---- a server that fails to start: the log's first errors and its tail -------------------------------

LOGS = Path(__file__).resolve().parents[1] / "golden" / "tritonserver"


@pytest.mark.parametrize("log, cause", [
    ("model-initialize-raises.log", "failed to load 'preprocessing' version 1: Internal: RuntimeError: deliberate"),
    ("config-does-not-parse.log", "Poll failed for model directory 'generate': failed to read text proto"),
])
def test_a_failed_start_shows_the_logs_first_errors_above_its_tail(log, cause):
    """Real logs of the bundled tritonserver 2.51 (tmp paths replaced): a model that fails early is
    followed by the others loading, the status tables and the unloading, so its error is not among
    the last lines. The error lines above the tail are shown once, without the CUDA-driver line
    logged at every start on a CPU box."""
    from trtspec.triton_repo.serve import TAIL_LINES, ServerStartError

    lines = (LOGS / log).read_text().splitlines()
    assert not any(cause in x for x in lines[-TAIL_LINES:])  # the tail alone misses the cause
    e = ServerStartError.from_log("tritonserver exited", LOGS / log)
    assert e.log_tail.splitlines() == lines[-TAIL_LINES:]
    errors = e.log_errors.splitlines()
    assert any(cause in x for x in errors) and all(x in lines[:-TAIL_LINES] for x in errors)
    assert not any("CudaDriverHelper" in x for x in errors)
    block = e.log_block()
    assert block.index("(first errors) ---") < block.index(cause) < block.index("(last lines) ---")
    assert block.count(lines[-1]) == 1


def test_a_failed_start_without_errors_before_the_tail_shows_the_tail_alone(tmp_path):
    from trtspec.triton_repo.serve import ServerStartError

    (tmp_path / "log").write_text("I1126 01:37:41.117684 1 server.cc:1] starting\nerror: creating server\n")
    e = ServerStartError.from_log("tritonserver exited", tmp_path / "log")
    assert e.log_errors == "" and e.log_block().startswith("--- tritonserver log (last lines) ---\nI1126")
    assert ServerStartError.from_log("x", tmp_path / "absent").log_block() == ""
