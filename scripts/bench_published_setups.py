"""The analytic step-time model (trtspec/tuning/cost.py, presets h100/h200 and the serving frameworks
of trtspec/tuning/gpus.py) against published speculative-decoding results (landscape.md §4.1 and the
upstream threads named below): what was fitted on what, and the error on every row not fitted.

    .venv/bin/python scripts/bench_published_setups.py

Plain arithmetic; runs in a second. For each row it prints the reported number (a speedup, or
tokens/s where the source gives tokens/s and AL but no baseline), the model's prediction, their
ratio (predicted / reported), whether the row was fitted or held out, and what the prediction rests
on; then how many held-out rows land within ±20% and whether A1, A2 and A6 do.

What was fitted on what (and nothing else was fitted):
- SGLang's eagle_step_overhead_s (the host time per EAGLE step, gpus.FITTED_SGLANG_STEP_OVERHEAD_S),
  by least squares on the relative error of the step time (= AL x batch / tokens/s), to sglang PR
  4247's two num_steps-8 rows (Llama-3.1-8B-Instruct on MT-Bench: EAGLE-3 AL 5.39 at 378.57 tok/s,
  EAGLE-2 AL 3.76 at 230.08). Held out: the same PR's num_steps-5 EAGLE-3 row (AL 4.68, 361.70).
- Not refitted: the plain-decode scale (bandwidth_efficiency 0.80, forward_overhead_s 0.3 ms), as
  it was before this change, chosen then with A1's baseline in view (so A1's baseline is no
  independent check; the project's test pins it within 10% of A1). The script prints, as a
  sensitivity check, the least-squares refit to the baselines of A7, A8, A15 and SafeAILab/EAGLE PR
  173 (SGLang, Llama-2-7b-chat, 1x H100, 156 tok/s), none of A1/A2/A6: it puts A1's baseline 10%
  low (outside that test) and is printed with the A1/A2/A6 ratios it would give.
The other new numbers are derived, not fitted (gpus.py: kernel counts x an assumed 2.5 us kernel
latency, the logits passes, the TP collectives, SGLang's replicated fc, EAGLE-3's fc on the first
level only). TRT-LLM has no fitted number: its one-model EAGLE-3 drafts inside the target's CUDA
graph (no extra host time while the overlap scheduler hides it).

The rows (source; what they state; what is assumed):
- A1 (docs.sglang.io speculative_decoding): Llama-3.1-8B-Instruct, SGLang, 1x H100, MT-Bench,
  158.34 -> 373.25 tok/s EAGLE-3 (2.36x), 244.10 EAGLE-2 (1.54x). Not stated: tree, AL, dtype (bf16,
  the checkpoint's), batch (1: 158 tok/s is one stream). Assumed tree: the early-2025 server_args
  defaults (num_steps 5, topk 8, 64 draft tokens; the numbers came with the EAGLE-3 integration,
  sglang PR 4247). AL basis: sglang PR 4247's own measurement on the same model, framework and data
  with num_steps 5, AL 4.68 (EAGLE-3); for EAGLE-2 that PR measured only num_steps 8 (AL 3.76, an
  upper bound at 5 steps). These share model, framework and data with A1, so A1 is the weakest of
  the three checks; the A5-based chain prediction (vLLM, K=3, AL 2.60) is printed beside it.
  Its baseline is the pre-existing anchor of the decode scale (above).
- A2 (sglang PR 4716): Llama-3.3-70B-Instruct fp16, H100 TP8, EAGLE-3 num_steps 8, topk 8, 64 draft
  tokens, batch 1: 88.61 -> 234.54 tok/s (2.65x), AL 5.88 (input). The drafter's hidden size
  differs from the target's (the PR) and is not stated: the target's is used.
- A6 (TensorRT-LLM PR 5146): Llama 3.3 70B BF16 + public EAGLE-3, one-model (PyTorch backend),
  H200 TP8, concurrency 4: AL 1.83 of at most 4 (input), 1.26x tokens/s per user. The PR's recipe:
  max_draft_len 3 (a chain: 3 drafter levels, a 4-token verify), overlap scheduler off, CUDA graphs
  for batch 1-4, `trtllm-bench throughput --max_batch_size 4 --max_num_tokens 3072`, dataset
  aa_gen_16k_1k; the stored PR text is cut off after `--dataset`. Two things the number depends on
  are not stated, and the script takes the likelier value of each (upstream.trtllm,
  EAGLE3_ONE_MODEL_RECIPE_PR5146):
  * the prompt length: 1024 tokens assumed. The dataset's name suggests 16k, but without chunked
    context (not in the quoted YAML; trtllm-bench's flag defaults to off) the LLM API refuses
    prompts over max_num_tokens (in later versions at least: upstream.trtllm.
    PYTORCH_PROMPT_CAPPED_WITHOUT_CHUNKING), and the same dataset family in an NVIDIA engineer's
    Llama 4 Maverick EAGLE-3 trtllm-bench scripts sizes max_num_tokens as 1024 input + 2048 output
    = 3072, the PR's number;
  * what "tps/user" divides: trtllm-bench's per-user output throughput counts the context phase
    (upstream.trtllm.TRTLLM_BENCH_PER_USER_INCLUDES_CONTEXT); with --streaming, which those scripts
    pass, it also prints a decode-only 1 / TPOT. The script counts the context (with_context: at
    concurrency 4 each request's latency holds four prefills) and prints the decode-only ratio
    beside it. With 1k prompts the two differ little.
  Under these A6 MISSES (1.33; decode alone 1.35). It passes (1.16) only if the prompts were 16k
  tokens, which needs a --enable_chunked_context in the cut-off command; that variant is printed
  too. An earlier version of this script took the 16k reading and reported the pass; the sister
  scripts were found later. Nothing numeric was fitted to A6: the prefill is the cost model's own
  forward, chunked at the recipe's max_num_tokens. The report implies a speculative step about 35%
  longer than the model's: the recipe's overlap scheduler is off in the speculative run (on by
  default in the baseline), and that exposed host time has no published number to derive it from.
- PR 4247 rows (sglang PR 4247, Llama-3.1-8B-Instruct, MT-Bench, CUDA graphs; GPU not stated, H100
  assumed as in A1; tree topk 8 / 64 tokens, the then-defaults): see the fit above.
- PR 11398 (sglang PR 11398, a later SGLang, Oct 2025): Llama-3.1-8B fp16 + EAGLE-2 chain of 5 (topk
  1, 6 draft tokens), main path AL 2.99 at 246.80 tok/s; GPU not stated (H100 assumed). Held out;
  a newer SGLang (draft-extend CUDA graph since PR 6606) is expected to run faster than fitted.
- A7/A8 draft-target rows: as before (alpha 0.8 assumed, the AL/alpha the model needs printed).
- A15 (SafeAILab/EAGLE issue 211): Qwen3-8B + EAGLE-3, SGLang, 1x H200, 186 -> 365 tok/s: no tree
  or AL stated: the AL the model needs is printed (its baseline is in the sensitivity refit).
Model shapes: the models' Hugging Face config.json files (ARCH). Context: 512 tokens per sequence
unless stated (MT-Bench-like prompts plus half an answer). vLLM's published EAGLE rows (vllm PR
16937, issue 20780) are not used: the model has no vLLM framework entry, and they are left for
held-out checks elsewhere.

Outcome at this change (tests/tuning/test_eagle_cost.py pins it): 5 of 6 held-out rows within
±20%. A1 EAGLE-3 0.90 and EAGLE-2 0.99 pass (weak checks, see above); A2 1.196 passes by a hair and
is fragile: under the decode-scale refit of the sensitivity check it misses (1.34), and its baseline
is 34% faster in the model than reported, so TP8 per-layer costs are under-modelled; A6 misses
(1.33 with 1k prompts, see above; 1.16 only under the 16k reading).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import numpy as np

from trtspec.perf.stats import end_to_end_prediction
from trtspec.tuning.calibrate import prefills_per_request
from trtspec.tuning.cost import CostModel, ModelShape, forward_terms, gpu_preset, prefill_time, with_framework
from trtspec.upstream.trtllm import (EAGLE3_ONE_MODEL_RECIPE_PR5146, SGLANG_EAGLE_DEFAULTS_2025,
                                     TRTLLM_BENCH_PER_USER_INCLUDES_CONTEXT)

CONTEXT = 512
LLAMA_VOCAB = 128256
ARCH = {  # layers, hidden, heads, kv heads, head size, MLP size, vocab
    "Llama-2-7B": (32, 4096, 32, 32, 128, 11008, 32000),
    "Llama-3.1-8B": (32, 4096, 32, 8, 128, 14336, LLAMA_VOCAB),
    "Llama-3.2-1B": (16, 2048, 32, 8, 64, 8192, LLAMA_VOCAB),
    "Llama-3.2-3B": (28, 3072, 24, 8, 128, 8192, LLAMA_VOCAB),
    "Llama-3.3-70B": (80, 8192, 64, 8, 128, 28672, LLAMA_VOCAB),
    "Llama-3.1-405B": (126, 16384, 128, 8, 128, 53248, LLAMA_VOCAB),
    "Qwen3-8B": (36, 4096, 32, 8, 128, 12288, 151936),
}
PRECISION = {  # bytes per linear weight, per lm_head weight, per KV element; GEMM dtype
    "bf16": dict(weight_bytes=2.0, lm_head_bytes=2.0, kv_bytes=2.0, compute_dtype="bf16"),
    "fp16": dict(weight_bytes=2.0, lm_head_bytes=2.0, kv_bytes=2.0, compute_dtype="fp16"),
    "fp8": dict(weight_bytes=1.0, lm_head_bytes=2.0, kv_bytes=1.0, compute_dtype="fp8", quant_algo="FP8",
                kv_cache_quant_algo="FP8"),
}


def shape(name: str, role: str, precision: str, tp: int = 1) -> ModelShape:
    L, H, nh, nkv, hd, inter, vocab = ARCH[name]
    return ModelShape(name=f"{name} {precision}", role=role, num_layers=L, hidden_size=H, num_heads=nh,
                      num_kv_heads=nkv, head_size=hd, intermediate_size=inter, vocab_size=vocab, tp=tp,
                      **PRECISION[precision])


def eagle_head(base: str, precision: str, version: int, tp: int = 1) -> ModelShape:
    """EAGLE-1/2: one Llama layer at the base's sizes, fc 2H -> H, the full-vocab lm_head. EAGLE-3: its
    attention reads 2H ([embedding, feature]), fc 3H -> H, lm_head over the 32000-token draft vocab."""
    s = shape(base, "eagle", precision, tp)
    H = s.hidden_size
    if version == 3:
        wider_qkv = H * (s.num_heads + 2 * s.num_kv_heads) * s.head_size
        return s.model_copy(update=dict(name=f"EAGLE-3 head of {base}", num_layers=1, vocab_size=32000,
                                        extra_linear_params=3 * H * H + wider_qkv, fc_params=3 * H * H,
                                        fc_first_level_only=True))
    return s.model_copy(update=dict(name=f"EAGLE-1/2 head of {base}", num_layers=1,
                                    extra_linear_params=2 * H * H, fc_params=2 * H * H))


def sglang_tree(num_steps: int, topk: int, num_draft_tokens: int) -> tuple[list[int], int]:
    """(drafter level sizes, tree nodes) of an SGLang EAGLE step: the draft-extend forward on the
    accepted tokens (1 per sequence counted), num_steps - 1 forwards of topk tokens, then a verify of
    num_draft_tokens tokens (the root included)."""
    return [1] + [topk] * (num_steps - 1), num_draft_tokens - 1


def chain(k: int) -> tuple[list[int], int]:
    return [1] * k, k


@dataclass(frozen=True)
class Baseline:
    name: str
    gpu: str
    target: ModelShape
    tok_s: float


@dataclass(frozen=True)
class Setup:
    """One EAGLE result. reported: the speedup, or tokens/s when `base_tok_s` is None and `absolute`."""
    row: str
    what: str
    gpu: str
    framework: str
    target: ModelShape
    head: ModelShape
    tree: tuple
    al: float
    basis: str
    reported: float
    batch: int = 1
    context: int = CONTEXT
    absolute: bool = False  # reported is tokens/s (no baseline in the source)
    prompt_tokens: int = 0  # > 0: the reported tokens/s counts each request's context phase (see with_context)
    output_tokens: int = 0
    prefill_chunk: int | None = None  # the engine's max_num_tokens (chunked context)


L8 = shape("Llama-3.1-8B", "target", "bf16")
BASELINE_REFIT = [
    Baseline("A7", "h200", shape("Llama-3.1-405B", "target", "fp8", tp=4), 33.46),
    Baseline("A8", "h200", shape("Llama-3.3-70B", "target", "fp8"), 51.14),
    Baseline("A15", "h200", shape("Qwen3-8B", "target", "bf16"), 186.0),
    Baseline("EAGLE PR 173", "h100", shape("Llama-2-7B", "target", "fp16"), 156.0),
]
BASELINE_CHECK = [
    Baseline("A1", "h100", L8, 158.34),
    Baseline("A2", "h100", shape("Llama-3.3-70B", "target", "fp16", tp=8), 88.61),
]
PR4247 = "sglang PR 4247"
E3_8B, E2_8B = eagle_head("Llama-3.1-8B", "bf16", 3), eagle_head("Llama-3.1-8B", "bf16", 2)
TREE_8_STEPS = sglang_tree(8, *SGLANG_EAGLE_DEFAULTS_2025[1:])  # num_steps 8, the then-default topk / tokens
TREE_DEFAULT = sglang_tree(*SGLANG_EAGLE_DEFAULTS_2025)
SGLANG_FIT = [
    Setup("PR4247", "Llama-3.1-8B + EAGLE-3, SGLang 8/8/64", "h100", "sglang", L8, E3_8B, TREE_8_STEPS, 5.39,
          f"{PR4247} AL 5.39", 378.57, absolute=True),
    Setup("PR4247", "Llama-3.1-8B + EAGLE-2, SGLang 8/8/64", "h100", "sglang", L8, E2_8B, TREE_8_STEPS, 3.76,
          f"{PR4247} AL 3.76", 230.08, absolute=True),
]
A2_TARGET = shape("Llama-3.3-70B", "target", "fp16", tp=8)
A6_TARGET = shape("Llama-3.3-70B", "target", "bf16", tp=8)
A6_RECIPE = EAGLE3_ONE_MODEL_RECIPE_PR5146
LONG_PROMPT_TOKENS = 16384  # A6's other reading: the dataset's name (aa_gen_16k_1k)


def mean_decode_context(prompt_tokens: int, output_tokens: int) -> int:
    """The context a decode step sees on average over a request: its prompt and half its answer."""
    return prompt_tokens + output_tokens // 2


CHECKS = [
    Setup("A1", "Llama-3.1-8B + EAGLE-3, SGLang 5/8/64", "h100", "sglang", L8, E3_8B, TREE_DEFAULT, 4.68,
          f"AL 4.68 of {PR4247} num_steps 5", 373.25 / 158.34),
    Setup("A1", "Llama-3.1-8B + EAGLE-2, SGLang 5/8/64", "h100", "sglang", L8, E2_8B, TREE_DEFAULT, 3.76,
          f"AL 3.76 of {PR4247} num_steps 8 (upper bound)", 244.10 / 158.34),
    Setup("A2", "Llama-3.3-70B fp16 TP8 + EAGLE-3, SGLang 8/8/64", "h100", "sglang", A2_TARGET,
          eagle_head("Llama-3.3-70B", "fp16", 3, tp=8), TREE_8_STEPS, 5.88, "reported AL 5.88",
          234.54 / 88.61),
    Setup("A6", "Llama-3.3-70B bf16 TP8 + EAGLE-3 chain 3, TRT-LLM 1-model", "h200", "trtllm", A6_TARGET,
          eagle_head("Llama-3.3-70B", "bf16", 3, tp=8), chain(A6_RECIPE["max_draft_len"]),
          1.83, "reported AL 1.83, 1k prompts, context counted", 1.26, batch=A6_RECIPE["max_batch_size"],
          context=mean_decode_context(A6_RECIPE["input_tokens"], A6_RECIPE["output_tokens"]),
          prompt_tokens=A6_RECIPE["input_tokens"], output_tokens=A6_RECIPE["output_tokens"],
          prefill_chunk=A6_RECIPE["max_num_tokens"]),
    Setup("PR4247", "Llama-3.1-8B + EAGLE-3, SGLang 5/8/64", "h100", "sglang", L8, E3_8B, TREE_DEFAULT, 4.68,
          f"{PR4247} AL 4.68", 361.70, absolute=True),
    Setup("PR11398", "Llama-3.1-8B fp16 + EAGLE-2 chain 5, SGLang (Oct 2025)", "h100", "sglang",
          shape("Llama-3.1-8B", "target", "fp16"), eagle_head("Llama-3.1-8B", "fp16", 2), chain(5), 2.99,
          "sglang PR 11398 AL 2.99", 246.80, absolute=True),
]
A1_A5_CHAIN = Setup("A1", "Llama-3.1-8B + EAGLE-3 as A5's chain K=3", "h100", "sglang", L8, E3_8B, chain(3), 2.60,
                    "A5 (vLLM) chain K=3 AL 2.60", 373.25 / 158.34)


def decode_time(gpu, target: ModelShape, batch: int = 1, context: float = CONTEXT) -> float:
    return CostModel(gpu=gpu, target=target).baseline_step(batch, context).total_s


def fit_decode_scale(rows: list[Baseline] = BASELINE_REFIT) -> tuple[float, float]:
    """(bandwidth_efficiency, forward_overhead_s) minimising the relative error of the baselines'
    step times. At batch 1 every row is memory-bound, so time = overhead + bytes/bandwidth x u + comm
    is linear in (overhead, u = 1 / efficiency): weighted least squares."""
    X, y = [], []
    for r in rows:
        g = gpu_preset(r.gpu)
        nbytes, _ = forward_terms(r.target, 1, 1, CONTEXT)
        comm = 2 * r.target.num_layers * g.allreduce_latency_s if r.target.tp > 1 else 0.0
        t = 1.0 / r.tok_s
        X.append([1.0 / t, nbytes / (g.hbm_bandwidth_gbs * 1e9) / t])
        y.append((t - comm) / t)
    overhead, u = np.linalg.lstsq(np.array(X), np.array(y), rcond=None)[0]
    return float(1.0 / u), float(overhead)


def row_gpu(name: str, framework: str, update: dict | None = None):
    return with_framework(gpu_preset(name), framework).model_copy(update=update or {})


def step_time(s: Setup, gpu) -> float:
    levels, nodes = s.tree
    return CostModel(gpu=gpu, target=s.target, draft=s.head).eagle_step(s.batch, levels, nodes, s.context).total_s


def fit_sglang_overhead(rows: list[Setup] = SGLANG_FIT, update: dict | None = None) -> float:
    """SGLang's eagle_step_overhead_s: the constant c minimising sum(((model + c) - y) / y)^2 over the
    rows' step times y = AL x batch / tokens/s."""
    y = np.array([s.al * s.batch / s.reported for s in rows])
    zero = {**(update or {}), "eagle_step_overhead_s": 0.0}
    model = np.array([step_time(s, row_gpu(s.gpu, s.framework, zero)) for s in rows])
    return float(np.sum((y - model) / y ** 2) / np.sum(1 / y ** 2))


