"""Per-request metrics of `trtspec perf`, each next to genai-perf's (0.0.16, the version
`--export-genai-perf` reproduces; `genai_perf/profile_data_parser/llm_profile_data_parser.py`,
`LLMProfileDataParser._parse_requests` and `_get_output_token_counts`, over perf_analyzer's
per-response timestamps). Our client (perf.client) asks for Triton's empty final response, and
perf_analyzer records it too (scripts/bench_genai_perf.py reads it in profile_export.json), so both
tools see the same responses:

- E2E: request sent -> final response. genai-perf: the last recorded response, the same one.
- TTFT: request sent -> first response that carries a token (perf.client._token_progress: the
  server's num_output_tokens grew, or, without that output, text_output is not empty).
  genai-perf: the first recorded response, whatever its text. The same response for a trtspec
  repository's `generate`, which sends a response only with new text, except the one that ends a
  stream (below); they differ only for a request with no text at all (genai-perf: TTFT = E2E).
- output tokens: the server's num_output_tokens of the last response. genai-perf re-tokenizes the
  streamed text (its tokenizer, no special tokens), which can split it other than the generated ids
  did. Neither counts the end id that ends a request (genai-perf's text has none: postprocessing
  drops it). The chain flavors count the engine's tokens: TensorRT-LLM's executor (engine flow,
  1.2) returns no end id, since its sequence length leaves it out and the batch manager adds only
  the tokens within that length (TrtGptModelInflightBatching::updateRequests), and the cpu
  flavor's models follow it (executor_tokens: its `tensorrt_llm` models and spec_decode's
  in-process engine alike). The llmapi flavor counts the text's tokens as genai-perf does (its
  last, empty-text response restates the whole text's count): the PyTorch backend's own token_ids
  end with the end id (TorchSampler adds a token before its stop check), but that model returns
  only text, whose detokenizer skips the end id. A round that produced only the end id is inside
  E2E - TTFT and brings no token (its response carries the final counters only), as in
  genai-perf's data; the acceptance length still counts that round's step (trtspec/runtime/stats.py).
- ITL: (E2E - TTFT) / (output tokens - 1), genai-perf's formula: the mean time per token after the
  first, so the timestamps of the responses in between do not enter it.
  Undefined under 2 tokens, and when nothing was timed after the first token (its response was the
  final one: an unstreamed answer; genai-perf requires 2 responses), where it would read 0.
  A run's ITL: mean and percentiles over requests, as genai-perf's Statistics (np.percentile, linear).
- chunk gaps (ours; genai-perf keeps a similar series for plots only): the times between consecutive
  token-carrying responses, one per verify round (but a round that brought only the end id, which
  carries none). The llmapi flavor's restated count is a token arrival only when it exceeds the
  per-piece total (seldom: per-piece counts over-count), and then adds a near-zero gap.

A run (perf.stats.summarize; genai-perf's _parse_requests and _calculate_throughput_metrics):
- output tokens/s: the successful requests' tokens / window, first measured send -> last successful
  completion. genai-perf: all output lengths / first send -> last response. The same window and
  total when every request succeeds; the per-request counts as above.
- requests/s: successful requests / that window; genai-perf: every request / its duration.
- errors and timeouts: counted apart, out of every latency and of the token total (a failed
  request's send may open the window, never close it). perf_analyzer sets no per-request timeout
  and fails the measurement on an error, so genai-perf's figures hold neither.
- warm-up requests are left out by both. genai-perf also reports time to second token and
  1 / ITL per request ("tokens/sec/user"), which we do not.
"""

from __future__ import annotations

from .client import Result
from .schema import RequestRecord


def itl(e2e_s: float | None, ttft_s: float | None, output_tokens: int) -> float | None:
    """(E2E - TTFT) / (tokens - 1); None under 2 tokens or with no time after the first token."""
    if e2e_s is None or ttft_s is None or output_tokens < 2 or e2e_s <= ttft_s:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


def to_record(index: int, r: Result, run_start: float, block: int | None = None) -> RequestRecord:
    """A measured Result as its schema record (times relative to the run's start)."""
    gaps = [b - a for a, b in zip(r.token_times, r.token_times[1:])]
    ok = r.status == "ok"
    return RequestRecord.model_construct(
        index=index, prompt_id=r.prompt_id, start_s=r.start - run_start, status=r.status, error=r.error,
        ttft_s=r.ttft if ok else None, e2e_s=r.e2e if ok else None,
        itl_s=itl(r.e2e, r.ttft, r.output_tokens) if ok else None, chunk_gaps_s=gaps if ok else [],
        responses=len(r.token_times), output_tokens=r.output_tokens, acceptance_length=r.acceptance_length,
        num_draft_tokens=r.num_draft_tokens, draft_tokens=r.draft_tokens, route=r.route,
        output_sha256=r.output_sha256 if ok else None, block=block)
