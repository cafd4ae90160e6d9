"""Synthetic profiles with known acceptance, for tests, examples and sanity checks of the tuner.

Chain drafts: each position j of a sample agrees with the target with probability `alpha`
(i.i.d.), and match_lengths[t] is the run of agreements from t, which is exactly how the profiler
derives it from a teacher-forced pass, so chain replay of K gives E[AL] = (1 - alpha^(K+1)) /
(1 - alpha) in expectation (landscape.md §4.2). EAGLE: the rank of the true token at each depth
is 0 with probability `alpha`, else drawn from ranks 1..top_k-1 with weights 1/r, or missed (-1)
with probability `miss`; paths stop at the first miss or at the profiled depth. N-gram: per (n, K)
steps whose draft has K tokens (K - 1 for n = 1, a short pattern matching worse), each accepted in
turn with probability `alpha`, over an output of T tokens: the last step counts only the tokens
left before it ends, as the profiler records it (ngram_profile.py; runtime/stats.py counted_step).
"""

from __future__ import annotations

import random

from ..runtime.stats import Step, counted_step
from .cost import CostModel, ModelShape
from .gpus import gpu_preset
from .schema import Profile, build_profile


def chain_sample(alpha: float, T: int, max_k: int, rng: random.Random) -> list[int]:
    agree = [rng.random() < alpha for _ in range(T + max_k)]
    out = [0] * T
    runs = [0] * (len(agree) + 1)
    for j in range(len(agree) - 1, -1, -1):
        runs[j] = runs[j + 1] + 1 if agree[j] else 0
    for t in range(T):
        out[t] = min(runs[t], max_k)
    return out


def rank_path(alpha: float, miss: float, depth: int, top_k: int, rng: random.Random) -> list[int]:
    weights = [1.0 / r for r in range(1, top_k)]
    path = []
    for _ in range(depth):
        u = rng.random()
        if u < alpha:
            path.append(0)
        elif u < alpha + miss or top_k == 1:
            path.append(-1)
            break
        else:
            path.append(rng.choices(range(1, top_k), weights)[0])
    return path


def conditions(**over) -> dict:
    c = {"target": "synthetic-target", "draft": "synthetic-draft", "quantization": {}, "temperature": 0.0,
         "max_new_tokens": 128, "dtype": "bfloat16", "trtspec_version": "0.1.0"}
    c.update(over)
    return c


def chain_profile(alphas: dict[str, float], num_samples: int = 8, T: int = 128, max_k: int = 8,
                  prompt_len: int = 256, seed: int = 0, **cond) -> Profile:
    rng = random.Random(seed)
    work = {name: [{"id": f"{name}-{i}", "prompt_len": prompt_len,
                    "match_lengths": chain_sample(a, T, max_k, rng)} for i in range(num_samples)]
            for name, a in alphas.items()}
    return build_profile("draft-target", max_k, None, conditions(max_new_tokens=T, **cond), work)


def eagle_profile(params: dict[str, tuple[float, float]], num_samples: int = 8, T: int = 128, depth: int = 4,
                  top_k: int = 10, prompt_len: int = 256, seed: int = 0, **cond) -> Profile:
    """params: workload -> (alpha, miss)."""
    rng = random.Random(seed)
    work = {name: [{"id": f"{name}-{i}", "prompt_len": prompt_len,
                    "rank_paths": [rank_path(a, m, depth, top_k, rng) for _ in range(T)]}
                   for i in range(num_samples)]
            for name, (a, m) in params.items()}
    return build_profile("eagle", depth, top_k, conditions(max_new_tokens=T, draft=None, **cond), work)


def llama31_8b_shapes() -> dict:
    """Shapes of Llama-3.1-8B-Instruct (FP8 weights and KV, bf16 lm_head), a Llama-3.2-1B draft
    (same quantization) and an EAGLE-1 head for it (1 bf16 layer, fc 2H -> H, bf16 lm_head), as the
    cost model sees them: a realistic deployment for examples and tests, without checkpoints."""
    fp8 = dict(weight_bytes=1.0, lm_head_bytes=2.0, kv_bytes=1.0, dtype_bytes=2.0, compute_dtype="fp8",
               quant_algo="FP8", kv_cache_quant_algo="FP8")
    llama = dict(num_heads=32, num_kv_heads=8, vocab_size=128256)
    return {
        "target": ModelShape(name="Llama-3.1-8B-Instruct", role="target", num_layers=32, hidden_size=4096,
                             head_size=128, intermediate_size=14336, **llama, **fp8),
        "draft": ModelShape(name="Llama-3.2-1B-Instruct", role="draft", num_layers=16, hidden_size=2048,
                            head_size=64, intermediate_size=8192, **llama, **fp8),
        "eagle": ModelShape(name="EAGLE-LLaMA3.1-Instruct-8B", role="eagle", num_layers=1, hidden_size=4096,
                            head_size=128, intermediate_size=14336, extra_linear_params=2 * 4096 * 4096,
                            weight_bytes=2.0, lm_head_bytes=2.0, kv_bytes=2.0, dtype_bytes=2.0, compute_dtype="bf16",
                            **llama),
    }


def example_cost_model(mode: str, gpu: str = "h100"):
    s = llama31_8b_shapes()
    return CostModel(gpu=gpu_preset(gpu), target=s["target"], draft=s["eagle" if mode == "eagle" else "draft"])


def ngram_steps(alpha: float, k: int, n: int, T: int, rng: random.Random) -> list[list[int]]:
    out, t = [], 1
    drafted = max(1, k - 1) if n == 1 else k
    while t < T:
        a = 0
        while a < drafted and rng.random() < alpha:
            a += 1
        a = counted_step(Step(a, 0), T - t).accepted
        out.append([a, drafted])
        t += a + 1
    return out


def ngram_profile(alphas: dict[str, float], sizes: list[int], num_samples: int = 4, T: int = 120, max_k: int = 6,
                  prompt_len: int = 50, seed: int = 0, **cond) -> Profile:
    rng = random.Random(seed)
    work = {name: [{"id": f"{name}-{i}", "prompt_len": prompt_len, "output_ids": [1] * T,
                    "ngram_steps": {str(n): [ngram_steps(a, k, n, T, rng) for k in range(1, max_k + 1)]
                                    for n in sizes}} for i in range(num_samples)]
            for name, a in alphas.items()}
    return build_profile("ngram", max_k, None, conditions(max_new_tokens=T, draft=None, ngram_pool="per-request",
                                                          **cond), work, ngram_sizes=sizes)
