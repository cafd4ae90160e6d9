"""Which sampling settings each perf request carries, and its seed.

Per workload: the perf options' temperature / top_k / top_p when given (every workload), else the
workload's `sampling` in tuning.json (written by the tuner per workload as {temperature, top_k,
top_p, seed}; a tuning.json without it, or no tuning.json, means greedy), else greedy: nothing is
sent and the server decodes greedily. Baseline and speculative runs send the same settings.

Seeds: each prompt's requests carry seed = a hash of (the perf seed, the workload's sampling seed,
workload, prompt id): reproducible across invocations, the same for the baseline and the
speculative run of a prompt (so a repository whose rule is exact match with keyed draws, the cpu
flavor's, returns the same text for both), and different between prompts.
"""

from __future__ import annotations

import hashlib

from ..options import GREEDY_SAMPLING, Sampling
from .options import PerfSettings

SEED_SPACE = 2 ** 63


def _tuned(tuning, workload: str) -> Sampling | None:
    """tuning.json's sampling of a workload, read defensively (absent: None = greedy)."""
    wt = (getattr(tuning, "workloads", None) or {}).get(workload) if tuning is not None else None
    raw = getattr(wt, "sampling", None) if wt is not None else None
    if raw is None:
        return None
    return raw if isinstance(raw, Sampling) else Sampling.model_validate(
        raw if isinstance(raw, dict) else raw.model_dump())


def workload_sampling(o: PerfSettings, tuning, workload: str) -> Sampling:
    """The settings every request of `workload` is sent with (GREEDY_SAMPLING: none sent)."""
    if o.temperature is not None:
        return Sampling(temperature=o.temperature, top_k=o.top_k or 0, top_p=1.0 if o.top_p is None else o.top_p)
    return _tuned(tuning, workload) or GREEDY_SAMPLING


def accept_rule(tuning, workload: str) -> str | None:
    """The accept rule tuning.json says the tuning assumed for `workload` (None: not recorded)."""
    wt = (getattr(tuning, "workloads", None) or {}).get(workload) if tuning is not None else None
    return getattr(wt, "accept_rule", None) or getattr(tuning, "accept_rule", None)


def request_seed(perf_seed: int, sampling: Sampling, workload: str, prompt_id: str) -> int:
    """The seed of every request of one prompt (module docstring)."""
    key = f"{perf_seed}\0{sampling.seed}\0{workload}\0{prompt_id}".encode("utf-8")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") % SEED_SPACE
