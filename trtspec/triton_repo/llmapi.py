"""The llmapi flavor's models: TensorRT-LLM's LLM API (PyTorch backend) behind Triton, one model per
served speculative setting.

`max_draft_len` and the drafter are per-model LLM() arguments (`speculative_config` in model.yaml),
so each distinct setting the tuning chose is its own model, a whole LLM instance: for a draft model
or an EAGLE-3 head `tensorrt_llm_k<K>`, for n-gram drafting `tensorrt_llm_k<K>_n<n>`
(ngram_serving.py), `tensorrt_llm_k0` without speculation. One band is served, triton.eagle_band or
the smallest (as for EAGLE engines; each model is an instance, so serving every band would multiply them); `generate`
routes each workload to its model. With the drafter choice (tuning/choose.py) a workload's route
says which drafter it got: a route with `max_matching_ngram_size` drafts n-grams.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..builders.memory import RUNTIME_OVERHEAD_BYTES
from ..checkpoints.safetensors_io import open_weights
from ..errors import TrtspecError
from ..upstream.sampling import LLMAPI_SAMPLING_INPUTS
from ..upstream.triton import (LLMAPI_DECODING_DRAFT_TARGET, LLMAPI_DECODING_EAGLE3, LLMAPI_FREE_GPU_MEMORY_FRACTION,
                               LLMAPI_KV_CACHE_CONFIG, LLMAPI_PP_KEY, LLMAPI_SPEC_MODEL_KEY, LLMAPI_TP_KEY)
from ..upstream.trtllm import KV_CACHE_FREE_GPU_MEMORY_FRACTION, LLMAPI_ATTENTION_WINDOW_KEY, TRTLLM_VERSION_LABEL
from . import contracts as c
from . import ngram_serving
from . import render as r
from .deploy import Artifact, attention_window, eagle3_capture
from .llmapi_parallel import gpu_share
from .routing import draft_target_routes, served_band

Spec = tuple[str, dict | None, str]  # (model name, speculative_config or None, what it serves)


def routing(routes: dict, band: int | None = None) -> dict:
    """generate's llmapi routing from the flavor-free chain routes (routing.py): per workload the
    model of its setting at the served band (routing.served_band; None: the smallest). (EAGLE-1
    tree tunings are refused for this flavor: make_repository, upstream.trtllm.PYTORCH_SPEC_MODES.)"""
    band = routes["default"]["bands"][0]["concurrency"] if band is None else band  # bands sorted: the smallest

    def entry(bands):
        b = next(b for b in bands if b["concurrency"] == band)  # llmapi serves one K per model
        k = b["num_draft_tokens"]
        n = b.get("max_matching_ngram_size")  # n-gram: and its matching size
        h = b.get("draft_head")  # another EAGLE-3 head: a model of its own per K (heads.py)
        name = ngram_serving.model_name(k, n) + (f"_{c.sanitize(h)}" if h else "")
        return {"model": name, "num_draft_tokens": k, **({"max_matching_ngram_size": n} if n is not None else {}),
                **({"draft_head": h} if h else {})}
    table = {w: entry(bands) for w, bands in routes["workloads"].items()}
    default = {"source": routes["default"]["source"], **entry(routes["default"]["bands"])}
    served = list(table.values())
    if served and default["model"] not in {e["model"] for e in served}:
        # every setting is an instance (the drafter choice's memory counts the workloads' only):
        # unknown workloads share the setting most workloads are served with, not one of their own
        common = max(served, key=lambda e: (sum(x["model"] == e["model"] for x in served), e["model"]))
        default = {"source": f"the most routed served setting ({routes['default']['source']} was "
                             f"{default['model']}, not served)", **common}
    _check_names([*table.values(), default])
    # band: the one served (generate names it in each request's route label, which perf reads)
    return {"mode": "llmapi", "band": band, "workloads": table, "default": default, "models": []}


def choice_warning(tuning, band: int | None = None) -> str | None:
    """A drafter choice made for shared instances counted every band and one target, so its `served`
    and memory are not this flavor's (the smallest band, one instance per setting: choose.py's
    separate instances); nor are they at another band (triton.eagle_band). Said, not refused: the
    routes still draft only with what it served."""
    if tuning.choice is None:
        return None
    if band not in (None, min(tuning.concurrency_bands)):
        return (f"triton.eagle_band {band}: the drafter choice scored and counted memory at the smallest band "
                f"({min(tuning.concurrency_bands)}); band {band}'s settings may need more instances than it counted")
    if tuning.choice.separate_instances:
        return None
    return ("tuning.json's drafter choice counted shared instances (tune.separate_instances false): its served "
            "drafters and memory cover every band and one target, but the llmapi flavor serves the smallest band "
            "with one model per setting; tune again with separate_instances true")


def tp_warning(tuning, tp: int) -> str | None:
    """tuning.json priced its steps at its checkpoint's tp (cost.target.tp); served at another, each
    step costs otherwise (the weights read per GPU, the all-reduces). Said, not refused."""
    priced = tuning.cost.target.tp
    if priced == tp:
        return None
    return (f"triton.tp {tp}: tuning.json priced its steps at tp {priced} (its checkpoint's); tune a checkpoint "
            f"converted at tp {tp} (a recipe's top-level tp) for this deployment")


def _check_names(entries: list[dict]) -> None:
    """One model per setting: two settings whose names sanitize alike (heads of workloads `qa-1` and
    `qa_1`) would be one model, drafting one workload with the other's head."""
    settings: dict[str, tuple] = {}
    for e in entries:
        key = (e["num_draft_tokens"], e.get("max_matching_ngram_size"), e.get("draft_head"))
        if settings.setdefault(e["model"], key) != key:
            raise TrtspecError(f"tuning: settings {settings[e['model']]} and {key} (K, n-gram size, head) get the same "
                               f"model name {e['model']!r}; rename a workload")


