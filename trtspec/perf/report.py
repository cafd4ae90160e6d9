"""report.html of a `trtspec perf` run: one self-contained page (inline CSS, plots as base64 PNGs,
no scripts, fonts or links to fetch) that can be mailed or opened on a host with no network.

Order: a headline per workload and load point (tokens/s with and without speculation, measured vs
predicted speedup and acceptance length, each measured number with its 95% interval), the six
figures, per-run tables, errors, settings. A speedup is coloured as a win or loss only when its
interval excludes 1 (trtspec.perf.stats.verdict); otherwise it reads "no measurable difference", as
does a comparison in which no speculation was served (an A/A control: perf.compare.control_note).
Everything is derived from results.json (trtspec/perf/schema.py has the metric definitions) and,
when given, tuning.json. Partial results render: a figure that cannot be drawn is replaced by a
sentence saying why, so a crashed or interrupted perf run still gets a readable report; one cut short
opens with a banner (the reason, runs finished of those planned, load points compared) and shows no
speedup where a half was cut (trtspec.perf.incomplete).
All strings that came from the user or the server (workload names, errors, URLs) are escaped.
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from ..confidence import interval_text
from ..fsutil import write_text_atomic
from . import plots
from .compare import (claim_unit, load_predictions, order_note, predicted_al_pm, prediction_text, ratio_fmt,
                      step_differs)
from .headline import Headline, has_successes, headlines, load_label, run_ci
from .incomplete import banner as incomplete_banner, is_partial
from .sweep import sweep_html
from .schema import Interval, PerfResults, Run, load_results
from .stats import prediction_fit, requests_for

# id -> (title, alt text). Ids are stable: tests and users link to them.
FIGURES = {
    "plot-throughput": ("Throughput vs load", "output tokens/s against concurrency, speculation vs baseline, "
                                              "per workload, with 95% intervals"),
    "plot-ttft": ("Time to first token", "CDF of TTFT per workload, speculation vs baseline"),
    "plot-itl": ("Inter-token latency", "CDF of per-request ITL per workload, speculation vs baseline"),
    "plot-acceptance": ("Acceptance length", "measured acceptance length per workload and load point, "
                                             "predicted from tuning.json as black ticks"),
    "plot-speedup": ("Speedup vs baseline", "output tokens/s with speculation / without, per workload and "
                                            "load point, with 95% intervals"),
    "plot-predicted-vs-measured": ("Predicted vs measured speedup", "tuning.json predicted speedup (made end to "
                                                                    "end with the baseline's TTFT) against the "
                                                                    "measured speedup and its 95% interval, with "
                                                                    "the y = x line"),
}


# ---- figures ------------------------------------------------------------------------------------

def _x_axis(results: PerfResults) -> tuple[str, callable]:
    if any(r.concurrency is not None for r in results.runs):
        return "concurrency (requests in flight)", lambda r: r.concurrency
    return "request rate (requests/s)", lambda r: r.request_rate


def _kind(run: Run) -> str:
    return plots.SPEC if run.speculation else plots.BASE


def figure_data(results: PerfResults, heads: list[Headline]) -> dict[str, callable]:
    """id -> a thunk that draws the figure (PNG bytes) or raises plots.NoPlot."""
    xlabel, xof = _x_axis(results)
    tp: dict = {}
    ttft: dict = {}
    itl: dict = {}
    for r in results.runs:
        tp.setdefault(r.workload, {})
        ttft.setdefault(r.workload, {})
        itl.setdefault(r.workload, {})
        if has_successes(r) and xof(r) is not None:
            ci = run_ci(r, r.summary.output_tokens_per_s)
            tp[r.workload].setdefault(_kind(r), []).append((xof(r), r.summary.output_tokens_per_s,
                                                            (ci.low, ci.high) if ci else None))
        ok = [q for q in r.requests if q.status == "ok"]
        ttft[r.workload][(_kind(r), load_label(r))] = [q.ttft_s for q in ok if q.ttft_s is not None]
        itl[r.workload][(_kind(r), load_label(r))] = [q.itl_s for q in ok if q.itl_s is not None]
    al: dict = {}
    sp: dict = {}
    for h in heads:
        al_interval = (h.acceptance_length_ci.low, h.acceptance_length_ci.high) if h.acceptance_length_ci else None
        al.setdefault(h.workload, []).append((h.load, h.acceptance_length, h.prediction.acceptance_length,
                                              al_interval))
        c, speedup = h.comparison, _speedup(h)
        ci = (c.speedup_ci.low, c.speedup_ci.high) if c is not None and c.speedup_ci is not None else None
        sp.setdefault(h.workload, []).append((h.load, speedup, h.prediction.speedup if speedup else None, ci))
    no_base = not any(not r.speculation and has_successes(r) for r in results.runs)
    no_spec = not any(r.speculation and has_successes(r) for r in results.runs)
    why_speedup = ("no baseline run (speculation off) finished with successful requests"
                   + (" (settings.baseline is false)" if not results.settings.baseline else "")
                   + ", so there is no speedup to show." if no_base else
                   "no speculation run finished with successful requests." if no_spec else
                   "no workload has a speculation run and a baseline run at the same load.")
    if all(h.prediction.speedup is None for h in heads):
        why_pred = "no tuning.json was given (--tuning) and results.json holds no predictions."
    else:
        why_pred = why_speedup if all(h.comparison is None for h in heads) else \
            "no load point has both a measured speedup and a prediction."
    pvm = [(h.workload, h.load, h.prediction.speedup, h.comparison.speedup,
            (h.comparison.speedup_ci.low, h.comparison.speedup_ci.high) if h.comparison.speedup_ci else None)
           for h in heads if h.comparison is not None and h.prediction.speedup is not None]
    return {
        "plot-throughput": lambda: plots.throughput(tp, xlabel),
        "plot-ttft": lambda: plots.cdf(ttft, "TTFT"),
        "plot-itl": lambda: plots.cdf(itl, "ITL"),
        "plot-acceptance": lambda: plots.bars(
            al, "acceptance length (tokens / verify step)", "acceptance length per workload",
            "predicted (tuning.json)",
            why_empty="no speculation run reported an acceptance length"
                      + ("" if no_spec else " (the server's acceptance_length output was absent)") + "."),
        "plot-speedup": lambda: plots.bars(sp, "speedup (x)", "speedup vs baseline (red: 1.0)",
                                           "predicted (tuning.json, end to end)", ref_line=1.0, why_empty=why_speedup),
        "plot-predicted-vs-measured": lambda: (_raise(why_pred) if not pvm else plots.predicted_vs_measured(pvm)),
    }


def _raise(why: str):
    raise plots.NoPlot(why)


# ---- HTML ---------------------------------------------------------------------------------------

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em} th,td{border:1px solid #ddd;padding:.3em .6em;
text-align:right} th{background:#f4f4f4} td.l,th.l{text-align:left}
.big{font-size:1.25em;font-weight:600} .good{color:#1a7f37} .bad{color:#c62828} .muted{color:#777}
.neutral{color:#222} .ci{font-size:.8em;font-weight:400;color:#777}
.banner{background:#fff3cd;border:1px solid #e0c060;padding:.6em 1em;margin:1em 0}
.incomplete{background:#fdecea;border:2px solid #c62828;font-size:1.1em}
figure{margin:1em 0} figcaption{font-weight:600;margin-bottom:.3em} img{max-width:100%}
.missing{background:#f6f6f6;border:1px dashed #aaa;padding:1em;color:#555}
code{background:#f4f4f4;padding:0 .2em} .scroll{overflow-x:auto;max-width:100%}
"""


