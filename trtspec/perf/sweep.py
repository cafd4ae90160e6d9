"""`trtspec perf --sweep`: every draft setting a repository serves, measured per workload x concurrency.

Why: the tuner predicts tokens/s from a step-time model (trtspec.tuning.cost) whose numbers are
nominal until fitted; the deployment itself (TensorRT-LLM's kernels on the user's GPU, or the cpu
flavor here) is the only ground truth. Measuring every setting it can serve gives, per point, the
acceptance length (AL) and tokens/s the calibration needs (`trtspec tune --calibrate`, which reads
results.json's `sweep` section: trtspec.tuning.calibrate).

What "can serve" means, read from the running server (the `routing` parameter of `generate`, the
same table the repository routes by; spec_decode's `max_draft_len`):
- chain repositories (draft-target, n-gram, EAGLE-3 chains: K is a per-request setting of
  spec_decode): speculation off (speculation=false, the K=0 point), then K = 1..max_draft_len of the
  workload's drafter: the draft model, or n-gram drafting at the workload's route's matching size;
- EAGLE (eagle_choices is per model) and llmapi (max_draft_len is per LLM instance): each served
  model, one point each. An EAGLE engine always drafts, so there is no off point there.
Each request carries the setting as request parameters (serving_rules.SWEEP_*: no model config
changes), which `generate` honours instead of the workload's tuned route (serving_rules.swept_route).
With perf.blocks > 1 the settings of a load point are sent block by block, forward and reverse order
by turns, the next load point starting the other way (runner._sweep, `schedule`, order.forward): a
drift of the machine's load, or a cache the first setting warms, then costs every setting alike.
Each run records its place in every block's order (`sent_place`, 0: sent first), shown in the
report's sweep table.
A point whose server reports no acceptance (llmapi) is kept; the calibration skips it and says so.
"""

from __future__ import annotations

import json
from html import escape
from typing import Sequence

from tritonclient.grpc.aio import InferenceServerClient
from tritonclient.utils import InferenceServerException

from ..confidence import interval_text
from ..errors import TrtspecError
from ..triton_repo.models.serving_rules import (CHAIN_MODES, SWEEP_K, SWEEP_MODEL, SWEEP_NGRAM, chain_setting,
                                                 served_models)
from ..upstream.trtllm import NGRAM_DEFAULT_MAX_MATCHING_NGRAM_SIZE
from .schema import Interval, RequestRecord, Sweep, SweepRun, SweepSetting
from .stats import al_ci, summarize

OFF = SweepSetting(label="off", speculation=False, drafter="off", num_draft_tokens=0)


def _route_bands(routing: dict, workload: str) -> list[dict]:
    """The chain bands serving `workload` (its own, else the default route's)."""
    own = routing.get("workloads", {}).get(workload)
    return own if own is not None else routing.get("default", {}).get("bands", [])


def _ngram_size(routing: dict, workload: str) -> int | None:
    """The matching size n-gram drafting runs at for this workload: its route's, else (a repository
    drafting n-grams only, whose route for it is off: mode ngram, or a drafter choice that left the
    draft model out, routing `drafter` ngram, triton_repo/repo.py) the one most routes use, else
    upstream's default."""
    own = [b["max_matching_ngram_size"] for b in _route_bands(routing, workload) if "max_matching_ngram_size" in b]
    if own:
        return int(own[0])
    if routing["mode"] != "ngram" and routing.get("drafter") != "ngram":
        return None
    every = [b["max_matching_ngram_size"] for bands in routing.get("workloads", {}).values() for b in bands
             if "max_matching_ngram_size" in b]
    return int(max(set(every), key=every.count)) if every else NGRAM_DEFAULT_MAX_MATCHING_NGRAM_SIZE