def specs(tuning, arts: list[Artifact], default_workload: str | None,
          heads: dict[str, Artifact] | None = None, band: int | None = None) -> tuple[dict, list[Spec]]:
    """(routing, one Spec per served model) of a chain tuning at `band` (triton.eagle_band; default
    the smallest). heads: the other EAGLE-3 heads routes name (triton_repo/heads.py)."""
    target, draft = arts[0], (arts[1] if len(arts) > 1 else None)
    eagle3 = tuning.mode == "eagle3"  # deploy.resolve_hf made the draft an EAGLE-3 head then, and only then
    table = routing(draft_target_routes(tuning, default_workload), served_band(tuning, band))
    served = {e["model"]: e for e in [*table["workloads"].values(), table["default"]]}
    out = []
    for name, e in sorted(served.items()):
        k, n = e["num_draft_tokens"], e.get("max_matching_ngram_size")
        if not k:
            out.append((name, None, "max_draft_len 0 (no speculation)"))
        elif n is not None:  # n-gram drafting (alone, or the drafter choice gave it this workload)
            out.append((name, ngram_serving.speculative_config(k, n),
                        f"n-gram max_draft_len {k}, max_matching_ngram_size {n}"))
        else:
            head = (heads or {})[e["draft_head"]] if "draft_head" in e else draft
            out.append((name, {"decoding_type": LLMAPI_DECODING_EAGLE3 if eagle3 else LLMAPI_DECODING_DRAFT_TARGET,
                               "max_draft_len": k, LLMAPI_SPEC_MODEL_KEY: str(head.path),
                               **(eagle3_capture(target, head) if eagle3 else {})},
                        f"max_draft_len {k}" + (f", EAGLE-3 head {e['draft_head']}" if head is not draft else "")))
    return table, out


def greedy_models(served: list[Spec]) -> list[str]:
    """The models that decode greedily whatever the temperature: one-model EAGLE-3
    (upstream.sampling, allow_advanced_sampling off). A model without speculative_config
    (tensorrt_llm_k0) or drafting n-grams samples, so its requests are not flagged."""
    return sorted(name for name, spec, _ in served if spec and spec["decoding_type"] == LLMAPI_DECODING_EAGLE3)


def _disk_bytes(path) -> int:
    """Bytes of an HF directory's weight files: its safetensors (the index's shards where it has one),
    else its pytorch_model*.bin (sizes only, never unpickled)."""
    if not path:
        return 0
    try:
        files = open_weights(Path(path)).files()
    except TrtspecError:
        files = sorted(Path(path).glob("pytorch_model*.bin"))
    return sum(f.stat().st_size for f in files)


def weight_bytes(served: list[Spec], target: Artifact, tp: int = 1) -> int:
    """The largest instance's weights on each GPU of its tp group (the target, plus its draft model or
    EAGLE-3 head; their bytes on disk times llmapi_parallel.gpu_share): what each LLM loads onto each
    of its GPUs before it sizes its KV cache. An EAGLE-3 head splits as its target does."""
    share = gpu_share(target.path, tp)

    def drafter(spec: dict | None) -> float:
        path = (spec or {}).get(LLMAPI_SPEC_MODEL_KEY)
        if not path:
            return 0.0
        split = share if spec.get("decoding_type") == LLMAPI_DECODING_EAGLE3 else gpu_share(Path(path), tp)
        return _disk_bytes(path) * split
    return int(_disk_bytes(target.path) * share + max((drafter(spec) for _, spec, _ in served), default=0.0))


