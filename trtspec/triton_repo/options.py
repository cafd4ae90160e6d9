"""The options of `trtspec triton` and `trtspec serve`: TritonOptions (how the repository is
written) and ServeOptions (how the cpu flavor's tritonserver is started). Together they are the
recipe's `triton:` section; they give the CLI flags' defaults and help, and RepoRequest's defaults.
Values are checked by repo._check_options, which says why. Light: pydantic only.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from ..options import StageOptions


class TritonOptions(StageOptions):
    """How the repository is written (trtspec.triton_repo.repo.make_repository)."""
    section = "triton"
    flavor: Optional[str] = Field(None, description="trtllm (C++ backend, engines) | llmapi (PyTorch backend, HF "
                                                    "weights) | pytorch (trtspec.runtime on checkpoints, CPU or GPU; "
                                                    "formerly cpu, still accepted).")
    max_batch_size: Optional[int] = Field(None, description="Triton max_batch_size and worker threads (default: the "
                                                            "engine's, 8 on cpu).")
    instances: int = Field(1, description="Instances of preprocessing / postprocessing.")
    gpu: str = Field("h100", description="trtllm and llmapi: h100 | h200, for the KV-cache split and memory table.")
    eagle_band: Optional[int] = Field(None, description="The one concurrency band served by EAGLE tree repositories "
                                                        "and by the llmapi flavor (default: the smallest); the "
                                                        "others route every band by load and refuse it.")
    tp: Optional[int] = Field(None, ge=1, description="llmapi: GPUs per LLM instance (model.yaml "
                                                      "tensor_parallel_size; every served setting's instance shares "
                                                      "GPUs 0..tp-1). Default: the tp of the TensorRT-LLM checkpoint "
                                                      "given as ckpt (a recipe's top-level tp), else 1. Other "
                                                      "flavors: leave unset (engines and checkpoints carry theirs).")
    default_workload: Optional[str] = Field(None, description="Route unknown/missing workloads like this one "
                                                              "(default: computed).")
    device: str = Field("cpu", description="pytorch flavor: where its models run the runtime: cpu, cuda or cuda:N "
                                           "(KIND_GPU instances on that GPU).")


class Ports(StageOptions):
    """null (the default): the serve command's defaults (8000/8001/8002); in a recipe a free port."""
    section = "triton.ports"
    http: Optional[int] = Field(None, ge=1, le=65535, description="HTTP port.")
    grpc: Optional[int] = Field(None, ge=1, le=65535, description="gRPC port.")
    metrics: Optional[int] = Field(None, ge=1, le=65535, description="Metrics port.")

    @model_validator(mode="after")
    def _distinct(self):
        """Refused with the recipe, not when the serve stage starts the server after hours of work."""
        problem = shared_port(self.model_dump())
        if problem:
            raise ValueError(problem)
        return self


def shared_port(ports: dict[str, int | None]) -> str | None:
    """Why these ports cannot all be bound (two of them the same number), or None; unset ones are skipped."""
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if port is not None and port in seen:
            return f"http, grpc and metrics must differ ({seen[port]} and {name} are both {port})"
        seen.setdefault(port, name)
    return None


class ServeOptions(StageOptions):
    """How the cpu flavor's bundled tritonserver is started (trtspec.triton_repo.serve)."""
    section = "triton"
    ports: Ports = Field(default_factory=Ports, description="Ports of the server.")
    start_timeout_s: float = Field(300.0, gt=0, description="cpu: seconds to wait for every model to be ready.")
    drain_timeout_s: int = Field(30, ge=1, description="cpu: on SIGTERM / Ctrl-C, seconds the streams in flight "
                                                       "get to finish (new requests are refused) before the "
                                                       "models are unloaded.")
    model_control: bool = Field(False, description="cpu: enable Triton's model-control API (explicit mode), which "
                                                   "lets any local client load or unload models, e.g. reload "
                                                   "spec_decode with another config in a tuning loop without a "
                                                   "restart. Off: every model is loaded at start and none can be "
                                                   "changed.")