def _num(v, fmt: str = "{:.1f}", suffix: str = "") -> str:
    return '<span class="muted">n/a</span>' if v is None else escape(fmt.format(v) + suffix)


def _ms(v) -> str:
    return _num(None if v is None else v * 1e3, "{:.1f}")


def _ci(value, ci: Interval | None, spec: str = ".1f", suffix: str = "") -> str:
    """The 95% interval after a measured value; '±?' where it has none (confidence.interval_text),
    so that it does not read as exact; nothing after no value."""
    if value is None:
        return ""
    return f' <span class="ci">{escape(interval_text(ci, spec, suffix=suffix))}</span>'


VERDICT_CLASS = {"faster": "good", "slower": "bad"}  # no measurable difference: neutral, never a win or loss


def _speedup(h: Headline) -> float | None:
    return h.comparison.speedup if h.comparison is not None else None


def _speed_cls(h: Headline) -> str:
    verdict = h.comparison.verdict if h.comparison is not None else None
    return "" if verdict is None else " " + VERDICT_CLASS.get(verdict, "neutral")


def _speed_note(h: Headline) -> str:
    """Verdict, where the prediction lies against the interval, requests for a ±5% claim, and whether
    the order the halves went out in measurably moved TTFT (compare.order_note)."""
    c, p = h.comparison, h.prediction
    if h.cut:
        return escape(f"not compared: {h.cut}")
    if c is None:
        return ""
    if c.speedup_ci is None and not c.control:
        return '<span class="muted">too few requests for an interval</span>'
    parts = [c.verdict] + ([c.control] if c.control else [])
    fit = prediction_fit(p.speedup, c.speedup_ci)
    if fit:
        parts.append(f"predicted {prediction_text(p.speedup, p.step_speedup)} {fit}")
    need = requests_for(c.speedup_ci, c.speedup, h.requests)
    if need is not None:
        parts.append(f"±5% needs ~{need} {claim_unit(c.paired_requests is not None)} (measured {h.requests})")
    return escape("; ".join(parts + [order_note(c)] if order_note(c) else parts))


