"""Per-request metrics and per-run aggregates, exactly as defined in `trtspec.perf.schema`.

Kept apart from the load generator so that the definitions can be tested against numpy on made-up
records, and recomputed by anyone from results.json:
- per-request TTFT, E2E, ITL and tokens, each beside genai-perf's: trtspec.perf.metrics;
- a run's AL is token-weighted: sum(tokens) / sum(tokens / AL) = total tokens / total verify steps;
- throughput = tokens of the successful requests / window, the window running from the first
  measured send to the last successful completion (a timed-out request does not stretch it by its
  timeout, and an error does not end it);
- percentiles: numpy's default linear interpolation over the successful requests.

Confidence intervals (95%, bootstrap.LEVEL), all from one seeded percentile bootstrap over the successful
requests of a run (trtspec.perf.bootstrap: `BOOT_SEED`, `BOOT_REPS` resamples, so the same results.json
always gives the same intervals):
- mean TTFT and mean ITL (means, not p50: a bootstrap of a median over a handful of requests takes
  only a few distinct values, the mean's is smooth), the low end held at 0 (`latency_ci`);
- tokens/s: a resample's rate is sum(tokens) / sum(E2E) of the resampled requests; the run's measured
  tokens/s is scaled by each resample's rate / the observed rate. At concurrency 1 the window is the
  sum of the E2Es, so this is the throughput itself; under concurrency it carries the request-level
  spread onto the window throughput (ramp-up and drain are not resampled);
- speedup (speculation / baseline, same workload and load): the two runs resampled independently and
  the ratio of their scaled rates taken per resample.
A resample that drew no tokens (only zero-token successes) has no rate to put on the log scale:
it is dropped, from either run of a speedup alike (`_rates`).
Every interval is widened for small samples (`widen`: sqrt(n / (n - 1)) * t_0.975(n - 1) / 1.96, on the
log scale for rates; trtspec.perf.bootstrap says why, and the coverage it gives).
Two designs, chosen with `perf.blocks`:
- blocks = 1 (two runs, one after the other): the speedup's two runs are resampled independently.
  Requests are the units that repeat (at concurrency c they overlap, so their E2Es are correlated
  within a batch and the interval is somewhat too narrow there). Pairing the spec and baseline
  request of the same prompt would remove the between-prompt spread, but with the runs measured one
  after the other a drift of the machine's load between them (other processes on a shared CPU)
  would then read as a significant difference from a handful of prompts. The unpaired interval
  does not contain that drift either: a baseline run measured while another job loads the box reads
  as a real difference (seen on the demo: K=0 vs off, code, 1.16x [1.04x, 1.31x] while a test suite
  ran beside the baseline, three of its ten E2Es 30-45% longer).
- blocks = B > 1 (interleaved): each load point's requests are sent in B blocks, speculation on and
  off alternating on, off | off, on | ... (ABBA: a linear drift hits both modes alike; which starts
  alternates by load point, perf.order), each block sending the same prompts in both modes. A speculative request is paired with
  the baseline request of the same prompt in the same block (`pair_up`), measured seconds apart;
  the interval resamples *pairs*, the ratio of the resampled spec rate to the resampled baseline
  rate per resample. Drift slower than a block cancels within a pair; faster drift and the
  within-pair noise are what the pairs' spread measures, so they are inside the interval; and the
  between-prompt spread, the same for both halves of a pair, drops out (narrower intervals for the
  same requests). A run's window is then the sum of its blocks' windows (the other mode's blocks
  in between are not its time).
- a comparison whose speedup interval contains 1 (a difference's contains 0) is "no measurable
  difference" (`verdict`); the prediction (the tuner's per-step speedup made end to end with the
  baseline's TTFT and, under concurrency, its stalls for other requests' context phases,
  `end_to_end_prediction`, `stall_s`) is "inside" the interval or misses it by the % to its nearest
  end (`prediction_fit`).
- requests for a ±5% claim: the relative half-width h of a mean-like statistic over n iid requests is
  1.96 * cv / sqrt(n), so n = (1.96 * cv / 0.05)^2; with h measured by the bootstrap at the observed
  n (cv = h * sqrt(n) / 1.96) that is n_5% = n * (h / 0.05)^2 per run (`requests_for`). For the
  speedup h is the interval's, which already holds both runs' spread.
"""

