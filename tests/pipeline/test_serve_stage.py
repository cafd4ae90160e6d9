"""The serve stage of `trtspec run` (stages.start_server) with CpuServer replaced by a stand-in: the
ports it gives the server, and where the server's log goes when it fails to start (the live case is
tests/pipeline/test_lifecycle.py)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from trtspec.pipeline import stages as st
from trtspec.recipe import parse_recipe
from trtspec.triton_repo import ports
from trtspec.triton_repo.serve import ServerStartError


def serve_ctx(tmp_path, triton_ports=None) -> st.Ctx:
    recipe = parse_recipe({"target": "default", "ngram": True, "workloads": {"chat": "mt-bench"},
                           "triton": {"flavor": "cpu", "ports": triton_ports or {}},
                           "perf": {"concurrency": [1], "requests": 2}})
    return st.Ctx(recipe, tmp_path / "r.yaml", st.Paths(tmp_path / "out"), Console(file=io.StringIO()))


class Server:
    """CpuServer's stand-in: records its ports; start() raises `error` when given one."""
    error: Exception | None = None

    def __init__(self, repo, http, grpc, metrics, **kw):
        self.ports = {"http": http, "grpc": grpc, "metrics": metrics}
        self.grpc_url = f"127.0.0.1:{grpc}"

    def start(self, timeout_s):
        if self.error:
            raise self.error
        return self


def test_ports_picked_for_the_server_never_take_a_configured_one(tmp_path, monkeypatch):
    """The OS may offer the configured gRPC port (free until the server binds it) and the same port
    twice: the stage must give the server three distinct ports, the configured one as set."""
    picks = iter([8001, 41000, 41000, 8001, 41001])
    monkeypatch.setattr(ports, "free_port", lambda: next(picks))
    monkeypatch.setattr(st, "CpuServer", Server)
    ctx = serve_ctx(tmp_path, {"grpc": 8001})
    st.start_server(ctx)
    assert ctx.server.ports == {"http": 41000, "grpc": 8001, "metrics": 41001}


def test_the_log_of_a_server_that_failed_to_start_goes_to_stderr(tmp_path, monkeypatch, capsys):
    """As `trtspec serve` prints it: a diagnostic, not the command's output."""
    monkeypatch.setattr(Server, "error", ServerStartError("tritonserver exited with status 1", "E1126 boom"))
    monkeypatch.setattr(st, "CpuServer", Server)
    ctx = serve_ctx(tmp_path)
    with pytest.raises(ServerStartError):
        st.start_server(ctx)
    out, err = capsys.readouterr()
    assert err == "--- tritonserver log (last lines) ---\nE1126 boom\n---\n" and out == ""
    assert ctx.console.file.getvalue() == ""