def predict(s: Setup, update: dict | None = None) -> float:
    """The model's speedup (or tokens/s for an absolute row) at the row's AL; `update`: GPU fields
    replaced (the sensitivity check)."""
    gpu = row_gpu(s.gpu, s.framework, update)
    step = step_time(s, gpu)
    if s.absolute:
        return s.al * s.batch / step
    base = decode_time(gpu, s.target, s.batch, s.context)
    if s.prompt_tokens and TRTLLM_BENCH_PER_USER_INCLUDES_CONTEXT:
        return with_context(s, gpu, base, step)[0]
    return s.al * base / step


def with_context(s: Setup, gpu, base: float, step: float, prefills: int | None = None) -> tuple[float, float]:
    """(speedup, context-phase seconds per request) of a row whose per-user tokens/s divides the
    output by the end-to-end latency (upstream.trtllm.TRTLLM_BENCH_PER_USER_INCLUDES_CONTEXT, under
    the reading of A6 stated in the module docstring). In steady state at concurrency c every
    request holds one slot while c requests' context phases run (its own and those of the c - 1 that
    replace its neighbours, by Little's law: tuning.calibrate.prefills_per_request, which calibration
    prices too; or, queued, those ahead of it):

        baseline latency = c x prefill + (output - 1) x base step   (the first token is the prefill's)

    and speculation divides the decode part by AL x base / step: perf.stats.end_to_end_prediction,
    the same conversion perf applies to the tuner's per-step speedup. Slightly generous to the
    context: a chunk's iteration also advances the other sequences' decode by a step (at most
    chunks x step; with 16k-token prompts 7% of A6's prefill, 1.167 instead of 1.161). `prefills`:
    c (default the row's batch); 1 is the concurrency-1 reading printed beside it."""
    prefill = prefill_time(gpu, s.target, s.prompt_tokens, s.prefill_chunk)
    context = (prefills_per_request(s.batch) if prefills is None else prefills) * prefill
    total = context + (s.output_tokens - 1) * base
    return end_to_end_prediction(s.al * base / step, context, total), prefill


