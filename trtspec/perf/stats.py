"""Per-request metrics and per-run aggregates, exactly as defined in `trtspec.perf.schema`.

Kept apart from the load generator so that the definitions can be tested against numpy on made-up
records, and recomputed by anyone from results.json:
- ITL of a request = (E2E - TTFT) / (output_tokens - 1), None under 2 tokens (genai-perf's definition);
- a run's AL is token-weighted: sum(tokens) / sum(tokens / AL) = total tokens / total verify steps;
- throughput = tokens of the successful requests / window, the window running from the first
  measured send to the last successful completion (a timed-out request does not stretch it by its
  timeout, and an error does not end it);
- percentiles: numpy's default linear interpolation over the successful requests.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .client import Result
from .schema import Percentiles, RequestRecord, RunSummary


def itl(e2e_s: float | None, ttft_s: float | None, output_tokens: int) -> float | None:
    if e2e_s is None or ttft_s is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


def percentiles(values: Iterable[float | None]) -> Percentiles:
    xs = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if xs.size == 0:
        return Percentiles()
    p50, p90, p99 = np.percentile(xs, [50, 90, 99])
    return Percentiles(mean=float(xs.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


def token_weighted_al(pairs: Iterable[tuple[int, float | None]]) -> float | None:
    """sum(tokens) / sum(tokens / AL) over (tokens, AL) pairs with both known and positive."""
    tokens = steps = 0.0
    for n, al in pairs:
        if n > 0 and al is not None and al > 0:
            tokens += n
            steps += n / al
    return tokens / steps if steps else None


def to_record(index: int, r: Result, run_start: float) -> RequestRecord:
    """A measured Result as its schema record (times relative to the run's start)."""
    gaps = [b - a for a, b in zip(r.token_times, r.token_times[1:])]
    ok = r.status == "ok"
    return RequestRecord.model_construct(
        index=index, prompt_id=r.prompt_id, start_s=r.start - run_start, status=r.status, error=r.error,
        ttft_s=r.ttft if ok else None, e2e_s=r.e2e if ok else None,
        itl_s=itl(r.e2e, r.ttft, r.output_tokens) if ok else None, chunk_gaps_s=gaps if ok else [],
        responses=len(r.token_times), output_tokens=r.output_tokens, acceptance_length=r.acceptance_length,
        num_draft_tokens=r.num_draft_tokens, route=r.route, output_sha256=r.output_sha256 if ok else None)


def summarize(records: Sequence[RequestRecord]) -> RunSummary:
    ok = [r for r in records if r.status == "ok"]
    errors = sum(r.status == "error" for r in records)
    timeouts = sum(r.status == "timeout" for r in records)
    window = 0.0
    if ok:
        first = min(r.start_s for r in records)
        window = max(r.start_s + r.e2e_s for r in ok) - first
    tokens = sum(r.output_tokens for r in ok)
    return RunSummary(
        requests_ok=len(ok), errors=errors, timeouts=timeouts, window_s=window,
        requests_per_s=len(ok) / window if window > 0 else 0.0, output_tokens=tokens,
        output_tokens_per_s=tokens / window if window > 0 else 0.0,
        acceptance_length=token_weighted_al((r.output_tokens, r.acceptance_length) for r in ok),
        ttft_s=percentiles(r.ttft_s for r in ok), itl_s=percentiles(r.itl_s for r in ok),
        e2e_s=percentiles(r.e2e_s for r in ok))
