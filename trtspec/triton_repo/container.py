"""`trtspec serve REPO` for the trtllm / llmapi flavors: the container launch command for the H100
host (printed, or run with --exec), as upstream's launch_triton_server.py builds it (upstream.triton
MPIRUN), with the MPI world size the repository needs (trtspec-repo.json "launch"): one TensorRT-LLM
model = leader mode, one tritonserver per rank of the engine (world size = TP x PP, ranks > 0 load
only the TensorRT-LLM model); several (draft + target, or EAGLE profiles) = orchestrator mode
(TRTLLM_ORCHESTRATOR=1, one tritonserver, the backend spawns the executor workers, the container sees
only the engine's GPUs); llmapi = one tritonserver under `mpirun -n 1`, each LLM spawning its own
workers (upstream.triton LLMAPI_WORLD_SIZE) on GPUs 0..tp-1, the ones the container sees. The cpu
flavor's server is serve.py.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
from pathlib import Path

from ..errors import TrtspecError
from ..upstream.triton import (CONTAINER_TRITONSERVER, LLMAPI_MODEL_DIR, LLMAPI_MODEL_FILES, LLMAPI_WORLD_SIZE, MPIRUN,
                               ORCHESTRATOR_CUDA_POOL_FLAG, ORCHESTRATOR_ENV, ORCHESTRATOR_SERVER_FLAGS,
                               PYTHON_SHM_PREFIX, TRITON_CONTAINER)
from .serve import DEFAULT_PORTS, HOST, signal_group


def launch_plan(flavor: str, files, arts, mounted, tokenizer, tp: int = 1) -> dict:
    """The manifest's "launch": the LLM models, the MPI world size and the GPUs the container needs
    (engine_world_size: the largest engine's TP x PP; llmapi: triton.tp, which every LLM shares)."""
    llm = [f.name for f in files if f.kind in ("tensorrtllm", "llmapi")]
    world = max(a.world_size for a in arts)
    orchestrator = flavor == "trtllm" and len(llm) > 1
    return {"container": TRITON_CONTAINER, "trtllm_models": llm,
            "world_size": 1 if orchestrator else (world if flavor == "trtllm" else 1),
            "engine_world_size": tp if flavor == "llmapi" else world, "orchestrator": orchestrator,
            "mounts": sorted({str(a.path) for a in mounted} | {str(tokenizer)})}


def container_command(repo: Path, manifest: dict, ports: dict[str, int | None], image: str | None = None) -> list[str]:
    repo = Path(repo).resolve()
    launch = manifest["launch"]
    p = {k: ports.get(k) or v for k, v in DEFAULT_PORTS.items()}
    server = [CONTAINER_TRITONSERVER, f"--model-repository={repo}",
              f"--http-address={HOST}", f"--http-port={p['http']}", f"--grpc-address={HOST}", f"--grpc-port={p['grpc']}",
              f"--metrics-address={HOST}", f"--metrics-port={p['metrics']}", "--disable-auto-complete-config"]
    gpus = range(int(launch.get("engine_world_size", 1)))
    llmapi = manifest.get("flavor") == "llmapi"  # its LLMs' workers sit on GPUs 0..tp-1 (upstream.triton)
    docker = ["docker", "run", "--rm", "--gpus", _gpus(gpus) if launch.get("orchestrator") or llmapi else "all",
              "--net", "host", "--ipc", "host",
              "--ulimit", "memlock=-1", "--ulimit", "stack=67108864", "-v", f"{repo}:{repo}"]
    for m in launch.get("mounts", []):
        docker += ["-v", f"{m}:{m}:ro"]
    if launch.get("orchestrator"):  # as upstream's launcher does it (upstream.triton ORCHESTRATOR_*)
        for k, v in ORCHESTRATOR_ENV.items():
            docker += ["-e", f"{k}={v}"]
        server += [*ORCHESTRATOR_SERVER_FLAGS, *(ORCHESTRATOR_CUDA_POOL_FLAG.format(gpu=g) for g in gpus)]
    docker.append(image or launch["container"])
    world = LLMAPI_WORLD_SIZE if llmapi else int(launch.get("world_size", 1))
    cmd = list(MPIRUN)
    for rank in range(world):
        if rank:
            cmd.append(":")
        cmd += ["-n", "1", *server, f"--backend-config=python,shm-region-prefix-name={PYTHON_SHM_PREFIX.format(rank=rank)}"]
        if rank:
            cmd.append("--model-control-mode=explicit")
            cmd += [f"--load-model={m}" for m in launch["trtllm_models"]]
    return docker + cmd


def _gpus(gpus) -> str:
    """docker's --gpus value for these GPUs: the quotes are part of it (docker splits the value on
    commas, so an unquoted device=0,1 would expose GPU 0 only)."""
    return '"device=' + ",".join(str(g) for g in gpus) + '"'


def check_llmapi_model_py(repo: Path, manifest: dict) -> None:
    """Before --exec: every LLM-API model has TensorRT-LLM's model code in its 1/ (model.py and the
    helpers.py it imports; a missing one fails only at load, inside the container)."""
    for m in manifest["launch"]["trtllm_models"]:
        for name in LLMAPI_MODEL_FILES:
            path = Path(repo) / m / "1" / name
            if not path.is_file():
                raise TrtspecError(f"{path}: missing; copy {', '.join(LLMAPI_MODEL_FILES)} of {LLMAPI_MODEL_DIR} "
                                   "from the TensorRT-LLM 1.2 sources into each tensorrt_llm_k*/1/ (see the "
                                   "repository README)")


def run_container(cmd: list[str]) -> int:
    if shutil.which(cmd[0]) is None:
        raise TrtspecError(f"'{cmd[0]}' is not on PATH: the container command runs on the GPU host (or copy it "
                           "there)")
    proc = subprocess.Popen(cmd, start_new_session=True)

    def forward(signum, _frame):
        signal_group(proc.pid, signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def shell_join(cmd: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in cmd)