def needed_al(s: Setup) -> float:
    gpu = row_gpu(s.gpu, s.framework)
    return s.reported * step_time(s, gpu) / decode_time(gpu, s.target, s.batch, s.context)


def draft_target_lines() -> list[str]:
    """A7/A8 (draft-target, no AL stated): the speedup at alpha 0.8 and the alpha the model needs."""
    out = []
    t405, t70 = shape("Llama-3.1-405B", "target", "fp8", tp=4), shape("Llama-3.3-70B", "target", "fp8")
    rows = [("A7", t405, shape(d, "draft", "fp8", tp=4), tps, d) for d, tps in
            (("Llama-3.2-1B", 111.34), ("Llama-3.2-3B", 120.75), ("Llama-3.1-8B", 101.86))]
    rows += [("A8", t70, shape(d, "draft", "fp8"), 181.74, d) for d in ("Llama-3.2-1B", "Llama-3.2-3B")]
    for row, target, draft, tps, dname in rows:
        base_tps = 33.46 if row == "A7" else 51.14
        cm = CostModel(gpu=gpu_preset("h200"), target=target, draft=draft)
        base = cm.baseline_step(1, CONTEXT).total_s

        def best(a):
            return max((1 - a ** (k + 1)) / (1 - a) * base / cm.draft_target_step(1, k, CONTEXT).total_s
                       for k in range(1, 11))
        lo, hi = 0.0, 0.9999
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if best(mid) < tps / base_tps else (lo, mid)
        out.append(f"{row} + {dname} draft: reported {tps / base_tps:.2f}x; at alpha 0.8 (assumed) the model "
                   f"gives {best(0.8):.2f}x (ratio {best(0.8) / (tps / base_tps):.2f}); it needs alpha {hi:.3f}")
    return out