def _per_step(h: Headline) -> str:
    """The tuner's per-step speedup under the end-to-end one, when they differ."""
    p = h.prediction
    if not step_differs(p.speedup, p.step_speedup):
        return ""
    return f'<br><span class="muted">{p.step_speedup:.2f}x per step</span>'


def _pm(h: Headline) -> str:
    """The ± under a predicted AL (compare.predicted_al_pm: '±?' where its standard error is unknown)."""
    p = h.prediction
    pm = predicted_al_pm(p.acceptance_length, p.acceptance_length_se, p.draft_len)
    return f' <span class="ci">{escape(pm.strip())}</span>' if pm else ""


def _per(h: Headline) -> str:
    """' per request' beside an open loop's rates (tokens / E2E), which differ from the throughput
    figure's tokens / window."""
    return ' <span class="ci">per request</span>' if h.per_request else ""


def _headline_table(heads: list[Headline]) -> str:
    rows = []
    for h in heads:
        c, p = h.comparison, h.prediction
        rows.append(
            f'<tr class="headline" data-workload="{escape(h.workload)}" data-load="{escape(h.load)}">'
            f'<td class="l big">{escape(h.workload)}</td><td class="l">{escape(h.load)}</td>'
            f'<td class="big" data-k="tokens_per_s">{_num(h.tokens_per_s)}{_ci(h.tokens_per_s, h.tokens_per_s_ci)}'
            f'{_per(h)}</td><td data-k="baseline_tokens_per_s">{_num(h.baseline_tokens_per_s)}'
            f'{_ci(h.baseline_tokens_per_s, h.baseline_tokens_per_s_ci)}{_per(h)}</td>'
            f'<td class="big{_speed_cls(h)}" data-k="speedup">{_num(_speedup(h), "{:.2f}", "x")}'
            f'{_ci(_speedup(h), c and c.speedup_ci, ratio_fmt(c and c.speedup_ci), "x")}</td>'
            f'<td data-k="predicted_speedup">{_num(p.speedup, "{:.2f}", "x")}{_per_step(h)}</td>'
            f'<td data-k="acceptance_length">{_num(h.acceptance_length, "{:.2f}")}'
            f'{_ci(h.acceptance_length, h.acceptance_length_ci, ".2f")}</td>'
            f'<td data-k="predicted_acceptance_length">{_num(p.acceptance_length, "{:.2f}")}{_pm(h)}</td>'
            f'<td data-k="predicted_draft_len">{_num(p.draft_len, "{}")}</td>'
            f'<td class="l" data-k="verdict">{_speed_note(h)}</td></tr>')
    return ('<table id="headline"><tr><th class="l">workload</th><th class="l">load</th><th>tokens/s (tuned)</th>'
            '<th>tokens/s (baseline)</th><th>speedup measured</th><th>speedup predicted (end to end)</th><th>AL measured</th>'
            '<th>AL predicted</th><th>K predicted</th><th class="l">verdict (95% interval)</th></tr>'
            + "".join(rows) + "</table>")


