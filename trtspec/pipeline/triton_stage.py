"""The triton stage of `trtspec run`: the model repository over the tuning and the checkpoint (the
pytorch flavors) or the engines under OUT/build (trtllm).

Engines under OUT/build are served whoever made them: the build stage, or `build.sh` run by hand on
the H100 host (the usual flow when this machine has no GPU), possibly with the build section since
removed from the recipe. So the stage names the engines it served and when they were written, and
the runner hashes them as they are (runner.Runner.input_hash), so rebuilt engines re-run it.
"""

from __future__ import annotations

import time

from ..builders.manifest import MANIFEST_FILE
from ..recipe import Recipe
from ..triton_repo.options import TritonOptions
from ..triton_repo.repo import RepoRequest, make_repository
from .stages import Ctx, eagle3_head, extra_heads


def engines_built(ctx: Ctx) -> bool:
    return (ctx.paths.build / MANIFEST_FILE).is_file()


def engines_note(ctx: Ctx) -> str:
    """Which engines a trtllm repository serves, from when, and whether this recipe built them."""
    manifest = ctx.paths.build / MANIFEST_FILE
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(manifest.stat().st_mtime))
    by = "" if ctx.recipe.build is not None else " (no build section: built by hand or by an earlier run)"
    return f"engines {ctx.paths.build} of {when}{by}"


def triton_not_applicable(ctx: Ctx, predicted_build: bool | None = None) -> str | None:
    r = ctx.recipe
    if r.triton is None:
        return "no triton section"
    if r.triton.flavor != "trtllm":
        return None
    built = engines_built(ctx) if predicted_build is None else predicted_build
    if built:
        return None
    p = ctx.paths
    names = ("eagle",) if r.mode == "eagle" else ("target", "draft")
    engines = f"--engines {p.build / 'engines' / names[0]}" + (
        f" --draft-engines {p.build / 'engines' / names[1]}" if len(names) > 1 else "")
    return (f"needs engines; on the H100 host: bash {p.build / 'build.sh'} && trtspec triton --tuning {p.tuning} "
            f"{engines} --flavor trtllm --out {p.repo}")


def triton_gpu(r: Recipe) -> str:
    """triton.gpu when the recipe sets it, else the build section's GPU (the engines'), else the default."""
    if "gpu" in r.triton.model_fields_set or r.build is None:
        return r.triton.gpu
    return r.build.gpu


def triton_options(r: Recipe) -> dict:
    """The repository's options: TritonOptions, not the serve settings beside them in the recipe's
    triton section (ports, timeouts, model_control only start the server): the triton stage's hash."""
    return r.triton.model_dump(include=set(TritonOptions.model_fields)) | {"gpu": triton_gpu(r)}


def run_triton(ctx: Ctx) -> str:
    r, p = ctx.recipe, ctx.paths
    trtllm = r.triton.flavor == "trtllm"
    options = triton_options(r)
    res = make_repository(RepoRequest(tuning=p.tuning, out=p.repo, engines=p.build if trtllm else None,
                                      ckpt=None if trtllm else p.ckpt, draft_ckpt=eagle3_head(ctx),
                                      draft_heads=extra_heads(ctx) or None, overwrite=True,
                                      **options))
    for w in res.warnings:
        ctx.log(f"warning: {w}")
    note = f"{res.flavor} flavor, {res.mode}: {', '.join(res.models)}"
    return f"{note}; {engines_note(ctx)}" if trtllm else note