def sensitivity() -> list[str]:
    """The decode scale refitted to BASELINE_REFIT (SGLang's step overhead refitted under it): what it
    would do to A1's baseline and to the A1/A2/A6 ratios."""
    bw, overhead = fit_decode_scale()
    scale = {"bandwidth_efficiency": bw, "forward_overhead_s": overhead}
    sgl = fit_sglang_overhead(update=scale)
    a1 = 1 / decode_time(gpu_preset("h100").model_copy(update=scale), L8) / BASELINE_CHECK[0].tok_s
    ratios = []
    for s in CHECKS:
        if s.row in ("A1", "A2", "A6"):
            upd = {**scale, "eagle_step_overhead_s": sgl} if s.framework == "sglang" else scale
            ratios.append(f"{s.row} {predict(s, upd) / s.reported:.2f}")
    return [f"decode scale refitted to the baselines of {', '.join(b.name for b in BASELINE_REFIT)}: "
            f"bandwidth_efficiency {bw:.3f}, forward_overhead_s {overhead * 1e3:.2f} ms (not adopted);",
            f"  it puts A1's baseline at {a1:.2f} of the reported; SGLang's step overhead refits to "
            f"{sgl * 1e3:.2f} ms; predicted / reported: " + ", ".join(ratios)]


def print_eagle_rows() -> list[tuple[Setup, float]]:
    """The EAGLE table; returns the held-out rows with their ratios."""
    print(f"{'row':<8} {'setup':<57} {'GPU':<4} {'reported':>9} {'predicted':>9} {'ratio':>6}  role; basis")
    held = []
    for s in SGLANG_FIT + CHECKS:
        pred = predict(s)
        unit = "t" if s.absolute else "x"
        role = "fitted" if s in SGLANG_FIT else "held out"
        if s not in SGLANG_FIT:
            held.append((s, pred / s.reported))
        print(f"{s.row:<8} {s.what:<57} {s.gpu.upper():<4} {s.reported:>8.2f}{unit} {pred:>8.2f}{unit} "
              f"{pred / s.reported:>6.2f}  {role}; {s.basis}")
    for s, r in held:
        if s.prompt_tokens:
            print(context_line(s))
        if abs(r - 1) > 0.20 and not s.absolute and not s.prompt_tokens:
            gpu = row_gpu(s.gpu, s.framework)
            implied = s.al * decode_time(gpu, s.target, s.batch, s.context) / s.reported
            print(f"  {s.row} misses: the model's step is {step_time(s, gpu) * 1e3:.2f} ms, the report implies "
                  f"{implied * 1e3:.2f} ms (AL x the model's baseline step / the reported speedup)")
    a5 = predict(A1_A5_CHAIN)
    print(f"  A1 EAGLE-3 on A5's basis instead (a K=3 chain at AL 2.60): {a5:.2f}x, "
          f"ratio {a5 / A1_A5_CHAIN.reported:.2f}")
    a15 = Setup("A15", "", "h200", "sglang", shape("Qwen3-8B", "target", "bf16"), eagle_head("Qwen3-8B", "bf16", 3),
                TREE_DEFAULT, 0.0, "", 365.0 / 186.0)
    print(f"  A15 (no AL stated): with SGLang's 5/8/64 tree the model needs AL {needed_al(a15):.2f} for the "
          f"reported {a15.reported:.2f}x")
    return held


