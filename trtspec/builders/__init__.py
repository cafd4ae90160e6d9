"""Builders: H100 engine build plans for TensorRT-LLM 1.2, the `trtllm-build` runner, engine manifests.

    plan = make_plan(ckpt_dir, BuildOptions(...))   # rules applied, nothing written
    plan.argv()                                     # the exact trtllm-build command line
    build(plan, out, dry_run=False, timeout=...)    # build_plan.json, build.sh, engines/ + manifest

Modules: `trtllm_facts` (every upstream default, limit and name, with its source), `source`
(classify a checkpoint directory), `rules` (refusals and warnings), `plan`, `memory` (fit estimate),
`script` (build.sh), `run` (the runner), `manifest` (engine config.json), `command` (Typer).
"""

from .plan import BuildOptions, BuildPlan, EngineBuild, make_plan
from .run import BuildResult, build

__all__ = ["BuildOptions", "BuildPlan", "EngineBuild", "make_plan", "build", "BuildResult"]