def chain_max_k(routing: dict, max_draft_len: int | None) -> int:
    """The largest K to sweep: spec_decode's bound (0 there means unbounded: then the largest K routed)."""
    if max_draft_len:
        return int(max_draft_len)
    bands = [b for bs in routing.get("workloads", {}).values() for b in bs] + routing.get("default", {}).get("bands", [])
    return max((int(b["num_draft_tokens"]) for b in bands), default=0)


def settings_for(routing: dict, workload: str, max_draft_len: int | None = None) -> list[SweepSetting]:
    """Every setting the repository serves to `workload`, cheapest first (module docstring)."""
    mode = routing["mode"]
    if mode in CHAIN_MODES:
        n = _ngram_size(routing, workload)
        drafter = "ngram" if n is not None else "model"
        return [OFF] + [SweepSetting(label=chain_setting(k, n), speculation=True,
                                     drafter=drafter, num_draft_tokens=k, max_matching_ngram_size=n)
                        for k in range(1, chain_max_k(routing, max_draft_len) + 1)]
    if mode == "eagle":
        return [SweepSetting(label=m["model"], speculation=True, drafter="eagle", num_draft_tokens=len(m["eagle_choices"]),
                             route_model=m["model"], eagle_choices=m["eagle_choices"])
                for m in sorted(routing.get("models", []), key=lambda m: (len(m["eagle_choices"]), m["model"]))]
    ngram = {e["model"]: e.get("max_matching_ngram_size") for e in
             list(routing.get("workloads", {}).values()) + [routing.get("default", {})] if "model" in e}
    models = sorted(served_models(routing).items(), key=lambda mk: (mk[1], mk[0]))
    return [SweepSetting(label=name, speculation=True, drafter="llmapi" if k else "off", num_draft_tokens=k,
                         max_matching_ngram_size=ngram.get(name), route_model=name) for name, k in models]


def schedule(requests: int, blocks: int) -> list[tuple[int, range]]:
    """(block, indices of the requests it sends per setting): near-equal blocks, the same requests
    for every setting of a block (runner._sweep sends them forward or reversed: order.forward)."""
    blocks = max(1, min(blocks, requests))
    edges = [round(j * requests / blocks) for j in range(blocks + 1)]
    return [(j, range(edges[j], edges[j + 1])) for j in range(blocks)]


def with_setting(request, setting: SweepSetting):
    """A copy of a prompt's request message carrying the setting's sweep parameters."""
    req = type(request)()
    req.CopyFrom(request)
    if setting.route_model is not None:
        req.parameters[SWEEP_MODEL].string_param = setting.route_model
    elif setting.speculation:
        req.parameters[SWEEP_K].int64_param = setting.num_draft_tokens
        if setting.max_matching_ngram_size is not None:
            req.parameters[SWEEP_NGRAM].int64_param = setting.max_matching_ngram_size
    return req


async def served(url: str, model: str, timeout_s: float) -> tuple[dict, int | None]:
    """(generate's routing table, spec_decode's max_draft_len or None) of the server at `url`."""
    client = InferenceServerClient(url)
    try:
        cfg = (await client.get_model_config(model, as_json=True, client_timeout=timeout_s))["config"]
        text = ((cfg.get("parameters") or {}).get("routing") or {}).get("string_value")
        if not text:
            raise TrtspecError(f"perf.sweep: model {model!r} at {url} has no 'routing' parameter (not a trtspec "
                               "repository's generate), so its served settings are unknown")
        routing = json.loads(text)
        max_k = None
        if routing["mode"] in CHAIN_MODES:
            try:
                spec = (await client.get_model_config("spec_decode", as_json=True, client_timeout=timeout_s))["config"]
                max_k = int(((spec.get("parameters") or {}).get("max_draft_len") or {}).get("string_value") or 0)
            except InferenceServerException:
                max_k = None
        return routing, max_k
    finally:
        await client.close()


def draft_tokens_per_step(records: Sequence[RequestRecord]) -> float | None:
    """Draft tokens verified per target step over the successful requests that report both."""
    rs = [r for r in records if r.status == "ok" and r.draft_tokens is not None and r.acceptance_length
          and r.output_tokens > 0]
    steps = sum(r.output_tokens / r.acceptance_length for r in rs)
    return sum(r.draft_tokens for r in rs) / steps if steps else None