def _figure(fid: str, draw) -> str:
    title, alt = FIGURES[fid]
    try:
        png = draw()
    except plots.NoPlot as e:
        return (f'<figure id="fig-{fid}"><figcaption>{escape(title)}</figcaption>'
                f'<div class="missing" id="{fid}-missing">Not shown: {escape(str(e))}</div></figure>')
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="fig-{fid}"><figcaption>{escape(title)}</figcaption>'
            f'<img id="{fid}" alt="{escape(alt)}" src="data:image/png;base64,{data}"></figure>')


def _run_table(results: PerfResults) -> str:
    head = ('<tr><th class="l">workload</th><th class="l">speculation</th><th class="l">load</th><th>ok</th>'
            '<th>errors</th><th>timeouts</th><th>req/s</th><th>tok/s</th><th>AL</th>'
            + "".join(f"<th>{m} p{p} (ms)</th>" for m in ("TTFT", "ITL", "E2E") for p in (50, 90, 99))
            + "<th>tok/s 95% CI</th><th>TTFT mean 95% CI (ms)</th><th>ITL mean 95% CI (ms)</th>"
            + '<th class="l">completed</th></tr>')
    rows = []
    for r in results.runs:
        s = r.summary
        pct = "".join(f"<td>{_ms(getattr(getattr(s, m), p))}</td>" for m in ("ttft_s", "itl_s", "e2e_s")
                      for p in ("p50", "p90", "p99"))
        cis = "".join(f"<td>{_ci_cell(ci, scale)}</td>" for ci, scale in (
            (run_ci(r, s.output_tokens_per_s), 1.0), (s.ttft_mean_ci_s, 1e3), (s.itl_mean_ci_s, 1e3)))
        bad = ' class="bad"' if s.errors or s.timeouts else ""
        rows.append(f'<tr><td class="l">{escape(r.workload)}</td><td class="l">{"on" if r.speculation else "off"}'
                    f'</td><td class="l">{escape(load_label(r))}</td><td>{s.requests_ok}</td><td{bad}>{s.errors}</td>'
                    f'<td{bad}>{s.timeouts}</td><td>{_num(s.requests_per_s, "{:.2f}")}</td>'
                    f'<td>{_num(s.output_tokens_per_s)}</td><td>{_num(s.acceptance_length, "{:.2f}")}</td>{pct}{cis}'
                    f'<td class="l{"" if r.completed else " bad"}">{"yes" if r.completed else "no"}</td></tr>')
    return '<div class="scroll"><table id="runs">' + head + "".join(rows) + "</table></div>"  # 22 columns


def _ci_cell(ci: Interval | None, scale: float) -> str:
    return _num(None) if ci is None else escape(f"{ci.low * scale:.1f} - {ci.high * scale:.1f}")


def _errors(results: PerfResults) -> str:
    """Distinct error messages per run with their counts (a thousand identical timeouts are one line)."""
    items = []
    for r in results.runs:
        counts: dict[str, int] = {}
        if r.error:
            counts[f"run stopped: {r.error}"] = 1
        for q in r.requests:
            if q.status != "ok":
                msg = f"{q.status}: {q.error or 'no message'}"
                counts[msg] = counts.get(msg, 0) + 1
        for msg, n in counts.items():
            items.append(f"<li><b>{escape(r.workload)}</b> ({'spec' if r.speculation else 'baseline'}, "
                         f"{escape(load_label(r))}): {escape(msg)}{f' &times; {n}' if n > 1 else ''}</li>")
    if not items:
        return '<p id="errors">No errors or timeouts.</p>'
    return '<ul id="errors">' + "".join(items) + "</ul>"


def _parity(results: PerfResults) -> str:
    """Sampled comparisons: the distribution check of speculative vs baseline outputs (perf.parity)."""
    rows = []
    cut = {(r.workload, load_label(r)) for r in results.runs if not r.completed}
    for c in results.comparisons:
        q = c.parity
        if q is None or (c.workload, load_label(c)) in cut:  # recorded before cut halves were left out
            continue
        verdict = "consistent" if q.consistent else "DIFFERENT"
        rows.append(f'<tr><td class="l">{escape(c.workload)}</td><td class="l">{escape(load_label(c))}</td>'
                    f'<td class="l">{escape(c.sampling or "")}</td><td class="l">{escape(c.accept_rule or "-")}</td>'
                    f"<td>{q.requests}/{q.baseline_requests}</td><td>{q.lengths_p:.3g}</td><td>{q.words_p:.3g}</td>"
                    f'<td>{q.identical_outputs:.0%}</td><td class="l{"" if q.consistent else " bad"}">{verdict}</td>'
                    "</tr>")
    if not rows:
        return ""
    head = ("<tr><th class='l'>workload</th><th class='l'>load</th><th class='l'>sampling</th>"
            "<th class='l'>accept rule (tuning)</th><th>requests spec/base</th><th>lengths KS p</th>"
            "<th>words &chi;&sup2; p</th><th>identical outputs</th><th class='l'>verdict</th></tr>")
    return ("<h2>Quality parity (temperature &gt; 0)</h2>"
            '<p class="muted">Speculative vs baseline outputs as distributions (two-sample tests; small p: they '
            "differ), not token equality: lossless rules keep p large, lossy ones "
            "(exact_match_resample, typical acceptance) shift it.</p>"
            f'<table id="parity">{head}{"".join(rows)}</table>')


