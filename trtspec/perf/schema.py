"""`results.json` of `trtspec perf` (schema "trtspec.perf/1"): what was sent, what came back, and the
aggregates the report draws.

Definitions (all times in seconds, measured on the client with `time.perf_counter`):
- TTFT: request sent -> first response that carries at least one output token.
- E2E: request sent -> final response received.
- ITL (per request, genai-perf's definition so the two tools can be compared):
  (E2E - TTFT) / (output_tokens - 1); undefined (None) for requests with fewer than 2 tokens or
  whose first token came in their final response (nothing timed after it).
- chunk gaps: the times between consecutive token-carrying responses. With speculation one response
  carries one verify round (AL tokens on average), so chunk gaps are per round, not per token.
- output_tokens: `num_output_tokens` of the final response (the server's count, not a re-tokenization;
  the end id that ends a request is not counted, as neither TensorRT-LLM's executor nor genai-perf
  counts it; trtspec.perf.metrics compares every definition with genai-perf's).
- acceptance_length (AL): the repository's `acceptance_length` output of the final response
  = tokens emitted (an end id included) / target verify steps for that request (1.0 = nothing
  accepted). A run's AL is token-weighted: sum(output_tokens) / sum(output_tokens / AL), i.e. total
  tokens over total steps (to within the end ids: output_tokens leaves them out, AL counts them).
- Throughput of a run: sum of output tokens of the successful measured requests / the measured window
  (first measured send -> last measured completion); requests/s likewise. Warm-up requests are sent
  first, are not stored and are not counted.
- Percentiles: numpy's default (linear interpolation) over the successful requests of a run.
- speedup (a Comparison): output tokens/s with speculation / output tokens/s with speculation off,
  same workload, same concurrency (or request rate), same server, same invocation.
- intervals (`*_ci`): 95% seeded bootstrap intervals over requests, defined in trtspec.perf.stats;
  optional, so results.json written before them still loads.
- order (perf.baseline): the halves of a comparison alternate which goes first, block to block and
  load point to load point; each run records its place (`sent_first`) and each comparison the order
  and the first-minus-second gap in mean TTFT where both orders occurred (trtspec.perf.order).
- sampling: the settings every request of a run carried (trtspec.perf.sampling; none = greedy), the
  same for its baseline; at temperature > 0 a Comparison's `parity` is the distribution check of
  trtspec.perf.parity (output lengths and word frequencies, two-sample tests), not token equality.
- sweep (perf.sweep, its own schema "trtspec.perf-sweep/1"): instead of the tuned routes, every
  draft setting the repository serves per workload x concurrency (trtspec.perf.sweep), each a run
  with the summary above, an acceptance-length interval and its place in each block's order of the
  settings (`sent_place`); `trtspec tune --calibrate` reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..schema_io import load_versioned

PERF_SCHEMA = "trtspec.perf/1"


class RequestRecord(BaseModel):
    """One measured request."""
    model_config = ConfigDict(extra="forbid")
    index: int  # order of sending within its run
    prompt_id: str  # the workload sample id
    start_s: float  # send time relative to the run's start
    status: Literal["ok", "error", "timeout"]
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: float | None = None
    chunk_gaps_s: list[float] = Field(default_factory=list)
    responses: int = 0  # token-carrying responses received
    output_tokens: int = 0
    acceptance_length: float | None = None
    num_draft_tokens: int | None = None  # the K the repository used (draft-target), from its outputs
    # total_draft_tokens: draft tokens the request's steps offered for verification (n-gram drafts
    # vary in length, and an empty one makes a plain one-token step; trtspec.tuning.calibrate)
    draft_tokens: int | None = Field(None, exclude_if=lambda v: v is None)
    route: str | None = None  # the repository's route label (which tuned setting served it)
    # sha256 of the streamed text_output, concatenated: equal digests for the same prompt show that the
    # server's output does not depend on load (greedy decoding; scripts/bench_soak.py checks it)
    output_sha256: str | None = None
    # perf.blocks > 1: the interleaved block this request was sent in (trtspec.perf.stats pairs a
    # speculative request with its prompt's baseline request of the same block); None: one run
    block: int | None = Field(None, exclude_if=lambda v: v is None)


class Interval(BaseModel):
    """A 95% confidence interval (trtspec.perf.stats: seeded bootstrap over requests)."""
    model_config = ConfigDict(extra="forbid")
    low: float
    high: float


class Percentiles(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class RunSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests_ok: int
    errors: int
    timeouts: int
    window_s: float
    requests_per_s: float
    output_tokens: int
    output_tokens_per_s: float
    acceptance_length: float | None = None  # token-weighted, see module docstring
    ttft_s: Percentiles
    itl_s: Percentiles
    e2e_s: Percentiles
    # 95% intervals (trtspec.perf.stats); None under 2 successful requests and in results written before them
    tokens_per_s_ci: Interval | None = None
    ttft_mean_ci_s: Interval | None = None
    itl_mean_ci_s: Interval | None = None


class Run(BaseModel):
    """One (workload, speculation on/off, load point) measurement."""
    model_config = ConfigDict(extra="forbid")
    workload: str
    speculation: bool  # False = the baseline (speculation off through the same repository)
    concurrency: int | None = None  # closed loop: requests kept in flight
    request_rate: float | None = None  # open loop: Poisson arrivals per second
    started_at: str  # ISO 8601 wall-clock time
    completed: bool  # False when the run was cut short (server died, interrupted); see error
    error: str | None = None
    requests: list[RequestRecord]
    summary: RunSummary
    sampling: dict | None = None  # trtspec.options.Sampling sent with every request (None: greedy)
    output_words: dict[str, int] | None = None  # sampled runs: word frequencies of the outputs (parity.word_counts)
    sampling_fallbacks: int = 0  # requests the repository decoded greedily although sampled (sampling_fallback)
    # with a baseline: per block (one entry for two runs in a row), whether this half went out before the
    # other mode's (trtspec.perf.order); None: no baseline, or written before the order was recorded
    sent_first: list[bool] | None = Field(None, exclude_if=lambda v: v is None)


class Parity(BaseModel):
    """Speculative vs baseline outputs of one comparison at temperature > 0 (trtspec.perf.parity)."""
    model_config = ConfigDict(extra="forbid")
    requests: int  # successful speculative requests compared
    baseline_requests: int
    lengths_ks: float  # two-sample Kolmogorov-Smirnov statistic of output tokens per request
    lengths_p: float
    words_chi2: float  # chi-square of homogeneity of word frequencies
    words_dof: int
    words_p: float
    identical_outputs: float  # fraction of speculative requests whose text equals its prompt's baseline text
    consistent: bool  # both p-values >= parity.ALPHA


class Comparison(BaseModel):
    """Speculation on vs off for one workload and load point, with the tuner's prediction."""
    model_config = ConfigDict(extra="forbid")
    workload: str
    concurrency: int | None = None
    request_rate: float | None = None
    tokens_per_s: float
    baseline_tokens_per_s: float
    speedup: float
    acceptance_length: float | None = None
    # the tuner's prediction made end to end (perf.stats.end_to_end_prediction: the baseline's TTFT and stalls kept),
    # comparable with `speedup`; predicted_step_speedup is tuning.json's own, per decode step, of the band
    # the repository serves at this load
    predicted_speedup: float | None = None
    predicted_step_speedup: float | None = None
    decode_speedup: float | None = None  # measured after the first token: baseline mean ITL / speculative mean ITL
    predicted_acceptance_length: float | None = None
    predicted_draft_len: int | None = None
    sampling: str | None = None  # Sampling.label() of both runs (None: greedy)
    accept_rule: str | None = None  # the rule tuning.json assumed for this workload, when it says
    parity: Parity | None = None  # at temperature > 0
    # 95% interval of the speedup and what it allows to say (trtspec.perf.stats); None before intervals
    speedup_ci: Interval | None = None
    verdict: str | None = None  # faster | slower | no measurable difference
    # set when the speculative run served no speculation (every request K = 0): an A/A comparison,
    # whose verdict is no measurable difference by construction (perf.compare.control_note)
    control: str | None = Field(None, exclude_if=lambda v: v is None)
    prediction_fit: str | None = None  # 'inside the measured interval' or by how much it misses
    requests_for_5pct: int | None = None  # requests per run for a ±5% speedup interval at this spread
    paired_requests: int | None = None  # interleaved blocks: spec/baseline request pairs the interval resampled
    # 95% interval of the measured acceptance length (perf.stats.al_ci, a bootstrap over requests)
    acceptance_length_ci: Interval | None = Field(None, exclude_if=lambda v: v is None)
    # the profile's standard error of the predicted acceptance length (tuning.json's band)
    predicted_acceptance_length_se: float | None = Field(None, exclude_if=lambda v: v is None)
    # {band concurrency: requests} when the requests' route labels name several tuned bands: the
    # predictions above are then the mix's (perf.compare.mixed), the draft length the commonest band's
    predicted_served_bands: dict[int, int] | None = Field(None, exclude_if=lambda v: v is None)
    # the order the halves went out in, per block: "on,off|off,on" (trtspec.perf.order); None before it was recorded
    order: str | None = Field(None, exclude_if=lambda v: v is None)
    # mean TTFT of the half sent first minus the half sent second, each order's pairs averaged apart so
    # speculation's own TTFT effect cancels, and its 95% interval (perf.order.ttft_gap); None with one order
    order_ttft_gap_s: float | None = Field(None, exclude_if=lambda v: v is None)
    order_ttft_gap_ci_s: Interval | None = Field(None, exclude_if=lambda v: v is None)


