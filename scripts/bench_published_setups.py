"""The analytic step-time model (trtspec/tuning/cost.py, presets h100/h200, unfitted) against the
published speculative-decoding results of landscape.md §4.1 that state enough to be modelled.

For each setup it prints the reported speedup, the model's predicted speedup (tokens/s with
speculation / tokens/s without, same batch), their ratio (predicted / reported), and the model's
baseline tokens/s next to the reported baseline (a check of the step-time scale itself). Where the
source reports the acceptance length (AL) it is the input. Where it does not, the script says what
it assumed, and prints the AL (EAGLE) or per-token acceptance rate alpha (draft-target) that the
model needs to reproduce the reported speedup. No pass/fail: this is a sanity check of the model's
scale and of its assumptions, not a fit. Plain arithmetic; runs in a second:

    .venv/bin/python scripts/bench_published_setups.py

What the model computes (cost.py): one forward = overhead + max(bytes / (bandwidth x efficiency),
FLOPs / (peak x efficiency)) + 2 x layers x all-reduce latency under TP; bytes = weights (+ KV
read) per GPU, FLOPs = 2 x tokens x parameters (+ attention) per GPU. Baseline step = one target
forward of 1 token per sequence. Draft-target step = K draft forwards + one target forward of K + 1
tokens. EAGLE step = one drafter forward per tree level (level_sizes tokens each) + one target
forward of 1 + nodes tokens. Speedup = AL x baseline step / speculative step.

GPU parameters (PRESETS in trtspec/tuning/cost.py; printed below):
- H100 SXM5: 3.35 TB/s HBM3; dense FP16/BF16 989.4, FP8 1978.9 TFLOPS (NVIDIA H100 datasheet,
  halving its with-sparsity headline numbers). H200 SXM: 4.8 TB/s HBM3e, the same tensor cores
  (NVIDIA H200 datasheet).
- bandwidth_efficiency 0.80 and forward_overhead_s 0.3 ms: chosen in cost.py with anchor A1's
  baseline in view (Llama-3.1-8B bf16 on one H100, 158.3 tok/s; the model gives 168.8), so A1's
  baseline is not an independent check of the scale; compute_efficiency 0.60
  (typical large-GEMM MFU on Hopper), eagle_level_overhead_s 30 us (drafter levels run inside the
  target's engine step), allreduce_latency_s 10 us (NCCL small-message latency on NVLink): all
  assumptions stated in cost.py, none fitted to the speedups below.

Model shapes (the models' Hugging Face config.json files: layers, hidden, heads/kv heads, head
size, MLP size, vocab): Llama-3.1-8B 32/4096/32/8/128/14336/128256; Llama-3.2-1B
16/2048/32/8/64/8192/128256 (tied embedding, still read once per step); Llama-3.2-3B
28/3072/24/8/128/8192/128256; Llama-3.1/3.3-70B 80/8192/64/8/128/28672/128256; Llama-3.1-405B
126/16384/128/8/128/53248/128256; Qwen3-8B 36/4096/32/8/128/12288/151936.
Drafters: EAGLE-1/2 head for Llama-3.1-8B (yuhuili/EAGLE-LLaMA3.1-Instruct-8B, as in
trtspec.tuning.synthetic): 1 Llama layer at the base's sizes, fc 2H -> H, the base's full-vocab
lm_head. EAGLE-3 drafters: 1 Llama layer at the target's sizes whose attention reads 2H (embedding
+ fused feature), fc 3H -> H, lm_head over a 32000-token draft vocabulary (the EAGLE-3 reference
configs' draft_vocab_size). Assumption for Llama-3.3-70B: sglang PR 4716 says that drafter's
hidden size differs from the target's without saying what it is; the target's is used, which if
anything overestimates the drafter's cost.

Setups (landscape.md §4.1 row, what the source states, what is assumed):
- A1 (docs.sglang.io speculative_decoding): Llama-3.1-8B-Instruct, SGLang, 1x H100, MT-Bench,
  158.34 -> 373.25 tok/s EAGLE-3 (2.36x), 244.10 tok/s EAGLE-2 (1.54x). Not stated: dtype (bf16
  assumed: the checkpoint's), batch (1 assumed: 158 tok/s is one stream), tree and AL. Assumed
  tree: SGLang's documented defaults, num_steps 5, topk 4, num_draft_tokens 8 (drafter levels of
  1, 4, 4, 4, 4 tokens; verify 8 tokens = root + 7 nodes). The AL needed is printed; for reference
  A5 (vLLM golden test, same model and data, EAGLE-3 chain K=3) measured AL 2.60, and the EAGLE-3
  row also shows that K=3 chain with AL 2.60 as an "assumed AL" prediction.
- A2 (sglang PR 4716): Llama-3.3-70B-Instruct + yuhuili EAGLE3, H100 TP8, fp16, num_steps 8,
  topk 8, num_draft_tokens 64, cuda-graph-max-bs 1 (batch 1), MT-Bench 80 questions: 88.61 ->
  234.54 tok/s (2.65x), AL 5.88 (input). Levels 1 + 7 x 8 tokens, verify 64 tokens.
- A6 (TensorRT-LLM PR 5146): Llama 3.3 70B BF16 + public EAGLE-3, TRT-LLM one-engine (PyTorch
  backend, a chain), H200 TP8, concurrency 4: AL 1.83 with max_draft_len 4 (input), 1.26x
  tokens/s per user. Drafter bf16 assumed. (The same PR's Llama 4 Maverick row is a mixture of
  experts: not modelled.)
- A7 (NVIDIA blog "TensorRT-LLM Speculative Decoding Boosts Inference Throughput by up to 3.6x"):
  Llama 3.1 405B target with Llama 3.2 1B / 3.2 3B / 3.1 8B drafts, all FP8 weights + FP8 KV
  (lm_head kept fp16, TRT-LLM's default exclusion), TP4 each, 4x H200, TRT-LLM v0.14: 33.46 ->
  111.34 / 120.75 / 101.86 tok/s (3.33x / 3.61x / 3.04x). Not stated: batch (1 assumed), draft
  length, acceptance. Assumed: i.i.d. acceptance alpha, AL(K) = (1 - alpha^(K+1)) / (1 - alpha)
  (landscape.md §4.2), K the model's best in 1..10 (TRT-LLM's draft_target_model README: draft_len
  "from 4 to 10 in common usage"). Printed: predictions at alpha 0.6 / 0.7 / 0.8 / 0.9 (the §4.2
  grid) and the alpha the model needs.
- A8 (NVIDIA blog "Boost Llama 3.3 70B Inference Throughput 3x with NVIDIA TensorRT-LLM Speculative
  Decoding"): Llama 3.3 70B + "draft model", H200: 51.14 -> 181.74 tok/s (3.55x). Not stated in
  landscape.md: draft, precision, TP, batch. Assumed: one H200, FP8 weights + FP8 KV (70B in bf16
  does not leave room for a KV cache on one 141 GB H200; the printed baseline check tests this),
  batch 1, a Llama 3.2 1B or 3B draft in FP8 (both shown), alpha / K as for A7.
- A15 (SafeAILab/EAGLE issue 211): Qwen3-8B + community EAGLE-3, SGLang, 1x H200: 186 -> 365 tok/s
  (1.96x). Not stated: dtype (bf16 assumed), batch (1), tree (SGLang defaults as for A1), AL
  (the AL needed is printed).

Not modelled (§4.1 rows without enough to model, or outside the presets): A5, A13, A14 (AL only,
no timing), A9 (B200, MoE, n-gram), A10 (RTX 5880), A11/A17/A18 (A100; A11 is HF eager), A12/A19
(no setup details), A16 (GPU not stated), A20 (no numbers).

Summary table: its "predicted" column is the prediction at the reported AL (A2, A6), at A5's AL
for A1 EAGLE-3, and at alpha = 0.8 for the draft-target rows (an assumption: the upper middle of
the §4.2 grid, for a same-family draft); empty where nothing was assumed.

Context (KV length per sequence, all rows): 512 tokens assumed (MT-Bench-like prompts plus about
half of a 256-512 token answer); at batch 1-4 the KV read is < 2% of the weight bytes, so the
result hardly depends on it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from trtspec.tuning.cost import CostModel, ModelShape, StepTime, gpu_preset

CONTEXT = 512
ALPHA_GRID = (0.6, 0.7, 0.8, 0.9)
MAX_K = 10

LLAMA_VOCAB = 128256
ARCH = {  # layers, hidden, heads, kv heads, head size, MLP size, vocab
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


def eagle1_head(base: str, precision: str, tp: int = 1) -> ModelShape:
    L, H, nh, nkv, hd, inter, vocab = ARCH[base]
    return ModelShape(name=f"EAGLE-1/2 head of {base}", role="eagle", num_layers=1, hidden_size=H, num_heads=nh,
                      num_kv_heads=nkv, head_size=hd, intermediate_size=inter, vocab_size=vocab, tp=tp,
                      extra_linear_params=2 * H * H, **PRECISION[precision])


def eagle3_head(base: str, precision: str, tp: int = 1, draft_vocab: int = 32000) -> ModelShape:
    L, H, nh, nkv, hd, inter, vocab = ARCH[base]
    wider_qkv = H * (nh + 2 * nkv) * hd  # the first layer's attention reads [embedding, feature] = 2H
    return ModelShape(name=f"EAGLE-3 head of {base}", role="eagle", num_layers=1, hidden_size=H, num_heads=nh,
                      num_kv_heads=nkv, head_size=hd, intermediate_size=inter, vocab_size=draft_vocab, tp=tp,
                      extra_linear_params=3 * H * H + wider_qkv, **PRECISION[precision])


def sglang_tree(num_steps: int, topk: int, num_draft_tokens: int) -> tuple[list[int], int]:
    """(drafter level sizes, tree nodes) of an SGLang EAGLE tree: step 0 drafts from the accepted
    tokens (1 per sequence), each later step expands the topk kept candidates; the verify block is
    num_draft_tokens tokens, the root (last verified token) included."""
    return [1] + [topk] * (num_steps - 1), num_draft_tokens - 1


def chain_al(alpha: float, k: int) -> float:
    return float(k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


@dataclass
class Row:
    anchor: str
    setup: str
    gpu: str
    reported_base: float | None  # tok/s, None when only the speedup is reported
    reported_spec: float  # tok/s, or the speedup when reported_base is None
    lines: list[str] = field(default_factory=list)
    predicted: float | None = None  # speedup at the reported (or an assumed) AL
    basis: str = ""  # what `predicted` rests on
    needed: str = ""  # the AL / alpha the model needs for the reported speedup


def baseline_line(batch: int, base: StepTime, reported: float | None) -> str:
    model = batch / base.total_s
    if reported is None:
        return f"baseline: model {model:.1f} tok/s (not reported)"
    return f"baseline: model {model:.1f} tok/s vs reported {reported:.2f} (model / reported {model / reported:.2f})"


def speedup(al: float, step: StepTime, base: StepTime) -> float:
    return al * base.total_s / step.total_s


def eagle_row(anchor, setup, gpu, target, head, batch, base_tps, spec_tps, levels, nodes, al=None,
              assumed_al=None) -> Row:
    cm = CostModel(gpu=gpu_preset(gpu), target=target, draft=head)
    base = cm.baseline_step(batch, CONTEXT)
    step = cm.eagle_step(batch, levels, nodes, CONTEXT)
    row = Row(anchor, setup, gpu, base_tps, spec_tps)
    reported = spec_tps / (base_tps or 1.0)
    row.lines.append(baseline_line(batch, base, base_tps) + f"; speculative step {step.total_s * 1e3:.2f} ms = "
                     f"drafter {step.draft_s * 1e3:.2f} + verify {step.target_s * 1e3:.2f} (levels {levels}, "
                     f"{nodes} nodes)")
    if al is not None:
        pred = speedup(al, step, base)
        row.lines.append(f"AL {al} (reported): predicted {pred:.2f}x vs reported {reported:.2f}x -> ratio "
                         f"{pred / reported:.2f}")
        row.predicted, row.basis = pred, f"reported AL {al}"
        row.lines.append(f"speculative step / baseline step: model {step.total_s / base.total_s:.2f}, implied by "
                         f"the report (AL / speedup) {al / reported:.2f}")
    else:
        need = reported * step.total_s / base.total_s
        row.needed = f"AL {need:.2f}"
        row.lines.append(f"AL not reported: the model needs AL {need:.2f} (at most {len(levels) + 1} with this "
                         f"tree depth) to reach the reported {reported:.2f}x")
        if assumed_al is not None:
            al2, levels2, nodes2, why = assumed_al
            step2 = cm.eagle_step(batch, levels2, nodes2, CONTEXT)
            pred = speedup(al2, step2, base)
            row.lines.append(f"assumed AL {al2} ({why}): predicted {pred:.2f}x vs reported {reported:.2f}x -> "
                             f"ratio {pred / reported:.2f}")
            row.predicted, row.basis = pred, f"assumed AL {al2} (A5)"
    return row


def best_k(cm: CostModel, alpha: float, batch: int) -> tuple[float, int]:
    base = cm.baseline_step(batch, CONTEXT)
    best = max((speedup(chain_al(alpha, k), cm.draft_target_step(batch, k, CONTEXT), base), k)
               for k in range(1, MAX_K + 1))
    return best


def draft_target_row(anchor, setup, gpu, target, draft, batch, base_tps, spec_tps) -> Row:
    cm = CostModel(gpu=gpu_preset(gpu), target=target, draft=draft)
    base = cm.baseline_step(batch, CONTEXT)
    d1 = cm.draft_target_step(batch, 1, CONTEXT)
    row = Row(anchor, setup, gpu, base_tps, spec_tps)
    reported = spec_tps / base_tps
    row.lines.append(baseline_line(batch, base, base_tps) + f"; draft forward / target forward c = "
                     f"{d1.draft_s / base.total_s:.3f}")
    grid = []
    for a in ALPHA_GRID:
        s, k = best_k(cm, a, batch)
        grid.append(f"alpha {a}: {s:.2f}x (K={k}, AL {chain_al(a, k):.2f}, ratio {s / reported:.2f})")
        if a == 0.8:
            row.predicted, row.basis = s, f"assumed alpha 0.8 (K={k})"
    row.lines.append("AL not reported; predicted at the best K <= 10: " + "; ".join(grid))
    lo, hi = 0.0, 0.9999
    if best_k(cm, hi, batch)[0] < reported:
        row.lines.append(f"no alpha < 1 reaches the reported {reported:.2f}x (at most "
                         f"{best_k(cm, hi, batch)[0]:.2f}x)")
    else:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if best_k(cm, mid, batch)[0] < reported else (lo, mid)
        s, k = best_k(cm, hi, batch)
        row.needed = f"alpha {hi:.3f} (AL {chain_al(hi, k):.2f}, K={k})"
        row.lines.append(f"the model needs alpha {hi:.3f} (K={k}, AL {chain_al(hi, k):.2f}) to reach the reported "
                         f"{reported:.2f}x")
    return row


def gpu_line(name: str) -> str:
    g = gpu_preset(name)
    return (f"{name}: {g.name}; HBM {g.hbm_bandwidth_gbs:.0f} GB/s x efficiency {g.bandwidth_efficiency}; dense "
            f"TFLOPS fp16/bf16 {g.peak_tflops_fp16}, fp8 {g.peak_tflops_fp8} x efficiency {g.compute_efficiency}; "
            f"forward overhead {g.forward_overhead_s * 1e3:.2f} ms, EAGLE level overhead "
            f"{g.eagle_level_overhead_s * 1e6:.0f} us, all-reduce {g.allreduce_latency_s * 1e6:.0f} us, "
            f"max(memory, compute): {g.memory_compute_overlap}")


def main() -> int:
    print("Analytic cost model (trtspec.tuning.cost, unfitted presets) vs published speedups (landscape.md §4.1)")
    for g in ("h100", "h200"):
        print("  " + gpu_line(g))
    print(f"  KV context {CONTEXT} tokens per sequence (assumed); see the docstring for every source and assumption")
    rows = []
    l8 = shape("Llama-3.1-8B", "target", "bf16")
    levels, nodes = sglang_tree(5, 4, 8)
    rows.append(eagle_row("A1", "Llama-3.1-8B-Instruct bf16 + EAGLE-3, SGLang, bs 1 (tree: SGLang defaults 5/4/8)",
                          "h100", l8, eagle3_head("Llama-3.1-8B", "bf16"), 1, 158.34, 373.25, levels, nodes,
                          assumed_al=(2.60, [1, 1, 1], 3, "A5's EAGLE-3 chain K=3 on the same model and data, "
                                      "modelled as that chain")))
    rows.append(eagle_row("A1", "Llama-3.1-8B-Instruct bf16 + EAGLE-2, SGLang, bs 1 (tree: SGLang defaults 5/4/8)",
                          "h100", l8, eagle1_head("Llama-3.1-8B", "bf16"), 1, 158.34, 244.10, levels, nodes))
    levels, nodes = sglang_tree(8, 8, 64)
    rows.append(eagle_row("A2", "Llama-3.3-70B-Instruct fp16 TP8 + EAGLE-3, SGLang 8/8/64, bs 1", "h100",
                          shape("Llama-3.3-70B", "target", "fp16", tp=8), eagle3_head("Llama-3.3-70B", "fp16", tp=8),
                          1, 88.61, 234.54, levels, nodes, al=5.88))
    rows.append(eagle_row("A6", "Llama-3.3-70B bf16 TP8 + EAGLE-3 chain of 4, TRT-LLM one-engine, conc 4",
                          "h200", shape("Llama-3.3-70B", "target", "bf16", tp=8),
                          eagle3_head("Llama-3.3-70B", "bf16", tp=8), 4, None, 1.26, [1, 1, 1, 1], 4, al=1.83))
    t405 = shape("Llama-3.1-405B", "target", "fp8", tp=4)
    for draft, tps in (("Llama-3.2-1B", 111.34), ("Llama-3.2-3B", 120.75), ("Llama-3.1-8B", 101.86)):
        rows.append(draft_target_row("A7", f"Llama-3.1-405B fp8 TP4 + {draft} fp8 TP4 draft, TRT-LLM, bs 1", "h200",
                                     t405, shape(draft, "draft", "fp8", tp=4), 1, 33.46, tps))
    t70 = shape("Llama-3.3-70B", "target", "fp8")
    for draft in ("Llama-3.2-1B", "Llama-3.2-3B"):
        rows.append(draft_target_row("A8", f"Llama-3.3-70B fp8 + {draft} fp8 draft (assumed), TRT-LLM, 1 GPU, bs 1",
                                     "h200", t70, shape(draft, "draft", "fp8"), 1, 51.14, 181.74))
    levels, nodes = sglang_tree(5, 4, 8)
    rows.append(eagle_row("A15", "Qwen3-8B bf16 + EAGLE-3, SGLang, bs 1 (tree: SGLang defaults 5/4/8)", "h200",
                          shape("Qwen3-8B", "target", "bf16"), eagle3_head("Qwen3-8B", "bf16"), 1, 186.0, 365.0,
                          levels, nodes))
    for r in rows:
        rep = r.reported_spec / (r.reported_base or 1.0)
        base = "" if r.reported_base is None else f"{r.reported_base:g} -> {r.reported_spec:g} tok/s, "
        print(f"\n[{r.anchor}] {r.setup} on {r.gpu.upper()}: reported {base}{rep:.2f}x")
        for line in r.lines:
            print("    " + line)
    print("\nsummary (predicted / reported speedup; 'needs': the AL or alpha at which the model matches the report)")
    print(f"{'row':<4} {'setup':<52} {'GPU':<4} {'reported':>8} {'predicted':>9} {'ratio':>6}  basis; needs")
    for r in rows:
        rep = r.reported_spec / (r.reported_base or 1.0)
        pred = f"{r.predicted:.2f}x" if r.predicted is not None else "-"
        ratio = f"{r.predicted / rep:.2f}" if r.predicted is not None else "-"
        notes = "; ".join(x for x in (r.basis, f"needs {r.needed}" if r.needed else "") if x)
        name = r.setup.split(",")[0]
        print(f"{r.anchor:<4} {name:<52} {r.gpu.upper():<4} {rep:>7.2f}x {pred:>9} {ratio:>6}  {notes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
