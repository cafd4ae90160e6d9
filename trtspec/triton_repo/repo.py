"""Write a Triton model repository from tuning.json and the engines / checkpoints it serves.

    make_repository(RepoRequest(tuning=..., flavor="trtllm", engines=..., out=...)) -> RepoResult

Layout (draft-target; EAGLE has tensorrt_llm_<profile> models instead of spec_decode + the pair):

    REPO/
      README.md              how to launch it, what each model does, the tuned table, memory
      trtspec-repo.json      manifest: flavor, mode, routing, calls between models, artifacts, launch
      generate/              config.pbtxt, 1/model.py (+ 1/trtspec_triton_common.py, trtspec_triton_pool.py,
                             serving_rules.py)
      preprocessing/  postprocessing/  spec_decode/
      tensorrt_llm/  tensorrt_llm_draft/     config.pbtxt, 1/  (trtllm: C++ backend; cpu: 1/model.py)

The repository is written into a temporary sibling directory, validated there (validate.py: the
same checks as `trtspec triton --check`), and renamed into place only when it passes, so a failure
leaves nothing behind (DESIGN.md "Atomic outputs").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .. import __version__
from ..builders.memory import RUNTIME_OVERHEAD_BYTES
from ..errors import TrtspecError
from ..fsutil import atomic_dir, check_inputs_kept, sha256_file
from ..tuning.tuning_schema import load_tuning
from . import contracts as c, llmapi, render as r
from .configs import render as render_config
from .container import launch_plan
from .llmapi_parallel import memory_plan, served_mapping, served_tp
from .memory import check_demand, gpu_device_ids, plan_memory
from .models import HELPERS, NGRAM_POOL, SOURCES
from .options import TritonOptions
from .flavors import FLAVORS, in_flight_batching, is_pytorch, mode_refusal
from .runtime_device import place
from .deploy import (Artifact, attention_window, resolve_checkpoints, resolve_engines, resolve_hf,
                     resolve_tokenizer, window_unknown)
from .engine_limits import batch_size, check_draft_lengths, check_trees, request_limits
from .heads import resolve_heads
from .models.serving_rules import CHAIN_MODES, SPEC_DECODE_RULES, route_inputs
from .readme import render_readme
from .sampling import route_sampling, tuned_rule
from .routing import check_tuning, draft_target_routes, drafts_ngrams_only, eagle_routes
from .validate import check_repository
from ..upstream.trtllm import GPU_MEMORY_MIB, TRTLLM_VERSION_LABEL

MANIFEST = "trtspec-repo.json"
MANIFEST_SCHEMA = "trtspec.triton-repo/1"
_D = TritonOptions()


@dataclass
class RepoRequest:
    tuning: Path
    flavor: str
    out: Path
    engines: Path | None = None
    draft_engines: Path | None = None  # the draft: optional when tuning.json's choice drafts n-grams only
    ckpt: Path | None = None
    draft_ckpt: Path | None = None  # (routing.drafts_ngrams_only), as draft_engines
    draft_heads: dict[str, Path] | None = None  # more EAGLE-3 heads by drafter name (tuning.choice.drafters)
    tokenizer: Path | None = None
    max_batch_size: int | None = _D.max_batch_size  # defaults: TritonOptions (the flags and the recipe's)
    instances: int = _D.instances
    gpu: str = _D.gpu
    eagle_band: int | None = _D.eagle_band
    default_workload: str | None = _D.default_workload
    tp: int | None = _D.tp  # llmapi: GPUs per LLM instance (llmapi_parallel.served_tp)
    device: str = _D.device  # pytorch flavor: where its runtime models run (runtime_device.py)
    overwrite: bool = False


@dataclass
class RepoResult:
    path: Path
    flavor: str
    mode: str
    models: list[str]
    warnings: list[str] = field(default_factory=list)


def _source(name: str) -> str:
    return resources.files("trtspec.triton_repo.models").joinpath(name).read_text(encoding="utf-8")


def _runtime_source(name: str) -> str:
    return resources.files("trtspec.runtime").joinpath(name).read_text(encoding="utf-8")


def _python_files(kind: str) -> dict[str, str]:
    return {"model.py": _source(SOURCES[kind]), **{name: _source(name) for name in HELPERS}}


def _check_options(req: RepoRequest) -> None:
    if req.flavor not in FLAVORS:
        raise TrtspecError(f"triton.flavor: {req.flavor!r} is not one of {', '.join(FLAVORS)}")
    if req.max_batch_size is not None and req.max_batch_size < 1:
        raise TrtspecError(f"triton.max_batch_size: expected >= 1, got {req.max_batch_size}")
    if req.instances < 1:
        raise TrtspecError(f"triton.instances: expected >= 1, got {req.instances}")
    if req.tp is not None and req.flavor != "llmapi":
        raise TrtspecError(f"triton.tp: the {req.flavor} flavor serves its engines / checkpoints at their own tp; "
                           "set it for llmapi only")
    if req.flavor == "trtllm":
        if req.engines is None:
            raise TrtspecError("engines: needed for the trtllm flavor (engine directories from trtspec build)")
        if req.ckpt is not None or req.draft_ckpt is not None:
            raise TrtspecError("`ckpt`/`draft_ckpt`: the trtllm flavor serves engines; give `engines`/`draft_engines`")
    else:
        if req.engines is not None or req.draft_engines is not None:
            raise TrtspecError(f"engines: the {req.flavor} flavor serves checkpoints; give `ckpt` (and `draft_ckpt`)")
        if req.ckpt is None:
            raise TrtspecError(f"ckpt: needed for the {req.flavor} flavor")


def make_repository(req: RepoRequest) -> RepoResult:
    _check_options(req)
    check_inputs_kept(req.out, {"tuning": req.tuning, "engines": req.engines, "draft_engines": req.draft_engines,
                                "ckpt": req.ckpt, "draft_ckpt": req.draft_ckpt, "tokenizer": req.tokenizer,
                                **{f"draft_heads.{k}": v for k, v in (req.draft_heads or {}).items()}})
    tuning_path = Path(req.tuning).expanduser().resolve()
    tuning = load_tuning(tuning_path)
    check_tuning(tuning, str(tuning_path))
    mode = tuning.mode
    refusal = mode_refusal(req.flavor, mode)
    if refusal:
        raise TrtspecError(refusal)
    draft_needed = not drafts_ngrams_only(tuning)
    if req.flavor == "trtllm":
        arts = resolve_engines(mode, req.engines, req.draft_engines, draft_needed)
    elif is_pytorch(req.flavor):
        arts = resolve_checkpoints(mode, req.ckpt, req.draft_ckpt, draft_needed)
    else:
        arts = resolve_hf(mode, req.ckpt, req.draft_ckpt, draft_needed)
    if req.flavor == "llmapi" and req.tokenizer is None:
        tokenizer = arts[0].path  # the LLM API loads the tokenizer of the HF directory itself
    else:
        tokenizer = resolve_tokenizer(req.tokenizer, arts,
                                      Path(req.engines).resolve() if req.engines is not None else None)
    builder = _Builder(req, tuning, tuning_path, arts, tokenizer)
    files = builder.build()
    place(files, req.flavor, req.device)

    with atomic_dir(Path(req.out), overwrite=req.overwrite) as tmp:
        for m in files:
            d = tmp / m.name
            (d / "1").mkdir(parents=True)
            (d / "config.pbtxt").write_text(render_config(m.config, m.comment), encoding="utf-8")
            for rel, text in m.files.items():
                (d / "1" / rel).write_text(text, encoding="utf-8")
        (tmp / MANIFEST).write_text(json.dumps(builder.manifest, indent=2) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(builder.readme(), encoding="utf-8")
        problems = check_repository(tmp)
        if problems:
            raise TrtspecError(f"generated repository failed validation: {problems[0]}"
                               + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""))
    return RepoResult(Path(req.out), req.flavor, mode, [m.name for m in files], builder.warnings)


class _Builder:
    def __init__(self, req: RepoRequest, tuning, tuning_path: Path, arts: list[Artifact], tokenizer: Path):
        self.mode, self.flavor = tuning.mode, req.flavor
        # A drafter choice that left the draft model (or head) out (its memory budget, tuning/choose.py)
        # drafts n-grams only: no route drafts with the model, and its artifact (if given) is not loaded.
        self.ngram_only = drafts_ngrams_only(tuning)
        if self.ngram_only:
            arts = arts[:1]
        self.req, self.tuning, self.tuning_path, self.arts, self.tokenizer = req, tuning, tuning_path, arts, tokenizer
        self.heads = resolve_heads(tuning, req.draft_heads)  # more EAGLE-3 heads the choice routes to
        self.warnings: list[str] = [w for w in map(window_unknown, arts) if w]
        self.memory = None
        self.tp, self.llmapi_memory = 1, None  # llmapi: GPUs per LLM instance, their memory (_build_llmapi)
        self.manifest: dict = {}
        self.routing: dict = {}
        self.sampling: dict = {}

    def _check_batching(self) -> None:
        """tuning.json priced its bands for a server that batches concurrent requests or for one that
        steps each alone (tune.in_flight_batching); a flavor that serves them the other way gets a
        warning: its bands above the smallest were tuned for another server."""
        batched, serves = self.tuning.cost.in_flight_batching, in_flight_batching(self.flavor)
        if batched != serves and len(self.tuning.concurrency_bands) > 1:
            how = "one batched forward" if batched else "each request alone"
            self.warnings.append(f"tuning.json priced its concurrency bands as {how} (tune.in_flight_batching "
                                 f"{str(batched).lower()}), but the {self.flavor} flavor "
                                 f"{'batches concurrent requests' if serves else 'steps each request alone'}: "
                                 f"tune again with in_flight_batching {str(serves).lower()}")

    # ---- models ---------------------------------------------------------------------------------
    def build(self) -> list[r.ModelFiles]:
        req = self.req
        B = batch_size(req.max_batch_size, self.flavor, self.arts, self.warnings)
        self._check_batching()
        tok = str(self.tokenizer)
        if self.flavor == "llmapi":
            return self._build_llmapi(B)
        files = [r.preprocessing_model(B, tok, req.instances), r.postprocessing_model(B, tok, req.instances)]
        for f in files:
            f.files = _python_files(f.kind)
        llm_names: list[str] = []
        if self.mode in CHAIN_MODES and req.eagle_band is not None:  # generate routes every band by load
            raise TrtspecError(f"triton.eagle_band: a {self.mode} repository on the {self.flavor} flavor serves "
                               "every tuned band (each request routed by the load); leave it unset")
        if self.mode in ("draft-target", "eagle3") and not self.ngram_only:  # eagle3: cpu flavor (trtllm refused)
            routing = draft_target_routes(self.tuning, req.default_workload)
            max_k = check_draft_lengths(routing, self.flavor, self.arts, self.tuning_path)
            target, draft = self.arts
            drafter = "model,ngram" if "max_matching_ngram_size" in route_inputs(routing) else "model"  # choose.py
            limit = target.max_draft_len if self.flavor == "trtllm" else max_k
            if self.flavor == "trtllm":
                self.memory = self._memory([(c.TENSORRT_LLM, target), (c.TENSORRT_LLM_DRAFT, draft)], True, B)
                for name, art, what in ((c.TENSORRT_LLM, target, "target"), (c.TENSORRT_LLM_DRAFT, draft, "draft")):
                    params = r.tensorrtllm_parameters(  # each engine names its own GPUs (memory.py)
                        engine_dir=str(art.path), tokenizer_dir=tok, **self._kv(name), kv_reuse=True,
                        decoding_mode="", eagle_choices=None, gpu_device_ids=gpu_device_ids(art, orchestrator=True),
                        attention_window=attention_window(art))
                    files.append(r.tensorrtllm_model(name, B, art.dtype, params,
                                                     f"{what} engine ({art.speculative_mode or 'plain'}, "
                                                     f"max_draft_len {art.max_draft_len})"))
                logits = bool(draft.build.get("gather_generation_logits"))
                self.sampling = route_sampling(self.flavor, self.mode, draft_logits=logits)
                spec = r.spec_decode_model(B, B, limit, "bls", sampling_params={"draft_logits": "true"} if logits
                                           else None, drafter=drafter)
            else:
                llms = ((c.TENSORRT_LLM, target, "target"), (c.TENSORRT_LLM_DRAFT, draft, "draft"))
                for name, art, what in llms[:1] if self.mode == "eagle3" else llms:  # a head is no checkpoint
                    files.append(r.cpu_llm_model(name, B, str(art.path), what, None, B,
                                                 f"{what} checkpoint on trtspec.runtime (tensorrt_llm's tensors; "
                                                 "loaded on first use: spec_decode serves in-process)", True))
                rule = self._cpu_accept_rule()
                self.sampling = route_sampling(self.flavor, "draft-target", cpu_rule=rule)
                extra = {"draft_mode": "eagle3"} if self.mode == "eagle3" else {}
                if extra:
                    self.warnings.append(f"cpu flavor: EAGLE-3 at temperature > 0 runs {rule} (TensorRT-LLM's one-model "
                                         "EAGLE-3 with allow_advanced_sampling); the llmapi flavor's default decodes "
                                         "greedily")
                spec = r.spec_decode_model(B, B, limit, "trtspec.runtime", str(target.path), str(draft.path),
                                           {"accept_rule": rule, **extra}, drafter=drafter,
                                           heads={n: str(a.path) for n, a in self.heads.items()})
            spec.files = _python_files("spec_decode")
            if drafter != "model":
                spec.files[NGRAM_POOL] = _runtime_source(NGRAM_POOL)
            files.append(spec)
        elif self.mode in CHAIN_MODES:  # n-gram drafting, alone or all a drafter choice serves (no draft model)
            routing = draft_target_routes(self.tuning, req.default_workload)
            if self.ngram_only:  # spec_decode drafts n-grams only: what perf --sweep drafts with (sweep.py)
                routing["drafter"] = "ngram"
            max_k = check_draft_lengths(routing, self.flavor, self.arts, self.tuning_path)
            files += self._ngram_models(B, tok, max_k)
        else:
            art = self.arts[0]
            routing = eagle_routes(self.tuning, req.eagle_band, req.default_workload, art.num_eagle_layers)
            check_trees(routing, art, self.tuning_path)
            llm_names = [m["model"] for m in routing["models"]]
            self.sampling = route_sampling(self.flavor, self.mode)
            if self.flavor == "trtllm":
                self.memory = self._memory([(n, art) for n in llm_names], False, B)
                gpus = gpu_device_ids(art, orchestrator=len(llm_names) > 1)
                for m in routing["models"]:
                    params = r.tensorrtllm_parameters(
                        engine_dir=str(art.path), tokenizer_dir=tok, **self._kv(m["model"]), kv_reuse=False,
                        decoding_mode="eagle", eagle_choices=m["eagle_choices"], gpu_device_ids=gpus,
                        attention_window=attention_window(art))
                    files.append(r.tensorrtllm_model(m["model"], B, art.dtype, params, self._profile_comment(m)))
            else:
                for m in routing["models"]:
                    files.append(r.cpu_llm_model(m["model"], B, str(art.path), "eagle", m["eagle_choices"], B,
                                                 self._profile_comment(m) + " on trtspec.runtime", False))
        for f in files:
            if f.kind == "cpu_llm":
                f.files = _python_files("cpu_llm")
        routing.update(limits=request_limits(self.flavor, self.arts),
                       in_flight_batching=in_flight_batching(self.flavor))
        self._check_reachable(routing, B)
        self.routing = routing
        gen = r.generate_model(B, B, json.dumps(routing, sort_keys=True, separators=(",", ":")),
                               llm_cancel_messages=is_pytorch(self.flavor))
        gen.files = _python_files("generate")
        files.insert(0, gen)
        chain = "ngram" if self.ngram_only else self.mode  # what spec_decode drafts
        self.manifest = self._manifest(files, c.calls(chain, llm_names, self.flavor == "trtllm",
                                                      bool(self.sampling.get("draft_logits")), route_inputs(routing)))
        return files

    def _ngram_models(self, B: int, tok: str, max_k: int) -> list[r.ModelFiles]:
        """n-gram: the target (engine with draft_tokens_external, or checkpoint) and spec_decode
        drafting from a per-request pool (runtime/ngram_pool.py, shipped next to it). Also a
        draft-target tuning whose choice serves no model drafter: its draft is not loaded (__init__)."""
        (target,) = self.arts
        if self.flavor == "trtllm":
            self.memory = self._memory([(c.TENSORRT_LLM, target)], False, B)
            params = r.tensorrtllm_parameters(
                engine_dir=str(target.path), tokenizer_dir=tok, **self._kv(c.TENSORRT_LLM), kv_reuse=True,
                decoding_mode="", eagle_choices=None, gpu_device_ids=gpu_device_ids(target, orchestrator=False),
                attention_window=attention_window(target))
            llm = r.tensorrtllm_model(c.TENSORRT_LLM, B, target.dtype, params,
                                      f"target engine ({target.speculative_mode}, max_draft_len "
                                      f"{target.max_draft_len}); n-gram drafts come from spec_decode")
            self.sampling = route_sampling(self.flavor, self.mode)
            spec = r.spec_decode_model(B, B, target.max_draft_len, "bls", drafter="ngram")
        else:
            llm = r.cpu_llm_model(c.TENSORRT_LLM, B, str(target.path), "target", None, B,
                                  "target checkpoint on trtspec.runtime (tensorrt_llm's tensors; loaded on first "
                                  "use: spec_decode serves in-process)", True)
            rule = self._cpu_accept_rule()
            self.sampling = route_sampling(self.flavor, self.mode, cpu_rule=rule)
            spec = r.spec_decode_model(B, B, max_k, "trtspec.runtime", str(target.path), None,
                                       {"accept_rule": rule}, drafter="ngram")
        spec.files = {**_python_files("spec_decode"), NGRAM_POOL: _runtime_source(NGRAM_POOL)}
        return [llm, spec]

    def _cpu_accept_rule(self) -> str:
        """The cpu spec_decode's rule at T > 0: the one tuning.json says it assumed, when spec_decode
        can run it; else exact_match (the PyTorch backend's two-model rule)."""
        rule = tuned_rule(self.tuning)
        if rule is None or rule in SPEC_DECODE_RULES:
            return rule or SPEC_DECODE_RULES[0]
        self.warnings.append(f"tuning.json assumed accept rule {rule!r}, which a draft-target spec_decode does not "
                             f"run; it serves {SPEC_DECODE_RULES[0]} at temperature > 0")
        return SPEC_DECODE_RULES[0]
    def _profile_comment(self, m: dict) -> str:
        tree = f"{m['num_draft_tokens']}-node tree" if m["speculate"] else \
            "no speculation tuned: the smallest legal tree (a chain of num_eagle_layers nodes)"
        return f"EAGLE profile {m['profile']} ({tree}) for workloads {', '.join(m['workloads'])}"

    def _memory(self, placements, shared: bool, B: int):
        plan = plan_memory(placements, self.req.gpu, shared)
        check_demand(plan, B, self.tuning)
        self.warnings += plan.warnings
        return plan

    def _kv(self, name: str) -> dict:
        """The KV parameters of one TensorRT-LLM model: its planned tokens and free-memory fraction (memory.py)."""
        m = next(m for m in self.memory.models if m.model == name)
        return {"kv_tokens": m.kv_tokens if m.kv_tokens > 0 else None, "kv_fraction": m.kv_fraction}

    def _check_reachable(self, routing: dict, B: int) -> None:
        """A chain repository's bands above B are never picked: generate runs at most B requests at
        once (the rest queue in Triton), so it never sees the load that would choose them."""
        unreachable = [c for c in routing.get("bands", []) if c > B] if self.mode in CHAIN_MODES else []
        if unreachable:
            self.warnings.append(f"tuned concurrency bands {unreachable} exceed the repository's max_batch_size {B}: "
                                 f"generate runs at most {B} requests at once, so they are never served "
                                 "(triton.max_batch_size)")

    def _build_llmapi(self, B: int) -> list[r.ModelFiles]:
        routing, specs = llmapi.specs(self.tuning, self.arts, self.req.default_workload, self.heads, self.req.eagle_band)
        self.tp = served_tp(self.req.tp, self.req.ckpt, [*self.arts, *self.heads.values()])
        weights, gpu_bytes = llmapi.weight_bytes(specs, self.arts[0], self.tp), GPU_MEMORY_MIB[self.req.gpu] * 2**20
        share, warning = llmapi.kv_share(len(specs), weights, gpu_bytes)
        self.llmapi_memory = memory_plan(self.req.gpu, gpu_bytes, self.tp, len(specs), weights, RUNTIME_OVERHEAD_BYTES,
                                         share)
        self.warnings += [w for w in (warning, llmapi.choice_warning(self.tuning, self.req.eagle_band),
                                      llmapi.tp_warning(self.tuning, self.tp)) if w]
        files = llmapi.models(self.arts[0], specs, share, self.tp)
        self.sampling = route_sampling(self.flavor, self.mode)
        if self.sampling["sampling_fallback"]:  # generate flags sampled requests to these (sampling_fallback)
            routing["greedy_models"] = llmapi.greedy_models(specs)
        routing.update(limits=request_limits(self.flavor, self.arts),
                       in_flight_batching=in_flight_batching(self.flavor))
        self.routing = routing
        gen = r.generate_model(B, B, json.dumps(routing, sort_keys=True, separators=(",", ":")),
                               tokenizer_dir=str(self.tokenizer))
        gen.files = _python_files("generate")
        files.insert(0, gen)
        self.manifest = self._manifest(files, llmapi.calls(files[1:]))
        return files

    # ---- manifest and README --------------------------------------------------------------------
    def _manifest(self, files, calls) -> dict:
        return {
            "schema": MANIFEST_SCHEMA, "flavor": self.flavor, "mode": self.mode, "trtspec_version": __version__,
            "trtllm_version": TRTLLM_VERSION_LABEL,
            "tuning": {"path": str(self.tuning_path), "sha256": sha256_file(self.tuning_path),
                       "concurrency_bands": sorted(self.tuning.concurrency_bands)},
            "tokenizer": str(self.tokenizer),
            "artifacts": [{"role": a.role, "kind": a.kind, "path": str(a.path), "max_draft_len": a.max_draft_len,
                           "num_eagle_layers": a.num_eagle_layers, "max_non_leaves_per_layer": a.max_non_leaves,
                           **served_mapping(a, self.tp if self.flavor == "llmapi" else None)} for a in self.arts],
            "models": {f.name: {"kind": f.kind, "description": f.comment} for f in files},
            "routing": self.routing,
            "sampling": self.sampling,
            "calls": [x.to_dict() for x in calls],
            "launch": launch_plan(self.flavor, files, self.arts, [*self.arts, *self.heads.values()], self.tokenizer,
                                  self.tp),
            "memory": self.memory.to_dict() if self.memory else self.llmapi_memory,  # llmapi: memory_plan's
            "warnings": self.warnings,
        }

    def readme(self) -> str:
        return render_readme(self.manifest, self.tuning, Path(self.req.out).expanduser().resolve())

