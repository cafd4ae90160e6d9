"""Triton model repositories: generation (trtllm | llmapi | pytorch flavors; cpu = pytorch), validation, serving.

    trtspec triton --tuning tuning.json --engines build/ --flavor trtllm --out repo/
    trtspec triton --check repo/
    trtspec serve repo/

Modules, top-down: `command` (the two Typer commands), `repo` (writes a repository),
`deploy` (what it serves: engines, checkpoints, tokenizer), `engine_limits` (batch, draft lengths,
trees and request limits the served artifacts allow), `routing` (tuning.json -> per-workload
routes), `render` (every model's config), `contracts` (models, tensors and the calls between them),
`configs` (config.pbtxt as protobuf), `memory` (GPU memory of the TensorRT-LLM models), `validate`
(with `template_checks`: each TensorRT-LLM-facing model against its pinned template),
`readme`, `serve` (bundled tritonserver; container commands), `ports` (the ports it binds), and
`models/` (the python-backend sources copied into repositories; the cpu flavor's models stream trtspec.runtime's decoding loop,
`runtime.generate.stream_request`).
"""
