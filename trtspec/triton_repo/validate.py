"""`trtspec triton --check REPO`: is this repository servable as generated?

Checks, each reported as one line naming the model, file and field:
1. every `*/config.pbtxt` parses with Triton's protobuf (`model_config_pb2`), its `name` equals its
   directory, names are safe (contracts.MODEL_NAME_RE), version `1/` exists, python models have
   `1/model.py` (llmapi models: TensorRT-LLM's own model.py is copied in at launch, see the README);
2. no `${...}` placeholder anywhere in a config;
3. `tensorrt_llm*` on the C++ backend matches the pinned template exactly (every input and output
   with its data type, dims, reshape, optional and ragged flags; every parameter key), parameter
   values parse the way the C++ backend parses them, and gpt_model_path exists; cpu-flavor
   `tensorrt_llm*` carry a subset of those tensors, unchanged; llmapi models carry the llmapi
   template's tensors (these three: template_checks.py);
4. wiring: for every BLS call recorded in trtspec-repo.json, the callee has each input sent with
   the dtype and dims of the tensor it comes from, every required input of the callee is sent, the
   outputs read exist, and the call's decoupled mode matches the callee's transaction policy;
   streaming models (generate, spec_decode, tensorrt_llm*) are decoupled;
5. limits: every num_draft_tokens of the routing (generate's `routing` parameter) is within the
   target engine's max_draft_len (from its config.json) and spec_decode's max_draft_len, a route
   drafting with a model has a spec_decode with a draft model (not drafter ngram), and KV-cache
   reuse is on for both draft-target engines; every
   EAGLE profile's eagle_choices (brace syntax) fits the engine's max_draft_len, num_eagle_layers
   and max_non_leaves_per_layer, and the routing's models exist;
6. paths: engine / checkpoint directories and tokenizer directories named by the configs exist;
7. GPUs: a `tensorrt_llm*` model's gpu_device_ids (orchestrator mode) names as many GPUs per instance
   as its engine has ranks (tp x pp x cp of its config.json, over num_nodes).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import yaml

from ..errors import TrtspecError
from . import contracts as c
from .configs import parse_text, params, tensor_of
from .models import HELPERS, SOURCES
from .models.serving_rules import CHAIN_MODES, parse_braces
from .routing import tree_problems
from .template_checks import MISSING_DIR, check_llmapi, check_subset, check_tensorrtllm
from ..upstream.triton import Tensor

MANIFEST = "trtspec-repo.json"
PLACEHOLDER = re.compile(r"\$\{[^}]*\}")
STREAMING_KINDS = ("generate", "spec_decode", "tensorrtllm", "cpu_llm")


def check_repository(repo: Path) -> list[str]:
    """All problems found (empty: valid). Raises TrtspecError only when `repo` is not a directory."""
    repo = Path(repo)
    if not repo.is_dir():
        raise TrtspecError(f"{repo}: repository directory not found")
    probs: list[str] = []
    manifest = {}
    mpath = repo / MANIFEST
    if mpath.is_file():
        try:
            manifest = json.loads(mpath.read_text())
        except json.JSONDecodeError as e:
            probs.append(f"{mpath}: not valid JSON ({e.msg} at line {e.lineno})")
    else:
        probs.append(f"{mpath}: missing (not a trtspec repository?)")
    kinds = {name: m.get("kind") for name, m in (manifest.get("models") or {}).items()}
    configs = {}
    for d in sorted(p for p in repo.iterdir() if p.is_dir() and not p.name.startswith(".")):
        cfg_path = d / "config.pbtxt"
        if not cfg_path.is_file():
            probs.append(f"{d}: a directory without config.pbtxt (Triton would try to load it as a model)")
            continue
        text = cfg_path.read_text(encoding="utf-8")
        hit = PLACEHOLDER.search(text)
        if hit:
            line = text[:hit.start()].count("\n") + 1
            probs.append(f"{cfg_path}:{line}: unfilled placeholder {hit.group(0)}")
        try:
            cfg = parse_text(text, str(cfg_path))
        except TrtspecError as e:
            probs.append(str(e))
            continue
        if cfg.name != d.name:
            probs.append(f"{cfg_path}: name '{cfg.name}' differs from its directory '{d.name}'")
        if not c.MODEL_NAME_RE.match(d.name):
            probs.append(f"{d}: model name '{d.name}' is not safe (expected {c.MODEL_NAME_RE.pattern})")
        if not (d / "1").is_dir():
            probs.append(f"{d}: version directory 1/ missing")
        kind = kinds.get(d.name)
        if kind is None:
            probs.append(f"{d}: not listed in {MANIFEST}")
        if cfg.backend == "python" and kind != "llmapi" and not (d / "1" / "model.py").is_file():
            probs.append(f"{d / '1' / 'model.py'}: missing (python backend)")
        if cfg.backend == "python" and kind in SOURCES:
            probs += [f"{d / '1' / f}: missing (imported by {kind}'s model.py)" for f in HELPERS
                      if not (d / "1" / f).is_file()]
        configs[d.name] = cfg
    for name in kinds:
        if name not in configs:
            probs.append(f"{repo / name}: listed in {MANIFEST} but missing")
    for name, cfg in configs.items():
        kind = kinds.get(name)
        where = f"{repo / name / 'config.pbtxt'}"
        if kind in STREAMING_KINDS and not cfg.model_transaction_policy.decoupled:
            probs.append(f"{where}: model_transaction_policy.decoupled must be true (this model streams)")
        if kind == "tensorrtllm":
            probs += check_tensorrtllm(cfg, where)
            probs += _device_ids(cfg, where)
        elif kind == "cpu_llm":
            probs += check_subset(cfg, where)
            probs += _paths(cfg, where, ("checkpoint_dir",))
        elif kind == "llmapi":
            probs += check_llmapi(cfg, where, repo / name)
        elif kind in ("preprocessing", "postprocessing"):
            probs += _paths(cfg, where, ("tokenizer_dir",))
        elif kind == "spec_decode":
            p = params(cfg)
            keys = ("target_checkpoint", "draft_checkpoint") if p.get("engine") == "trtspec.runtime" else ()
            if p.get("drafter") == "ngram":  # no draft model
                keys = keys[:1]
            probs += _paths(cfg, where, keys)
            probs += [f"{where}: parameter draft_heads: {n} = '{d}': {MISSING_DIR}"
                      for n, d in json.loads(p.get("draft_heads") or "{}").items() if not Path(d).is_dir()]
    probs += _check_wiring(manifest, configs)
    probs += _check_limits(repo, configs, kinds)
    return probs


def _paths(cfg, where: str, keys) -> list[str]:
    p = params(cfg)
    return [f"{where}: parameter {k} = '{p.get(k)}': {MISSING_DIR}" for k in keys
            if not p.get(k) or not Path(p[k]).is_dir()]


def _source_tensor(source: str, configs: dict) -> Tensor | str:
    """The tensor a `sends` entry refers to, or an error string."""
    if source.startswith("const:"):
        _, dtype, dims = source.split(":", 2)
        return Tensor("const", dtype, tuple(int(x) for x in dims.split(",")))
    try:
        model, side, name = source.split(".", 2)
    except ValueError:
        return f"bad source '{source}'"
    cfg = configs.get(model)
    if cfg is None:
        return f"source model '{model}' not found"
    for m in (cfg.input if side == "input" else cfg.output):
        if m.name == name:
            return tensor_of(m)
    return f"{model} has no {side} '{name}'"


def _check_wiring(manifest: dict, configs: dict) -> list[str]:
    probs = []
    for call in manifest.get("calls") or []:
        caller, callee = call.get("caller"), call.get("callee")
        where = f"call {caller} -> {callee}"
        cfg = configs.get(callee)
        if cfg is None:
            probs.append(f"{where}: model '{callee}' not found")
            continue
        if bool(call.get("decoupled")) != bool(cfg.model_transaction_policy.decoupled):
            probs.append(f"{where}: called with decoupled={bool(call.get('decoupled'))} but {callee} has "
                         f"decoupled: {str(cfg.model_transaction_policy.decoupled).lower()}")
        inputs = {m.name: tensor_of(m) for m in cfg.input}
        sends = call.get("sends") or {}
        for name, source in sends.items():
            t = inputs.get(name)
            if t is None:
                probs.append(f"{where}: {callee} has no input '{name}'")
                continue
            s = _source_tensor(source, configs)
            if isinstance(s, str):
                probs.append(f"{where}: input '{name}': {s}")
            elif s.data_type != t.data_type or tuple(s.dims) != tuple(t.dims):
                probs.append(f"{where}: input '{name}' is {t.data_type} {list(t.dims)} but receives {source} "
                             f"({s.data_type} {list(s.dims)})")
        for name, t in inputs.items():
            if not t.optional and name not in sends:
                probs.append(f"{where}: required input '{name}' of {callee} is never sent")
        outs = {m.name for m in cfg.output}
        for name in call.get("reads") or []:
            if name not in outs:
                probs.append(f"{where}: {callee} has no output '{name}'")
    return probs


def _engine_limits(cfg) -> dict | None:
    """max_draft_len and EAGLE limits of the engine / checkpoint a tensorrt_llm* model serves."""
    p = params(cfg)
    path = p.get("gpt_model_path") or p.get("checkpoint_dir")
    f = Path(path) / "config.json" if path else None
    if f is None or not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
    except json.JSONDecodeError:
        return None
    pre = data.get("pretrained_config", data)
    build = data.get("build_config") or {}
    mapping = pre.get("mapping") or {}
    ranks = math.prod(int(mapping.get(k) or 1) for k in ("tp_size", "pp_size", "cp_size"))
    return {"path": str(f), "ranks": ranks, "max_draft_len": int(build.get("max_draft_len") or pre.get("max_draft_len") or 0),
            "num_eagle_layers": pre.get("num_eagle_layers"),
            "max_non_leaves": pre.get("max_non_leaves_per_layer"),
            "engine": "build_config" in data}


def _device_ids(cfg, where: str) -> list[str]:
    """Each instance's gpu_device_ids names one GPU per engine rank on this node: the executor requires
    len(gpu_device_ids) x num_nodes == tp x pp x cp (upstream.triton, executorImpl.cpp @b35ac1b6)."""
    p = params(cfg)
    ids, lim = p.get("gpu_device_ids", ""), _engine_limits(cfg)
    if not ids.strip() or lim is None:
        return []  # unset: rank r on GPU r % GPUs (leader or orchestrator); no engine: reported elsewhere
    try:
        nodes = int(p.get("num_nodes") or 1)
    except ValueError:
        return []  # the parameter's own parse check reports it
    return [f"{where}: parameter gpu_device_ids: instance '{one.strip()}' names {n} GPU(s), expected "
            f"{lim['ranks'] // nodes} (tp x pp x cp = {lim['ranks']} of {lim['path']}"
            f"{f' over num_nodes {nodes}' if nodes > 1 else ''})"
            for one in ids.split(";") if (n := len([x for x in one.split(",") if x.strip()])) * nodes != lim["ranks"]]


def _check_limits(repo: Path, configs: dict, kinds: dict) -> list[str]:
    probs = []
    gen = configs.get(c.GENERATE)
    if gen is None:
        return [f"{repo / c.GENERATE}: the front model is missing"]
    where = f"{repo / c.GENERATE / 'config.pbtxt'}"
    try:
        routing = json.loads(params(gen).get("routing", ""))
    except json.JSONDecodeError as e:
        return [f"{where}: parameter routing is not JSON ({e.msg})"]
    mode = routing.get("mode")
    if mode in CHAIN_MODES:
        ks = [(w, b["num_draft_tokens"]) for w, bands in routing["workloads"].items() for b in bands]
        ks += [("(default)", b["num_draft_tokens"]) for b in routing["default"]["bands"]]
        spec = configs.get(c.SPEC_DECODE)
        spec_limit = int(params(spec).get("max_draft_len") or 0) if spec is not None else 0
        target = configs.get(c.TENSORRT_LLM)
        lim = _engine_limits(target) if target is not None and kinds.get(c.TENSORRT_LLM) == "tensorrtllm" else None
        for w, k in ks:
            if k < 0:
                probs.append(f"{where}: routing: workload '{w}' has num_draft_tokens {k} < 0")
            if spec_limit and k > spec_limit:
                probs.append(f"{where}: routing: workload '{w}' num_draft_tokens {k} > spec_decode max_draft_len "
                             f"{spec_limit}")
            if lim is not None and k > lim["max_draft_len"]:
                probs.append(f"{where}: routing: workload '{w}' num_draft_tokens {k} > the target engine's "
                             f"max_draft_len {lim['max_draft_len']} ({lim['path']})")
        if spec is not None and "model" not in params(spec).get("drafter", "model").split(","):
            routes = [*routing["workloads"].items(), ("(default)", routing["default"]["bands"])]
            probs += [f"{where}: routing: workload '{w}' drafts K={b['num_draft_tokens']} with a draft model at "
                      f"concurrency {b['concurrency']}, but spec_decode has none (drafter "
                      f"{params(spec).get('drafter')!r}); expected max_matching_ngram_size in the band"
                      for w, bands in routes for b in bands
                      if b["num_draft_tokens"] and "max_matching_ngram_size" not in b]
        if lim is not None and not lim["engine"]:
            probs.append(f"{lim['path']}: not an engine config (tensorrt_llm needs an engine directory)")
        for name in (c.TENSORRT_LLM, c.TENSORRT_LLM_DRAFT):
            if kinds.get(name) == "tensorrtllm" and configs.get(name) is not None:
                reuse = params(configs[name]).get("enable_kv_cache_reuse", "")
                if reuse not in ("true", "True", "TRUE", "1"):
                    probs.append(f"{repo / name / 'config.pbtxt'}: enable_kv_cache_reuse must be true for draft-target "
                                 f"(every round re-sends the prefix), got {reuse!r}")
    elif mode == "eagle":
        names = {e["model"] for e in [*routing.get("workloads", {}).values(), routing.get("default", {})]}
        for name in sorted(names):
            cfg = configs.get(name)
            if cfg is None:
                probs.append(f"{where}: routing names model '{name}', which is not in the repository")
                continue
            text = params(cfg).get("eagle_choices", "")
            mwhere = f"{repo / name / 'config.pbtxt'}"
            try:
                choices = parse_braces(text)
            except ValueError as e:
                probs.append(f"{mwhere}: eagle_choices: {e}")
                continue
            lim = _engine_limits(cfg)
            if lim is None:
                continue
            for pr in tree_problems(choices, lim["max_draft_len"], lim["num_eagle_layers"], lim["max_non_leaves"]):
                probs.append(f"{mwhere}: eagle_choices: {pr} ({lim['path']})")
    elif mode == "llmapi":
        for e in [*routing.get("workloads", {}).values(), routing.get("default", {})]:
            if e.get("model") not in configs:
                probs.append(f"{where}: routing names model '{e.get('model')}', which is not in the repository")
                continue
            y = repo / e["model"] / "1" / "model.yaml"
            try:
                spec = (yaml.safe_load(y.read_text()) or {}).get("speculative_config") or {}
            except (OSError, yaml.YAMLError, AttributeError):
                continue  # reported by the model's own checks
            k = int(spec.get("max_draft_len") or 0) if isinstance(spec, dict) else 0
            if k != e.get("num_draft_tokens"):
                probs.append(f"{y}: speculative_config.max_draft_len {k} but the routing sends "
                             f"num_draft_tokens {e.get('num_draft_tokens')} to this model")
            n = spec.get("max_matching_ngram_size") if isinstance(spec, dict) else None
            if n != e.get("max_matching_ngram_size"):
                probs.append(f"{y}: speculative_config.max_matching_ngram_size {n} but the routing serves "
                             f"max_matching_ngram_size {e.get('max_matching_ngram_size')} with this model")
    else:
        probs.append(f"{where}: routing mode {mode!r} is not draft-target, ngram, eagle or llmapi")
    return probs