def kv_share(models: int, weights: int, gpu_bytes: int) -> tuple[float | None, str | None]:
    """(each model's free_gpu_memory_fraction, a warning) when `models` LLM instances of `weights`
    bytes per GPU (weight_bytes: at tp > 1 each GPU of the group holds its share) share a GPU of
    `gpu_bytes` (upstream.triton LLMAPI_FREE_GPU_MEMORY_FRACTION). An instance
    is its weights plus a runtime's overhead (W: builders.memory's estimate: its own process, CUDA
    context, activations). Each sizes its cache from a share f of the memory free at that moment, so:
    - loaded together (instances first), the caches take N f of what they leave: f <= 0.9 / N;
    - loaded one after another, the first N - 1 caches take at most (N - 1) f (M - W) while the last
      instance still needs M - N W: f <= (M - N W) / ((N - 1)(M - W)), times the 0.9.
    The smaller bound holds in either order, as far as these estimates do. None for one model (the
    default is then right). N instances that do not fit get 0.9 / N (one: None) and a warning."""
    even = round(KV_CACHE_FREE_GPU_MEMORY_FRACTION / models, 4) if models > 1 else None
    instance = weights + RUNTIME_OVERHEAD_BYTES
    free_after_all = gpu_bytes - models * instance
    if weights > 0 and free_after_all <= 0:
        return even, (f"memory: {models} LLM instance{'s' if models > 1 else ''} of about {instance / 2**30:.1f} GiB "
                      f"each per GPU (weights and runtime) do not fit in {gpu_bytes / 2**30:.0f} GiB; raise "
                      "triton.tp, serve fewer settings (tune.memory_budget_gib counts each instance) or quantize")
    if models < 2:
        return None, None
    if weights <= 0:
        return even, "memory: no weight files found to size the llmapi instances; each takes 0.9 / N of the free memory"
    sequential = free_after_all / ((models - 1) * (gpu_bytes - instance))
    return round(KV_CACHE_FREE_GPU_MEMORY_FRACTION * min(1.0 / models, sequential), 4), None


def models(target: Artifact, served: list[Spec], share: float | None = None, tp: int = 1) -> list[r.ModelFiles]:
    """One LLM-API model per Spec: model.yaml with the target, the backend, its tensor parallelism
    (llmapi_parallel.served_tp; the drafter runs at the target's), its speculative_config
    and, when several share the GPU, each one's share of the KV cache memory (kv_share); a target
    with a sliding window attends over it (deploy.attention_window: KvCacheConfig's default is the
    whole max_seq_len, upstream.trtllm LLMAPI_ATTENTION_WINDOW_KEY)."""
    files = []
    window = attention_window(target)
    for name, spec, label in served:
        cfg = {"model": str(target.path), "backend": "pytorch", LLMAPI_TP_KEY: tp, LLMAPI_PP_KEY: 1}
        if spec is not None:
            cfg["speculative_config"] = spec
        kv = {LLMAPI_FREE_GPU_MEMORY_FRACTION: share} if share is not None else {}
        if window:
            kv[LLMAPI_ATTENTION_WINDOW_KEY] = [window]
        if kv:
            cfg[LLMAPI_KV_CACHE_CONFIG] = kv
        cfg["triton_config"] = {"max_batch_size": 0, "decoupled": True}
        text = (f"# TensorRT-LLM {TRTLLM_VERSION_LABEL} LLM API arguments (generated by trtspec). Profile: "
                f"{label}.\n" + yaml.safe_dump(cfg, sort_keys=False))
        f = r.llmapi_model(name, text)
        f.config.model_transaction_policy.decoupled = True
        files.append(f)
    return files


def calls(files: list[r.ModelFiles]) -> list[c.Call]:
    """generate -> each LLM-API model: text in, streamed text out, the request's sampling settings."""
    sampling = {v: k for k, v in LLMAPI_SAMPLING_INPUTS.items()}
    sampling.update(sampling_param_presence_penalty="presence_penalty",
                    sampling_param_frequency_penalty="frequency_penalty")
    return [c.Call(c.GENERATE, f.name, True,
                   {"text_input": "const:TYPE_STRING:-1",
                    "sampling_param_max_tokens": f"{c.GENERATE}.input.max_tokens",
                    "sampling_param_exclude_input_from_output": "const:TYPE_BOOL:1",
                    "streaming": "const:TYPE_BOOL:1",
                    **{k: f"{c.GENERATE}.input.{v}" for k, v in sampling.items()}}, ["text_output"])
            for f in files]