SWEEP_SCHEMA = "trtspec.perf-sweep/1"


class SweepSetting(BaseModel):
    """One draft setting the repository serves (trtspec.perf.sweep enumerates them): speculation off,
    a chain of K drafts (draft-target / EAGLE-3 model drafter, or n-gram drafting of size n), or a
    served model (an EAGLE profile's tree, an llmapi setting)."""
    model_config = ConfigDict(extra="forbid")
    label: str  # off | K=3 | K=3:ngram:n=2 | tensorrt_llm_c1_p0
    speculation: bool  # False: the request carried speculation=false (the K=0 point)
    drafter: Literal["off", "model", "ngram", "eagle", "llmapi"]
    num_draft_tokens: int  # K (an EAGLE tree: its node count)
    max_matching_ngram_size: int | None = None
    route_model: str | None = None  # EAGLE / llmapi: the served model the request was routed to
    eagle_choices: list[list[int]] | None = None  # EAGLE: that model's tree


class SweepRun(BaseModel):
    """One (workload, concurrency, setting) measurement of the sweep; the summary as a Run's, plus
    the 95% interval of the token-weighted acceptance length (bootstrap over requests)."""
    model_config = ConfigDict(extra="forbid")
    workload: str
    concurrency: int
    setting: SweepSetting
    started_at: str
    completed: bool
    error: str | None = None
    requests: list[RequestRecord]
    summary: RunSummary
    acceptance_length_ci: Interval | None = None
    # mean draft tokens verified per target step (sum of draft_tokens / sum of output tokens / AL):
    # below K where drafts were shorter or empty (n-gram); None when the server reports none
    draft_tokens_per_step: float | None = None
    # per block, this setting's place in the order its load point's settings went out (0: first; they
    # alternate forward and reversed, trtspec.perf.order.forward); None: written before it was recorded
    sent_place: list[int] | None = Field(None, exclude_if=lambda v: not v)