def context_line(s: Setup) -> str:
    """How much the context phase does to a row that counts it, and what the other readings give:
    only its own prefill, decode alone, and (A6) the 16k-token prompts of the dataset's name."""
    gpu = row_gpu(s.gpu, s.framework)
    base, step = decode_time(gpu, s.target, s.batch, s.context), step_time(s, gpu)
    speedup, prefill = with_context(s, gpu, base, step)
    own_speedup = with_context(s, gpu, base, step, prefills=1)[0]
    long = replace(s, prompt_tokens=LONG_PROMPT_TOKENS,
                   context=mean_decode_context(LONG_PROMPT_TOKENS, s.output_tokens))
    long_base, long_step = decode_time(gpu, long.target, long.batch, long.context), step_time(long, gpu)
    long_speedup = with_context(long, gpu, long_base, long_step)[0]
    return (f"  {s.row}: prefill {prefill:.3f} s ({s.prompt_tokens} tokens in chunks of {s.prefill_chunk}), x{s.batch} "
            f"per request; decode {(s.output_tokens - 1) * base:.2f} s plain, "
            f"{(s.output_tokens - 1) / s.al * step:.2f} s speculative (step {base * 1e3:.2f} / {step * 1e3:.2f} ms)"
            f" -> {speedup:.2f}x; counting only its own prefill {own_speedup:.2f}x "
            f"(ratio {own_speedup / s.reported:.2f}); decode alone {s.al * base / step:.2f}x "
            f"(ratio {s.al * base / step / s.reported:.2f}); with {LONG_PROMPT_TOKENS}-token prompts (needs chunked "
            f"context) {long_speedup:.2f}x (ratio {long_speedup / s.reported:.2f})")


