"""Builders: H100 engine build plans for TensorRT-LLM 1.2, the `trtllm-build` runner, engine manifests.

    plan = make_plan(ckpt_dir, BuildOptions(...))   # rules applied, nothing written
    plan.argv()                                     # the exact trtllm-build command line
    build(plan, out, dry_run=False, timeout=...)    # build_plan.json, build.sh, engines/ + manifest

Modules: `options` (what the user asks for), `source` (classify and open a checkpoint directory),
`rules` (refusals and warnings), `engine` (one trtllm-build invocation), `memory` (fit estimate),
`plan`, `script` (build.sh), `run` (the runner), `manifest` (engine config.json), `command` (Typer).
Every TensorRT-LLM default, limit and name comes from `trtspec.upstream.trtllm`, with its source.
"""

from ..lazy import lazy_exports

_EXPORTS = {"BuildOptions": "options", "BuildPlan": "plan", "EngineBuild": "engine", "make_plan": "plan",
            "build": "run", "BuildResult": "run"}
__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
