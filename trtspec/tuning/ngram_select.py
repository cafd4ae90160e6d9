"""Choose K and max_matching_ngram_size of n-gram drafting per workload and concurrency band.

Same objective as select.py (predicted output tokens/s = b * AL / step_time(b)), over the
candidates "off" (K = 0, AL 1) and every profiled (K, n), with AL(n, K) replayed exactly by the
profiler (ngram_profile.py). The drafter costs no GPU time (a host-side lookup), so a step is one
target verify of K + 1 tokens (cost.draft_target_step with host_draft): at concurrency 1, where the
verify is memory-bound, even a chat workload's small AL gain is worth a long K; at high
concurrency the verify becomes compute-bound and K + 1 tokens cost nearly K + 1 times one, so a
workload whose drafts are seldom accepted is switched off while a copy-heavy one keeps drafting.

Both settings are per deployment in TensorRT-LLM (NGramDecodingConfig is a model setting of the
llmapi flavor), per request in trtspec's own orchestration (trtllm and cpu flavors); each band
records its drafter ("ngram"), K (`draft_len`) and `max_matching_ngram_size`. Candidates are ordered
by K, then n, so a tie keeps the shorter draft and the smaller pattern.
"""

from __future__ import annotations

from .cost import CostModel
from .schema import Profile, WorkloadProfile
from .tuning_schema import BandChoice, WorkloadTuning
from .select import SelectConfig, _al, _band, chain_sweep, context_of, profile_record

DRAFTER = "ngram"


Candidate = tuple[int | None, int, float, float | None]  # (n, K, AL, SE of AL)


def candidates(w: WorkloadProfile, sizes: list[int], max_k: int, name: str) -> list[Candidate]:
    """Every setting, "off" first (n None, K 0, AL 1, SE 0)."""
    out = [(None, 0, 1.0, 0.0)]
    for k in range(1, max_k + 1):
        for n in sizes:
            out.append((n, k, _al(w.accept_length_by_n_k[str(n)][str(k)], name),
                        w.accept_length_se_by_n_k[str(n)][str(k)]))
    return out


def band_choice(cands: list[Candidate], cost: CostModel, b: int, ctx: float) -> BandChoice:
    ns, ks, als, ses = (list(x) for x in zip(*cands))
    sweep, steps, i = chain_sweep(als, cost, b, ctx, ks=ks, ngram_sizes=ns, host_draft=True, ses=ses)
    return _band(b, als[i], steps[i], steps[0], sweep, sweep[i].tokens_per_s, speculate=ks[i] > 0, drafter=DRAFTER,
                 draft_len=ks[i], max_matching_ngram_size=ns[i], acceptance_length_se=ses[i])


def tune_ngram(profile: Profile, cost: CostModel, cfg: SelectConfig) -> dict[str, WorkloadTuning]:
    K, sizes = profile.num_speculative_tokens, profile.ngram_sizes
    out = {}
    for name, w in profile.workloads.items():
        cands, ctx = candidates(w, sizes, K, name), context_of(w, cfg)
        bands = [band_choice(cands, cost, b, ctx) for b in cfg.concurrency_bands]
        out[name] = WorkloadTuning(num_samples=w.num_samples, num_tokens=w.num_tokens, context_tokens=ctx,
                                   accept_length_by_k=w.accept_length_by_k, bands=bands,
                                   accept_length_se_by_k=w.accept_length_se_by_k,
                                   accept_length_by_n_k=w.accept_length_by_n_k, **profile_record(profile, w))
    return out