def main() -> int:
    sgl = fit_sglang_overhead()
    g = gpu_preset("h100")
    print("Analytic cost model (trtspec.tuning.cost) vs published speculative-decoding results")
    print(f"fitted: SGLang eagle_step_overhead_s {sgl * 1e3:.3f} ms <- {PR4247} num_steps-8 EAGLE-3 and EAGLE-2 "
          f"step times (gpus.py holds {with_framework(g, 'sglang').eagle_step_overhead_s * 1e3:.3f} ms)")
    print(f"kept: bandwidth_efficiency {g.bandwidth_efficiency}, forward_overhead_s "
          f"{g.forward_overhead_s * 1e3:.2f} ms "
          f"(the pre-existing decode scale, anchored on A1's baseline); derived: kernel latency "
          f"{g.kernel_latency_s * 1e6:.1f} us, EAGLE level overhead trtllm {g.eagle_level_overhead_s * 1e6:.1f} us / "
          f"sglang {with_framework(g, 'sglang').eagle_level_overhead_s * 1e6:.1f} us, "
          f"{g.tree_verify_kernels} verify kernels, all-reduce {g.allreduce_latency_s * 1e6:.0f} us")
    print("\nbaselines (plain decode, batch 1): model / reported tokens/s")
    for b in BASELINE_CHECK + BASELINE_REFIT:
        model = 1 / decode_time(gpu_preset(b.gpu), b.target)
        note = "the decode scale's anchor" if b.name == "A1" else "check"
        print(f"  {b.name:<13} {b.gpu.upper()} {b.target.name:<22} model {model:7.1f}  reported {b.tok_s:7.2f}  "
              f"ratio {model / b.tok_s:.2f}  ({note})")
    print("\nEAGLE rows: predicted / reported (x: speedup; t: tokens/s, where the source gives no baseline)")
    held = print_eagle_rows()
    print("\ndraft-target rows (AL not stated; unchanged assumptions):")
    for line in draft_target_lines():
        print("  " + line)
    print("\nsensitivity:")
    for line in sensitivity():
        print("  " + line)
    within = [s for s, r in held if abs(r - 1) <= 0.20]
    print(f"\nheld-out EAGLE rows within ±20%: {len(within)} of {len(held)}")
    verdict = [f"{s.row} {s.what.split(',')[0].split(' + ')[-1]} {'pass' if abs(r - 1) <= 0.20 else 'MISS'} ({r:.3f})"
               for s, r in held if s.row in ("A1", "A2", "A6")]
    print("A1/A2/A6: " + "; ".join(verdict))
    print("  (A6 with 1k-token prompts, its context phase counted; the other readings: the A6 line above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