def _settings(results: PerfResults, tuning_path: str | None) -> str:
    s = results.settings.model_dump()
    s["workloads"] = ", ".join(f"{k}={v}" for k, v in results.settings.workloads.items())
    s["concurrency"] = ", ".join(str(c) for c in results.settings.concurrency) or None
    if tuning_path:
        s["tuning (report)"] = tuning_path
    s["trtspec_version"], s["created"] = results.trtspec_version, results.created
    rows = "".join(f'<tr><th class="l">{escape(k)}</th><td class="l">{escape("" if v is None else str(v))}</td></tr>'
                   for k, v in s.items())
    return f'<table id="settings">{rows}</table>'


def render_report(results: PerfResults, tuning=None, tuning_path: str | None = None) -> str:
    """The whole report.html as a string (pure: no files read or written)."""
    heads = headlines(results, tuning)
    st = results.settings
    banner = incomplete_banner(results)
    if not results.runs and results.sweep is None:
        banner += '<div class="banner" id="no-runs">results.json holds no runs.</div>'
    figures = figure_data(results, heads)
    body = [
        f"<h1>trtspec perf: {escape(st.model)}</h1>",
        banner,
        f'<p class="muted">{escape(st.url)} &middot; {escape(results.created)} &middot; max_tokens {st.max_tokens}'
        f" &middot; {len(results.runs)} runs</p>",
        "<h2>Headline</h2>",
        _headline_table(heads) if heads else '<p class="missing">No runs to summarise.</p>',
        '<p class="muted">speedup = output tokens/s with speculation / without, same workload and load (open loop: per '
        "request, tokens / E2E, as both runs are offered the same arrivals; the throughput figure shows "
        "tokens / window). "
        "AL = tokens per target verify step (token-weighted). Predictions: tuning.json, band served at this "
        "load; its per-step speedup made end to end with the baseline's mean TTFT and, at c > 1, its stalls for other requests' "
        "context phases (speculation shortens only a request's own decode steps: trtspec/perf/stats.py end_to_end_prediction). "
        "Brackets: 95% intervals, a seeded bootstrap over the requests of each run (trtspec/perf/stats.py); ± under a "
        "predicted AL (every ±: 95%): 1.96 standard errors over the profiled prompts (±?: unknown, a workload profiled on one "
        "prompt); a speedup whose interval contains 1.00x is no measurable difference and is not coloured.</p>",
        "<h2>Figures</h2>",
        *(_figure(fid, draw) for fid, draw in figures.items()),
        _parity(results),
        "<h2>Runs</h2>", _run_table(results),
        *(["<h2>Sweep</h2>", sweep_html(results.sweep)] if results.sweep is not None else []),
        "<h2>Errors</h2>", _errors(results),
        "<h2>Settings</h2>", _settings(results, tuning_path),
    ]
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>trtspec perf report{' (incomplete)' if is_partial(results) else ''}: {escape(st.model)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_report(results: Path, out_html: Path, tuning: Path | None = None) -> Path:
    """Read results.json (and tuning.json), write report.html atomically; returns its path."""
    res = load_results(Path(results))
    return write_report_from(res, out_html, load_predictions(tuning), str(tuning) if tuning is not None else None)


def write_report_from(results: PerfResults, out_html: Path, tuning=None, tuning_path: str | None = None) -> Path:
    """Same from objects in memory (what `trtspec perf` calls after a run)."""
    out_html = Path(out_html)
    write_text_atomic(out_html, render_report(results, tuning, tuning_path))
    return out_html