from __future__ import annotations

import itertools
from typing import Iterable, Sequence

import numpy as np

from ..confidence import Z95
from .bootstrap import BOOT_REPS, BOOT_SEED, interval, resample, widen
from .schema import Interval, Percentiles, RequestRecord, RunSummary

NO_DIFFERENCE = "no measurable difference"


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


def mean_ci(values: Sequence[float], seed: int = BOOT_SEED, reps: int = BOOT_REPS) -> Interval | None:
    """Percentile-bootstrap interval of the mean (None under 2 values)."""
    xs = np.asarray(values, dtype=np.float64)
    if xs.size < 2:
        return None
    m = xs.mean()
    return interval(m + widen(xs.size) * (xs[resample(xs.size, reps, np.random.default_rng(seed))].mean(axis=1) - m))


def latency_ci(values: Sequence[float]) -> Interval | None:
    """`mean_ci` of times, its low end held at 0. The widened interval is symmetric, so at 2-3
    requests a skewed latency's reaches below 0 (TTFTs 50, 50, 500 ms: -203 ms), which no mean
    time can be; holding it there loses no coverage (the true mean is >= 0)."""
    ci = mean_ci(values)
    return None if ci is None else Interval(low=max(ci.low, 0.0), high=ci.high)


def _rates(tok: np.ndarray, e2e: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """sum(tokens) / sum(E2E) per resample (a row of `idx`), NaN (dropped by `interval`) where it drew
    no tokens or no time: a zero rate has no log to widen on, and as a speedup's ratio it was a 0 kept
    for the speculative run but an inf dropped for the baseline (an interval biased low)."""
    num, den = tok[idx].sum(axis=1), e2e[idx].sum(axis=1)
    ok = (num > 0) & (den > 0)
    return np.where(ok, num / np.where(ok, den, 1.0), np.nan)


def _rate_ratios(ok: Sequence[RequestRecord], rng: np.random.Generator, reps: int) -> np.ndarray | None:
    """Per resample, sum(tokens) / sum(E2E) of the resampled requests over the observed value (NaN
    where `_rates` drops the resample)."""
    tok = np.asarray([r.output_tokens for r in ok], dtype=np.float64)
    e2e = np.asarray([r.e2e_s for r in ok], dtype=np.float64)
    if tok.size < 2 or e2e.sum() <= 0 or tok.sum() <= 0:
        return None
    ratio = _rates(tok, e2e, resample(tok.size, reps, rng)) / (tok.sum() / e2e.sum())
    return np.exp(widen(tok.size) * np.log(ratio))  # widened on the log scale, where a rate's spread is symmetric


def _ok_timed(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.status == "ok" and r.e2e_s is not None]


def per_request_tokens_per_s(records: Sequence[RequestRecord]) -> float:
    """sum(tokens) / sum(E2E) over the successful requests: how fast requests complete, whatever the
    load between them (0.0 without one)."""
    ok = _ok_timed(records)
    e2e = sum(r.e2e_s for r in ok)
    return sum(r.output_tokens for r in ok) / e2e if e2e > 0 else 0.0


def rate_ci(records: Sequence[RequestRecord], tokens_per_s: float, seed: int = BOOT_SEED,
            reps: int = BOOT_REPS) -> Interval | None:
    """Interval of a run's tokens/s (module docstring); None under 2 successful requests."""
    ratios = _rate_ratios(_ok_timed(records), np.random.default_rng(seed), reps)
    if ratios is None or tokens_per_s <= 0:
        return None
    return interval(tokens_per_s * ratios)


def al_ci(records: Sequence[RequestRecord], seed: int = BOOT_SEED, reps: int = BOOT_REPS) -> Interval | None:
    """Interval of a run's token-weighted AL (`token_weighted_al`): the successful requests resampled,
    each resample's AL over the observed one widened on the log scale like the rates'; None under 2
    requests with an AL. The one AL interval: comparisons, the report and the sweep's points."""
    pairs = [(r.output_tokens, r.acceptance_length) for r in _ok_timed(records)
             if r.output_tokens > 0 and r.acceptance_length and r.acceptance_length > 0]
    if len(pairs) < 2:
        return None
    tok = np.asarray([n for n, _ in pairs], dtype=np.float64)
    steps = tok / np.asarray([a for _, a in pairs], dtype=np.float64)
    observed = token_weighted_al(pairs)
    idx = resample(len(pairs), reps, np.random.default_rng(seed))
    ratio = tok[idx].sum(axis=1) / steps[idx].sum(axis=1) / observed
    return interval(observed * np.exp(widen(len(pairs)) * np.log(ratio)))


def pair_up(spec: Sequence[RequestRecord], base: Sequence[RequestRecord]
            ) -> list[tuple[RequestRecord, RequestRecord]] | None:
    """Interleaved runs (records carry blocks): each successful speculative request with the
    successful baseline request of the same prompt in the same block (the k-th with the k-th when a
    block sends a prompt more than once); None for runs measured one after the other."""
    if not spec or not base or any(r.block is None for r in (*spec, *base)):
        return None
    waiting: dict[tuple[int, str], list[RequestRecord]] = {}
    for b in _ok_timed(base):
        waiting.setdefault((b.block, b.prompt_id), []).append(b)
    pairs = []
    for s in _ok_timed(spec):
        queue = waiting.get((s.block, s.prompt_id))
        if queue:
            pairs.append((s, queue.pop(0)))
    return pairs


def _paired_ratios(pairs: list[tuple[RequestRecord, RequestRecord]], rng: np.random.Generator,
                   reps: int) -> np.ndarray | None:
    """Per resample of the pairs, (spec rate / baseline rate) over the observed ratio, widened (NaN
    where `_rates` drops either rate)."""
    if len(pairs) < 2:
        return None
    tok_s, e2e_s, tok_b, e2e_b = (np.asarray(v, dtype=np.float64) for v in zip(
        *[(s.output_tokens, s.e2e_s, b.output_tokens, b.e2e_s) for s, b in pairs]))
    if min(e2e_s.sum(), e2e_b.sum(), tok_s.sum(), tok_b.sum()) <= 0:
        return None
    idx = resample(len(pairs), reps, rng)
    r = _rates(tok_s, e2e_s, idx) / _rates(tok_b, e2e_b, idx)
    r /= (tok_s.sum() / e2e_s.sum()) / (tok_b.sum() / e2e_b.sum())
    return np.exp(widen(len(pairs)) * np.log(r))


def speedup_ci(spec: Sequence[RequestRecord], base: Sequence[RequestRecord], speedup: float,
               seed: int = BOOT_SEED, reps: int = BOOT_REPS) -> Interval | None:
    """Interval of speedup = spec tokens/s / baseline tokens/s: over pairs for interleaved runs,
    else the runs resampled independently (module docstring)."""
    rng = np.random.default_rng(seed)
    pairs = pair_up(spec, base)
    if pairs is not None:
        r = _paired_ratios(pairs, rng, reps)
        return None if r is None or speedup <= 0 else interval(speedup * r)
    a, b = _rate_ratios(_ok_timed(spec), rng, reps), _rate_ratios(_ok_timed(base), rng, reps)
    if a is None or b is None or speedup <= 0:
        return None
    return interval(speedup * a / b)


def verdict(ci: Interval | None, null: float = 1.0, higher: str = "faster", lower: str = "slower") -> str | None:
    """`higher` / `lower` when the interval lies wholly above / below `null`, else NO_DIFFERENCE
    (None without an interval: nothing can be claimed either way)."""
    if ci is None:
        return None
    if ci.low > null:
        return higher
    if ci.high < null:
        return lower
    return NO_DIFFERENCE


# A baseline gap over this many typical steps holds another request's context phase (or a chunk of
# one): step jitter stays under it (this CPU's cpu-flavor server: 99th percentile 1.24x the median
# gap, the longest 1.37x; a CUDA-graph decode step varies less).
STALL_FACTOR = 1.5


def stall_s(records: Sequence[RequestRecord], concurrency: float, open_loop: bool = False) -> float | None:
    """Mean time per request that its decode stood still while other requests ran their context
    phases and that speculation does not shorten, read off the baseline run's own streamed gaps: the
    excess over the run's typical step (the median gap) of the gaps longer than STALL_FACTOR typical
    steps. The factor keeps step jitter (which speculation does shorten, with the steps) out; a
    context phase short enough to hide under it is also too short to matter.

    Closed loop (concurrency c): an in-flight-batching server runs about c - 1 other context phases
    inside each request's decode (tuning.calibrate.prefills_per_request, Little's law), however
    long the decode takes: every long gap counts. Open loop (`open_loop`, c = stats.inflight): the
    phases of requests arriving during a decode are rate x its duration, so they shrink with it;
    only the phases already queued when its first token came (the leading streak of long gaps) stay.
    Against a simulated engine (tests/perf/test_predictions.py) counting every gap under-predicts an open
    loop by up to 18%, counting none over-predicts by up to 11%, the streak lands within 3%.

    Bounded by c - 1 context phases, each at most a TTFT (a client that reads its stream in bursts
    makes gaps near 0 and a median that says nothing). 0 at concurrency 1 (no other request: a long
    gap is the step's own); None without streamed gaps."""
    if concurrency <= 1:
        return 0.0
    ok = [r for r in _ok_timed(records) if r.chunk_gaps_s and r.ttft_s is not None]
    if not ok:
        return None
    typical = float(np.median(np.concatenate([r.chunk_gaps_s for r in ok])))
    if typical <= 0:
        return None
    long = lambda g: g > STALL_FACTOR * typical  # noqa: E731
    gaps = [list(itertools.takewhile(long, r.chunk_gaps_s)) if open_loop else r.chunk_gaps_s for r in ok]
    excess = np.mean([sum(g - typical for g in gs if long(g)) for gs in gaps])
    return float(min(excess, (concurrency - 1) * np.mean([r.ttft_s for r in ok])))


def inflight(records: Sequence[RequestRecord]) -> float | None:
    """Requests in flight as an open-loop run's requests found them, each itself included:
    1 + the run's mean number in flight, Little's law L = sum of E2E / window (its blocks' windows).
    Poisson arrivals see that time average (PASTA), so it is both the load the served band was
    picked by (serving_rules.pick_band) and, with c = 1 + L, the number of other requests whose
    context phases fall inside a request's decode (`stall_s`'s c - 1: arrivals during a request are
    lambda x E2E = L). None without a timed success."""
    ok = _ok_timed(records)
    window = sum(_window(block) for block in _by_block(records).values())
    if not ok or window <= 0:
        return None
    return 1.0 + sum(r.e2e_s for r in ok) / window


def end_to_end_prediction(step_speedup: float | None, base_ttft_s: float | None, base_e2e_s: float | None,
                          base_stall_s: float | None = None) -> float | None:
    """The tuner's speedup per decode step as the measured speedup counts it. tokens/s divides the
    output by whole requests (the window), time to first token included, and speculation shortens
    only the decode steps that follow it; so, with the baseline run's mean TTFT, E2E and, under
    concurrency, the time its decode stood still for the other requests' context phases (`stall_s`),

        predicted = E2E / (TTFT + stall + (E2E - TTFT - stall) / step_speedup)

    Comparing the per-step number with the measured one instead over-predicts every workload with
    long prompts or short answers (scripts/bench_published_setups.py applies the same conversion to
    TensorRT-LLM PR 5146's A6, whose trtllm-bench throughput counts the context phase); leaving the
    stall out over-predicts long prompts under concurrency (tests/perf/test_predictions.py: a simulated
    in-flight-batching engine). None without a step speedup; the step speedup itself without the
    baseline's times."""
    if step_speedup is None or not step_speedup > 0:
        return None
    if base_ttft_s is None or base_e2e_s is None or not 0 <= base_ttft_s < base_e2e_s:
        return step_speedup
    fixed = base_ttft_s + min(max(base_stall_s or 0.0, 0.0), base_e2e_s - base_ttft_s)
    return base_e2e_s / (fixed + (base_e2e_s - fixed) / step_speedup)


def prediction_fit(predicted: float | None, ci: Interval | None, se: float | None = None) -> str | None:
    """'inside the measured interval', or by how much the prediction misses it ('12% above ...').
    `se`: the prediction's own standard error (a profiled AL is measured too, on other prompts): a
    miss its ±1.96 se reaches into the measured interval is said so ('..., inside its own ±0.26'),
    not reported as a disagreement."""
    if predicted is None or ci is None:
        return None
    if ci.low <= predicted <= ci.high:
        return "inside the measured interval"
    end = ci.high if predicted > ci.high else ci.low
    miss = abs(predicted / end - 1) * 100  # a miss under 1% keeps a decimal: "0% above" reads as inside
    text = f"{miss:.{0 if miss >= 1 else 1}f}% {'above' if predicted > ci.high else 'below'} the measured interval"
    if se and abs(predicted - end) <= Z95 * se:
        text += f", inside its own ±{Z95 * se:.2f}"
    return text


def requests_for(ci: Interval | None, point: float | None, n: int, target: float = 0.05) -> int | None:
    """Requests per run for a ±target (relative) 95% interval at the observed spread (docstring)."""
    if ci is None or not point or n < 2:
        return None
    half = (ci.high - ci.low) / 2 / abs(point)
    return max(2, int(np.ceil(n * (half / target) ** 2 - 1e-9)))  # 1e-9: float noise must not add one


def _by_block(records: Sequence[RequestRecord]) -> dict[int | None, list[RequestRecord]]:
    groups: dict[int | None, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(r.block, []).append(r)
    return groups


def _window(records: Sequence[RequestRecord]) -> float:
    """First send to last successful completion (module docstring); 0 without a success. genai-perf
    ends it at any request's last response (perf.metrics); a failure's must not stretch it."""
    ok = [r for r in records if r.status == "ok"]
    return max(r.start_s + r.e2e_s for r in ok) - min(r.start_s for r in records) if ok else 0.0


def summarize(records: Sequence[RequestRecord]) -> RunSummary:
    """A run's aggregates over its successful requests; unlike genai-perf, requests/s and tokens/s
    count only those (its request throughput divides every request sent: perf.metrics)."""
    ok = [r for r in records if r.status == "ok"]
    errors = sum(r.status == "error" for r in records)
    timeouts = sum(r.status == "timeout" for r in records)
    window = sum(_window(block) for block in _by_block(records).values())
    tokens = sum(r.output_tokens for r in ok)
    return RunSummary(
        requests_ok=len(ok), errors=errors, timeouts=timeouts, window_s=window,
        requests_per_s=len(ok) / window if window > 0 else 0.0, output_tokens=tokens,
        output_tokens_per_s=tokens / window if window > 0 else 0.0,
        acceptance_length=token_weighted_al((r.output_tokens, r.acceptance_length) for r in ok),
        ttft_s=percentiles(r.ttft_s for r in ok), itl_s=percentiles(r.itl_s for r in ok),
        e2e_s=percentiles(r.e2e_s for r in ok),
        tokens_per_s_ci=rate_ci(ok, tokens / window if window > 0 else 0.0),
        ttft_mean_ci_s=latency_ci([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl_mean_ci_s=latency_ci([r.itl_s for r in ok if r.itl_s is not None]))
