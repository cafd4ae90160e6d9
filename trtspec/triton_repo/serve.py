"""`trtspec serve REPO`: run a generated repository.

pytorch (cpu) flavor: nvidia-pytriton's `tritonserver` binary (server 2.51), run as cpu-stack.md §4 found necessary:
- a backend directory holding `python/{libtriton_python.so, triton_python_backend_utils.py,
  triton_python_backend_stub}` with the stub of *this* interpreter's Python version (the wheel's
  default backend path is a container install path);
- LD_LIBRARY_PATH with the wheel's `nvidia_pytriton.libs` (the stub links its cudart) and this
  interpreter's LIBDIR (else the stub picks the system libpython and torch fails to import);
- PATH starting with this interpreter's bin directory (the stub takes sys.prefix from the `python`
  on PATH, which is how the models see this venv's torch, transformers and trtspec).
It binds HTTP, gRPC and metrics to 127.0.0.1 only, refuses ports already in use and a repository
whose configs name directories that are gone (check_servable) before starting,
waits for /v2/health/ready, and on failure stops the server and reports its log's first errors and tail.
The server runs in its own process group (the python-backend stubs are its children); stopping
first drains (`generate` refuses new requests, the streams in flight get drain_timeout_s to finish;
see CpuServer.drain), then sends SIGTERM to the group, waits for Triton's exit timeout (the models'
finalize), then SIGKILLs whatever is left, so no stub outlives it. Model control is off unless
asked for (model_control_args).

The trtllm / llmapi flavors' container command is in container.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..errors import TrtspecError
from ..fsutil import check_output_file
from .contracts import GENERATE
from .flavors import is_pytorch
from .models.serving_rules import CONTROL_DIR, DRAIN_FILE, INFLIGHT_SUFFIX, STOP_FILE
from .ports import HOST, check_ports

DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
DRAIN_TIMEOUT_S = 30  # the drain: streams in flight get this long at shutdown (see CpuServer.drain)
UNLOAD_S = 15  # then tritonserver --exit-timeout-secs: finalize() of every model (Workers.close joins 10 s)
KILL_GRACE_S = 10.0
STOP_GRACE_S = 3.0  # after the drain: streams still running are stopped and told so (see CpuServer.drain)


# Error lines of a tritonserver log: its own (severity E, `E1126 01:23:45.678901 ...`) and protobuf's
# (a config.pbtxt that does not parse: the line and column).
ERROR_LINE = re.compile(r"E\d{4} \d\d:\d\d:\d\d\.\d+ |\[libprotobuf ERROR ")
# Logged at every start of the bundled server on a machine without a CUDA driver: not why it failed.
BENIGN_ERRORS = ("CudaDriverHelper has not been initialized",)
TAIL_LINES, FIRST_ERRORS = 30, 5


class ServerStartError(TrtspecError):
    """The server did not become ready; `log_tail` holds the last lines of its log, `log_errors` its
    first error lines that the tail does not show (the cause: a model that fails to load early is
    followed by the other models' loading, the status tables and their unloading)."""

    def __init__(self, message: str, log_tail: str = "", log_errors: str = ""):
        super().__init__(message)
        self.log_tail, self.log_errors = log_tail, log_errors

    @classmethod
    def from_log(cls, message: str, log_file: Path) -> "ServerStartError":
        lines = log_lines(log_file)
        last = lines[-TAIL_LINES:]
        return cls(message, "\n".join(last), "\n".join(first_errors(lines[:-TAIL_LINES])))

    def log_block(self) -> str:
        """The log's first errors and last lines, framed, to print before the one-line error ('' without a log)."""
        errors = f"--- tritonserver log (first errors) ---\n{self.log_errors}\n" if self.log_errors else ""
        return errors + "--- tritonserver log (last lines) ---\n" + self.log_tail + "\n---" if self.log_tail else ""

    def print_log(self) -> None:
        """log_block on stderr, where diagnostics go (stdout is the command's output), whichever command
        started the server: `trtspec serve` and the serve stage of `trtspec run` alike."""
        if self.log_tail:
            print(self.log_block(), file=sys.stderr, flush=True)


def read_manifest(repo: Path) -> dict:
    path = Path(repo) / "trtspec-repo.json"
    if not path.is_file():
        raise TrtspecError(f"{repo}: no trtspec-repo.json (not a repository written by 'trtspec triton')")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise TrtspecError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None


def check_servable(repo: Path) -> None:
    """Before any server starts: the configs name absolute directories (checkpoints, engines,
    tokenizer) that may have moved or gone since `trtspec triton` wrote the repository. Unchecked,
    that ends in models' tracebacks in the server log (inside the container for trtllm / llmapi);
    refused here in one line naming the config, parameter and path (validate.check_repository's
    missing directories; its other findings are --check's to report, and a config the server cannot
    load is reported from the server's log)."""
    from .template_checks import MISSING_DIR
    from .validate import check_repository

    problems = [p for p in check_repository(repo) if p.endswith(MISSING_DIR)]
    if problems:
        raise TrtspecError(f"{problems[0]} ({len(problems)} problem(s): trtspec triton --check {repo})")


# ---- cpu flavor: the bundled tritonserver -----------------------------------------------------------

@dataclass
class Bundle:
    tritonserver: Path
    backend_files: list[Path]  # libtriton_python.so, triton_python_backend_utils.py, the stub
    libs: Path


def find_bundle() -> Bundle:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TrtspecError("the bundled tritonserver needs the nvidia-pytriton wheel (pip install nvidia-pytriton==0.7.0)")
    root = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
    pyver = f"{sys.version_info.major}.{sys.version_info.minor}"
    files = [root / "backends" / "python" / "libtriton_python.so",
             root / "backends" / "python" / "triton_python_backend_utils.py",
             root / "python_backend_stubs" / pyver / "triton_python_backend_stub"]
    binary = root / "bin" / "tritonserver"
    for f in [binary, *files]:
        if not f.is_file():
            raise TrtspecError(f"{f}: missing from the nvidia-pytriton wheel (Python {pyver} stub needed)")
    return Bundle(binary, files, root.parent.parent / "nvidia_pytriton.libs")


def server_env(bundle: Bundle) -> dict:
    env = dict(os.environ)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    parts = [str(bundle.libs), libdir] + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else [])
    env["LD_LIBRARY_PATH"] = ":".join(p for p in parts if p)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def log_lines(path: Path) -> list[str]:
    try:
        return Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []


def first_errors(lines: list[str]) -> list[str]:
    """The first FIRST_ERRORS error lines, less the benign ones."""
    return [x for x in lines if ERROR_LINE.match(x) and not any(b in x for b in BENIGN_ERRORS)][:FIRST_ERRORS]


class CpuServer:
    """A running bundled tritonserver serving one repository (start() waits for readiness)."""

    def __init__(self, repo: Path, http_port: int | None = None, grpc_port: int | None = None,
                 metrics_port: int | None = None, log_file: Path | None = None, extra_args: list[str] | None = None,
                 model_control: bool = False, drain_timeout_s: int = DRAIN_TIMEOUT_S):
        self.repo = Path(repo).resolve()
        self.model_control, self.drain_timeout_s = model_control, int(drain_timeout_s)
        self.ports = {"http": http_port or DEFAULT_PORTS["http"], "grpc": grpc_port or DEFAULT_PORTS["grpc"],
                      "metrics": metrics_port or DEFAULT_PORTS["metrics"]}
        self.log_file = Path(log_file) if log_file else self.repo.parent / f"{self.repo.name}.tritonserver.log"
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen | None = None
        self.workdir: Path | None = None
        self.ready = False

    @property
    def grpc_url(self) -> str:
        return f"{HOST}:{self.ports['grpc']}"

    @property
    def http_url(self) -> str:
        return f"{HOST}:{self.ports['http']}"

    def command(self, backend_dir: Path) -> list[str]:
        return [str(self.bundle.tritonserver), f"--model-repository={self.repo}", f"--backend-directory={backend_dir}",
                f"--http-address={HOST}", f"--http-port={self.ports['http']}",
                f"--grpc-address={HOST}", f"--grpc-port={self.ports['grpc']}",
                f"--metrics-address={HOST}", f"--metrics-port={self.ports['metrics']}",
                "--allow-gpu-metrics=false", "--exit-on-error=true", "--strict-readiness=true",
                f"--exit-timeout-secs={UNLOAD_S}", *self.model_control_args(), *self.extra_args]

    def model_control_args(self) -> list[str]:
        """Model control is off unless asked for: the API lets any local process load model code
        (a python model is arbitrary code). With it on, every model is still loaded at start and a
        client may reload one with another config (a tuning loop; reference triton.md §6.3)."""
        if self.model_control:
            return ["--model-control-mode=explicit", "--load-model=*"]
        return ["--model-control-mode=none"]

    def start(self, timeout: float = 300.0) -> "CpuServer":
        manifest = read_manifest(self.repo)
        if not is_pytorch(manifest.get("flavor")):
            raise TrtspecError(f"{self.repo}: a {manifest.get('flavor')} repository; only the pytorch (cpu) flavor runs "
                               "on the bundled tritonserver (the others print their container command)")
        check_servable(self.repo)
        check_ports(self.ports)
        check_output_file(self.log_file)
        self.bundle = find_bundle()
        self.workdir = Path(tempfile.mkdtemp(prefix="trtspec-triton-"))
        backend = self.workdir / "backends" / "python"
        backend.mkdir(parents=True)
        for f in self.bundle.backend_files:
            shutil.copy2(f, backend / f.name)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "wb")
        try:
            env = {**server_env(self.bundle), CONTROL_DIR: str(self.workdir)}
            self.proc = subprocess.Popen(self.command(self.workdir / "backends"), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env,
                                         cwd=str(self.workdir), start_new_session=True)
        finally:
            log.close()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.ready = True
        return self

    def drain(self) -> int | None:
        """Let the streams in flight finish before Triton gets its SIGTERM (after which it refuses
        every new request, the BLS calls of a stream in flight included): `generate` stops taking
        new requests ("the server is shutting down") and reports its in-flight count, which is
        waited on for up to drain_timeout_s. Then the streams still running are stopped at their
        next step, and their final error ("did not finish within the drain period") is given
        STOP_GRACE_S to reach the clients while Triton still serves. Returns the count left."""
        (self.workdir / DRAIN_FILE).touch()
        left = self._wait_idle(self.drain_timeout_s)
        if left != 0:
            (self.workdir / STOP_FILE).touch()
            left = self._wait_idle(STOP_GRACE_S)
        return left

    def _wait_idle(self, timeout: float) -> int | None:
        """generate's in-flight count once it is 0, or the last one reported after `timeout` s."""
        report = self.workdir / (GENERATE + INFLIGHT_SUFFIX)
        deadline = time.monotonic() + timeout
        left = None
        while self.alive() and time.monotonic() < deadline:
            try:
                left = int(report.read_text())
            except (OSError, ValueError):
                left = None
            if left == 0:
                return 0
            time.sleep(0.2)
        return left

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://{self.http_url}/v2/health/ready"
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError.from_log(f"tritonserver exited with status {code} while loading {self.repo} "
                                                f"(log: {self.log_file})", self.log_file)
            try:
                with urllib.request.urlopen(url, timeout=1.0) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServerStartError.from_log(f"tritonserver was not ready after {timeout:.0f} s "
                                                f"(log: {self.log_file})", self.log_file)
            time.sleep(0.25)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float | None = None) -> int | None:
        """SIGTERM the server's process group, wait (its exit timeout, then KILL_GRACE_S), then
        SIGKILL what is left. Returns the exit status."""
        grace = UNLOAD_S + KILL_GRACE_S if grace is None else grace
        code = None
        if self.ready and self.alive() and grace != 0:  # grace 0: kill now, no drain
            self.drain()
        self.ready = False
        if self.proc is not None:
            pgid = self.proc.pid  # start_new_session: the group id is the server's pid
            signal_group(pgid, signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                signal_group(pgid, signal.SIGKILL)
                code = self.proc.wait(timeout=10)
            _reap_group(pgid)
            self.proc = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        return code

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_group(pgid: int, wait: float = 5.0) -> None:
    """After the server exits, its stubs must go too: SIGKILL any member of the group still alive."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)
    signal_group(pgid, signal.SIGKILL)


def exit_status(code: int | None) -> int:
    """serve's exit status for tritonserver's: 0 only when tritonserver stopped cleanly (exit 0);
    its own status when it failed (1: a model did not unload within its exit timeout); 128 + N
    when it was killed by signal N (SIGKILL after the grace period: 137)."""
    if code is None:  # no status was observed: not a clean stop
        return 1
    return 128 - code if code < 0 else code


def serve_cpu(repo: Path, ports: dict[str, int | None], timeout: float, log_file: Path | None, echo,
              drain_timeout_s: int = DRAIN_TIMEOUT_S, model_control: bool = False) -> int:
    """Foreground serving: start, report, wait for Ctrl-C / SIGTERM, stop cleanly. Returns the
    command's exit status, tritonserver's own (see exit_status): 0 only for a clean stop."""
    server = CpuServer(repo, ports.get("http"), ports.get("grpc"), ports.get("metrics"), log_file,
                       model_control=model_control, drain_timeout_s=drain_timeout_s)
    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.start(timeout)
        echo(f"ready: gRPC {server.grpc_url}, HTTP {server.http_url}, metrics {HOST}:{server.ports['metrics']} "
             f"(log: {server.log_file}); Ctrl-C stops it")
        while stop["signal"] is None and server.alive():
            time.sleep(0.2)
        if stop["signal"] is None:
            code = server.proc.returncode if server.proc else None
            error = ServerStartError.from_log(f"tritonserver exited unexpectedly with status {code} "
                                              f"(log: {server.log_file})", server.log_file)
            server.stop()
            raise error
        echo(f"stopping (signal {stop['signal']})")
        code = server.stop()
        echo(f"stopped (tritonserver exit status {code})")
        return exit_status(code)
    finally:
        server.stop()
        for s, h in old.items():
            signal.signal(s, h)