class Sweep(BaseModel):
    """`trtspec perf --sweep`: every served setting per workload x concurrency, the data that
    `trtspec tune --calibrate` fits the step-time model to (schema "trtspec.perf-sweep/1")."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_id: Literal["trtspec.perf-sweep/1"] = Field(SWEEP_SCHEMA, alias="schema")
    mode: str  # the repository's routing mode: draft-target | ngram | eagle3 | eagle | llmapi
    max_draft_len: int | None = None  # chain repositories: the largest K its spec_decode takes
    # whether the server steps its requests together (triton_repo.flavors.in_flight_batching), from
    # the repository's routing; None: a repository written before it was recorded
    in_flight_batching: bool | None = None
    runs: list[SweepRun] = Field(default_factory=list)


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    model: str
    workloads: dict[str, str]  # name -> source, as given on the command line
    concurrency: list[int] = Field(default_factory=list)
    request_rate: float | None = None
    requests: int | None = None  # per run
    duration_s: float | None = None  # per run
    warmup: int
    timeout_s: float
    max_tokens: int
    baseline: bool
    seed: int
    tuning: str | None = None  # tuning.json the predictions came from
    processes: int = 1  # client processes that shared each run's load (trtspec perf --processes)
    blocks: int = 1  # speculation on/off interleaved in this many blocks per load point (1: two runs)
    sampling: dict[str, dict] = Field(default_factory=dict)  # workload -> Sampling sent (absent: greedy)
    sweep: bool = Field(False, exclude_if=lambda v: not v)  # runs are the sweep's (PerfResults.sweep)


class PerfResults(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_id: Literal["trtspec.perf/1"] = Field(PERF_SCHEMA, alias="schema")
    created: str  # ISO 8601
    trtspec_version: str
    settings: Settings
    completed: bool  # every planned run finished
    error: str | None = None  # why not
    runs: list[Run]
    comparisons: list[Comparison] = Field(default_factory=list)
    sweep: Sweep | None = Field(None, exclude_if=lambda v: v is None)  # perf.sweep


def load_results(path: Path) -> PerfResults:
    """Read and validate results.json; errors are one line naming the file and field."""
    return load_versioned(path, PerfResults, PERF_SCHEMA, "perf results")


def dump_results(results: PerfResults) -> str:
    return results.model_dump_json(by_alias=True, indent=1) + "\n"