def sweep_run(workload: str, concurrency: int, setting: SweepSetting, started_at: str, records: list[RequestRecord],
              error: str | None, sent_place: list[int] | None = None) -> SweepRun:
    """sent_place: per block, the setting's place in the order its load point's settings went out."""
    return SweepRun(workload=workload, concurrency=concurrency, setting=setting, started_at=started_at,
                    completed=error is None, error=error, requests=records, summary=summarize(records),
                    acceptance_length_ci=al_ci(records), draft_tokens_per_step=draft_tokens_per_step(records),
                    sent_place=sent_place or None)


def new_sweep(routing: dict, max_k: int | None) -> Sweep:
    return Sweep(mode=routing["mode"], max_draft_len=max_k, in_flight_batching=routing.get("in_flight_batching"))


def sweep_lines(sweep: Sweep) -> list[str]:
    """One line per sweep point for the terminal: tokens/s and AL with their intervals, ITL."""
    out = []
    for run in sweep.runs:
        s = run.summary
        al = (f"{s.acceptance_length:.2f} " + interval_text(run.acceptance_length_ci, ".2f")
              if s.acceptance_length else "-")
        itl = f"{s.itl_s.mean * 1e3:.1f} ms" if s.itl_s.mean is not None else "-"
        tps = f"{s.output_tokens_per_s:8.1f} " + interval_text(s.tokens_per_s_ci, ".1f")
        out.append(f"sweep {run.workload:<10} c={run.concurrency:<3} {run.setting.label:<18} {tps} tok/s  "
                   f"AL {al}  ITL {itl}  errors {s.errors} timeouts {s.timeouts}")
    return out


def _cell(v: float | None, ci: Interval | None, spec: str, scale: float = 1.0) -> str:
    """A value with its 95% interval, '±?' where it has none (confidence.interval_text)."""
    if v is None:
        return "<td>-</td>"
    return f"<td>{escape(f'{v * scale:{spec}} ' + interval_text(ci, spec, scale))}</td>"


def sweep_html(sweep: Sweep) -> str:
    """report.html's sweep table: per point tokens/s, AL and mean ITL with their 95% intervals."""
    placed = any(r.sent_place for r in sweep.runs)  # results.json written before places were recorded: none
    head = ('<tr><th class="l">workload</th><th>conc.</th><th class="l">setting</th><th>ok</th><th>errors</th>'
            "<th>tok/s [95%]</th><th>AL [95%]</th><th>ITL mean ms [95%]</th>"
            + ("<th>sent (per block)</th>" if placed else "") + "</tr>")
    rows = []
    for r in sweep.runs:
        s = r.summary
        place = "|".join(str(p + 1) for p in r.sent_place or []) or "-"
        rows.append(f'<tr><td class="l">{escape(r.workload)}</td><td>{r.concurrency}</td>'
                    f'<td class="l">{escape(r.setting.label)}</td><td>{s.requests_ok}</td><td>{s.errors + s.timeouts}</td>'
                    + _cell(s.output_tokens_per_s, s.tokens_per_s_ci, ".1f")
                    + _cell(s.acceptance_length, r.acceptance_length_ci, ".2f")
                    + _cell(s.itl_s.mean, s.itl_mean_ci_s, ".1f", 1e3)
                    + (f"<td>{place}</td>" if placed else "") + "</tr>")
    note = ('<p class="muted">Every setting the repository serves (trtspec/perf/sweep.py); '
            "<code>trtspec tune --calibrate results.json</code> fits the step-time model to these points."
            + (" Sent: the setting's place among its load point's settings in each block (1: first; the "
               "order alternates forward and reversed)." if placed else "") + "</p>")
    return '<table id="sweep">' + head + "".join(rows) + "</table>" + note
