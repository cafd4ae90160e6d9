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

The rows, their sources and what is assumed: scripts/published_setups.py.

Outcome at this change (tests/tuning/test_eagle_cost.py pins it): 5 of 6 held-out rows within
±20%. A1 EAGLE-3 0.90 and EAGLE-2 0.99 pass (weak checks: published_setups.py); A2 1.196 passes by a hair and
is fragile: under the decode-scale refit of the sensitivity check it misses (1.34), and its baseline
is 34% faster in the model than reported, so TP8 per-layer costs are under-modelled; A6 misses
(1.33 with 1k prompts, as published_setups.py reads it; 1.16 only under the 16k reading). PR4802's TRT-LLM TP8 baseline
is 42% faster in the model than reported, too. An all-reduce latency refitted to it alone (26.8 us
against the derived 10 us) brings A2's held-out baseline to 1.02 of the reported, which says the
TP8 step's collectives are what the model under-prices; it is not adopted, because the TP8 EAGLE
rows then over-predict alike (A2 1.32, A6 1.34): a TP8 speculative step costs more than the model
prices in SGLang and TRT-LLM alike, for a reason no published number isolates.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from pathlib import Path

import numpy as np

from trtspec.perf.stats import end_to_end_prediction
from trtspec.tuning.calibrate import prefills_per_request
from trtspec.tuning.cost import CostModel, forward_terms, prefill_time
from trtspec.tuning.gpus import gpu_preset, with_framework
from trtspec.upstream.published import TRTLLM_BENCH_PER_USER_INCLUDES_CONTEXT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from published_setups import (A1_A5_CHAIN, BASELINE_CHECK, BASELINE_REFIT, CHECKS, CONTEXT,  # noqa: E402
                              LONG_PROMPT_TOKENS, L8, PR4247, PR4802_EAGLE, SGLANG_FIT, TREE_DEFAULT, Baseline,
                              Setup, decode_time, eagle_head, mean_decode_context, shape)


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
    output by the end-to-end latency (upstream.published.TRTLLM_BENCH_PER_USER_INCLUDES_CONTEXT, under
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
            f"{sgl * 1e3:.2f} ms; predicted / reported: " + ", ".join(ratios), *allreduce_refit()]


def allreduce_refit() -> list[str]:
    """The all-reduce latency (derived: gpus.py) refitted to PR 4802's TRT-LLM TP8 baseline, the only
    TP8 row fitted, and what it does to A2 (SGLang, H100: held out) and A6."""
    pr4802 = next(b for b in BASELINE_CHECK if b.name == "PR4802")
    gpu = with_framework(gpu_preset(pr4802.gpu), pr4802.framework)
    t_model, t_reported = pr4802.batch / pr4802.model_tok_s(), pr4802.batch / pr4802.tok_s
    # a decode step holds two all-reduces per layer: the step is linear in their latency
    fitted = gpu.allreduce_latency_s + (t_reported - t_model) / (2 * pr4802.target.num_layers)
    upd = {"allreduce_latency_s": fitted}
    a2 = next(b for b in BASELINE_CHECK if b.name == "A2")
    ratios = ", ".join(f"{s.row} {predict(s, upd) / s.reported:.2f}" for s in CHECKS if s.row in ("A2", "A6"))
    return [f"all-reduce latency refitted to PR4802's baseline: {fitted * 1e6:.1f} us (derived "
            f"{gpu.allreduce_latency_s * 1e6:.0f} us; not adopted): A2's held-out baseline then "
            f"{a2.model_tok_s(upd) / a2.tok_s:.2f} of the reported (now {a2.model_tok_s() / a2.tok_s:.2f}), but the",
            f"  TP8 EAGLE rows then over-predict alike, {ratios}: a TP8 speculative step costs more than the "
            "model prices in both frameworks"]


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
    print(f"  PR4802 (no AL stated): the model needs AL {needed_al(PR4802_EAGLE):.2f} (of at most 4) for the "
          f"reported {PR4802_EAGLE.reported:.2f}x")
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
    print("\nbaselines (plain decode, batch 1 unless stated): model / reported tokens/s")
    for b in BASELINE_CHECK + BASELINE_REFIT:
        model = b.model_tok_s()
        note = "the decode scale's anchor" if b.name == "A1" else "check"
        batch = f" x{b.batch}" if b.batch > 1 else ""
        print(f"  {b.name:<13} {b.gpu.upper()} {b.target.name + batch:<22} model {model:7.1f}  reported {b.tok_s:7.2f}  "
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
