"""report.html of `trtspec perf`: built from schema-valid synthetic PerfResults (numbers chosen in
the test, summaries computed here from the request records), checked for every figure, for headline
numbers equal to values recomputed here, for partial / no-baseline / no-tuning results rendering
with explanations, for escaping, and for atomic writing."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import run_cli
from triton_fixtures import tuning_file
from trtspec.errors import TrtspecError
from trtspec.perf.stats import al_ci, end_to_end_prediction
from trtspec.perf.report import FIGURES, render_report, write_report, write_report_from
from trtspec.perf.schema import (Comparison, Percentiles, PerfResults,
                                 RequestRecord, Run, RunSummary, Settings, dump_results)
from trtspec.tuning.tuning_schema import load_tuning

ROOT = Path(__file__).resolve().parents[2]


def pct(xs):
    if not xs:
        return Percentiles()
    a = np.asarray(xs, dtype=float)
    return Percentiles(mean=float(a.mean()), p50=float(np.percentile(a, 50)), p90=float(np.percentile(a, 90)),
                       p99=float(np.percentile(a, 99)))


def make_run(workload, spec, conc, *, n=12, ttft=0.05, itl=0.01, tokens=32, al=None, errors=0, completed=True,
             error=None, seed=0, err_msg="boom"):
    """A run of n requests (plus `errors` failed ones) with jittered TTFT/ITL; summary computed from
    the records with the schema's definitions."""
    rng = np.random.default_rng(seed)
    reqs, t = [], 0.0
    for i in range(n):
        tt = ttft * (1 + 0.2 * rng.random())
        it = itl * (1 + 0.2 * rng.random())
        e2e = tt + it * (tokens - 1)
        reqs.append(RequestRecord(index=i, prompt_id=f"p{i}", start_s=t, status="ok", ttft_s=tt, e2e_s=e2e, itl_s=it,
                                  responses=tokens, output_tokens=tokens, acceptance_length=al))
        t += e2e / conc
    for j in range(errors):
        reqs.append(RequestRecord(index=n + j, prompt_id=f"e{j}", start_s=t, status="error", error=err_msg))
    ok = [r for r in reqs if r.status == "ok"]
    window = max((r.start_s + r.e2e_s for r in ok), default=0.0)
    out_tokens = sum(r.output_tokens for r in ok)
    summary = RunSummary(requests_ok=len(ok), errors=errors, timeouts=0, window_s=window,
                         requests_per_s=len(ok) / window if window else 0.0, output_tokens=out_tokens,
                         output_tokens_per_s=out_tokens / window if window else 0.0,
                         acceptance_length=al if ok else None, ttft_s=pct([r.ttft_s for r in ok]),
                         itl_s=pct([r.itl_s for r in ok]), e2e_s=pct([r.e2e_s for r in ok]))
    return Run(workload=workload, speculation=spec, concurrency=conc, started_at="2026-11-23T06:00:00Z",
               completed=completed, error=error, requests=reqs, summary=summary)


def make_results(workloads=("chat", "code"), concs=(1, 4), baseline=True, **kw):
    runs = []
    for wi, w in enumerate(workloads):
        for c in concs:
            runs.append(make_run(w, True, c, itl=0.006 + 0.002 * wi, al=2.5 - 0.3 * wi, seed=wi * 10 + c))
            if baseline:
                runs.append(make_run(w, False, c, itl=0.012, seed=wi * 10 + c + 100))
    settings = Settings(url="127.0.0.1:8001", model="generate", workloads={w: "mt-bench" for w in workloads},
                        concurrency=list(concs), requests=12, warmup=2, timeout_s=60, max_tokens=32,
                        baseline=baseline, seed=0)
    return PerfResults(created="2026-11-23T06:00:00Z", trtspec_version="0.1", settings=settings,
                       completed=kw.get("completed", True), error=kw.get("error"), runs=runs)


class Cells(HTMLParser):
    """Collects headline rows ({(workload, load): {data-k: text}}), img/figure ids and missing notes."""

    def __init__(self):
        super().__init__()
        self.rows, self.imgs, self.missing, self._row, self._k, self._missing = {}, {}, {}, None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "headline":
            self._row = self.rows.setdefault((a["data-workload"], a["data-load"]), {})
        elif tag == "td" and self._row is not None and "data-k" in a:
            self._k = a["data-k"]
            self._row[self._k] = ""
        elif tag == "img":
            self.imgs[a["id"]] = a
        elif tag == "div" and a.get("class") == "missing":
            self._missing = a["id"]
            self.missing[a["id"]] = ""

    def handle_endtag(self, tag):
        if tag == "td":
            self._k = None
        elif tag == "tr":
            self._row = None
        elif tag == "div":
            self._missing = None

    def handle_data(self, data):
        if self._k is not None:
            self._row[self._k] += data
        if self._missing is not None:
            self.missing[self._missing] += data


def parse(html):
    p = Cells()
    p.feed(html)
    return p


def first_number(text):
    m = re.match(r"\s*([0-9.]+)", text)
    return float(m.group(1)) if m else None


@pytest.fixture(scope="module")
def tuning(tmp_path_factory):
    path = tuning_file(tmp_path_factory.mktemp("tun") / "tuning.json", "draft-target", {"chat": [3, 2], "code": [2, 1]})
    return path


def test_full_report_has_every_figure_and_the_recomputed_headline(tmp_path, tuning):
    res = make_results()
    (tmp_path / "results.json").write_text(dump_results(res))
    out = write_report(tmp_path / "results.json", tmp_path / "r" / "report.html", tuning)
    html = out.read_text()
    p = parse(html)
    assert set(p.imgs) == set(FIGURES) and not p.missing
    for fid, img in p.imgs.items():
        assert img["alt"] == FIGURES[fid][1]
        png = base64.b64decode(img["src"].removeprefix("data:image/png;base64,"))
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert not re.search(r"""(src|href)=["'](?!data:)""", html) and "<script" not in html  # self-contained
    tun = load_tuning(tuning)
    assert len(p.rows) == 4
    for r in res.runs:
        if not r.speculation:
            continue
        base = next(b for b in res.runs if not b.speculation and b.workload == r.workload
                    and b.concurrency == r.concurrency)
        row = p.rows[(r.workload, f"c={r.concurrency}")]
        tps, btps = r.summary.output_tokens_per_s, base.summary.output_tokens_per_s
        assert first_number(row["tokens_per_s"]) == pytest.approx(round(tps, 1))
        assert first_number(row["baseline_tokens_per_s"]) == pytest.approx(round(btps, 1))
        assert first_number(row["speedup"]) == pytest.approx(round(tps / btps, 2))
        assert tps / btps > 1.2  # ITL 6-8 ms vs 12 ms: speculation wins here
        # the band the generate model serves: largest band <= concurrency (bands 1 and 4)
        band = next(b for b in tun.workloads[r.workload].bands if b.concurrency == r.concurrency)
        bs = base.summary  # the tuner's per-step speedup made end to end with the baseline's TTFT, and shown too
        e2e = end_to_end_prediction(band.speedup, bs.ttft_s.mean, bs.e2e_s.mean)
        assert e2e < band.speedup
        assert first_number(row["predicted_speedup"]) == pytest.approx(round(e2e, 2))
        assert f"{band.speedup:.2f}x per step" in row["predicted_speedup"]
        assert first_number(row["acceptance_length"]) == pytest.approx(round(r.summary.acceptance_length, 2))
        assert first_number(row["predicted_acceptance_length"]) == pytest.approx(round(band.acceptance_length, 2))
        ci = al_ci(r.requests)  # both ALs with their uncertainty: a bootstrap interval, the profile's 1.96 SE
        assert f"[{ci.low:.2f}, {ci.high:.2f}]" in row["acceptance_length"]
        assert band.acceptance_length_se and f"±{1.959964 * band.acceptance_length_se:.2f}" in row["predicted_acceptance_length"]
        assert int(first_number(row["predicted_draft_len"])) == band.draft_len
    # per-run table: the p50 TTFT of every run, in ms
    for r in res.runs:
        assert f"<td>{r.summary.ttft_s.p50 * 1e3:.1f}</td>" in html


def test_band_between_tuned_bands_and_predictions_from_comparisons(tuning):
    res = make_results(workloads=("chat",), concs=(2, 8))
    p = parse(render_report(res, load_tuning(tuning)))
    bands = {b.concurrency: b for b in load_tuning(tuning).workloads["chat"].bands}
    for conc, band in ((2, bands[1]), (8, bands[4])):  # the band served, made end to end with its baseline
        base = next(r for r in res.runs if not r.speculation and r.concurrency == conc).summary
        cell = p.rows[("chat", f"c={conc}")]["predicted_speedup"]
        e2e = end_to_end_prediction(band.speedup, base.ttft_s.mean, base.e2e_s.mean)
        assert first_number(cell) == pytest.approx(round(e2e, 2)) and f"{band.speedup:.2f}x per step" in cell
    # without tuning.json, the predictions results.json recorded are shown
    res.comparisons = [Comparison(workload="chat", concurrency=2, tokens_per_s=1, baseline_tokens_per_s=1, speedup=1,
                                  predicted_speedup=1.61, predicted_step_speedup=1.87, predicted_acceptance_length=2.34,
                                  predicted_draft_len=3, predicted_acceptance_length_se=0.05)]
    p = parse(render_report(res))
    assert first_number(p.rows[("chat", "c=2")]["predicted_speedup"]) == pytest.approx(1.61)
    assert "±0.10" in p.rows[("chat", "c=2")]["predicted_acceptance_length"]  # its recorded SE, as 1.96 SE
    assert "1.87x per step" in p.rows[("chat", "c=2")]["predicted_speedup"]
    assert "n/a" in p.rows[("chat", "c=8")]["predicted_speedup"]
    assert set(p.imgs) == set(FIGURES)
    # a results.json written before predictions were made end to end: its one number is per step
    res.comparisons[0] = res.comparisons[0].model_copy(update={"predicted_speedup": 1.87, "predicted_step_speedup": None})
    cell = parse(render_report(res)).rows[("chat", "c=2")]["predicted_speedup"]
    assert "n/a" in cell and "1.87x per step" in cell


def test_a_predicted_al_without_a_standard_error_shows_it_unknown():
    """A recorded prediction whose AL has no standard error (a workload profiled on one prompt) shows
    '±?' under it, as the tuner's table does, not a bare number that reads as exact; off's AL 1 none."""
    res = make_results(workloads=("chat",), concs=(2, 8))
    common = dict(workload="chat", tokens_per_s=1, baseline_tokens_per_s=1, speedup=1, predicted_speedup=1.0)
    res.comparisons = [Comparison(concurrency=2, predicted_acceptance_length=2.34, predicted_draft_len=3, **common),
                       Comparison(concurrency=8, predicted_acceptance_length=1.0, predicted_draft_len=0, **common)]
    rows = parse(render_report(res)).rows
    assert rows[("chat", "c=2")]["predicted_acceptance_length"].split() == ["2.34", "±?"]
    assert rows[("chat", "c=8")]["predicted_acceptance_length"].split() == ["1.00"]


def test_measured_numbers_without_an_interval_show_it_unknown():
    """One successful request per run: no interval to resample. The measured tokens/s, speedup and AL
    say '±?' instead of standing bare, as if exact; with 12 requests each shows its interval."""
    one = PerfResults(created="x", trtspec_version="0.1", settings=make_results().settings, completed=True,
                      runs=[make_run("chat", True, 1, n=1, al=2.0), make_run("chat", False, 1, n=1)])
    row = parse(render_report(one)).rows[("chat", "c=1")]
    for k in ("tokens_per_s", "baseline_tokens_per_s", "speedup", "acceptance_length"):
        assert row[k].split()[1] == "±?", (k, row[k])
    row = parse(render_report(make_results(workloads=("chat",), concs=(1,)))).rows[("chat", "c=1")]
    assert all("±?" not in row[k] and "[" in row[k] for k in ("tokens_per_s", "speedup", "acceptance_length"))


def test_no_baseline_no_tuning_renders_with_explanations(tmp_path):
    res = make_results(baseline=False)
    out = write_report_from(res, tmp_path / "report.html")
    p = parse(out.read_text())
    assert {"plot-throughput", "plot-ttft", "plot-itl", "plot-acceptance"} <= set(p.imgs)
    assert "baseline" in p.missing["plot-speedup-missing"] and "settings.baseline is false" in p.missing[
        "plot-speedup-missing"]
    assert "no tuning.json" in p.missing["plot-predicted-vs-measured-missing"]
    assert all("n/a" in row["speedup"] for row in p.rows.values())
    assert all(first_number(row["tokens_per_s"]) > 0 for row in p.rows.values())


def test_partial_results_with_errors_render(tmp_path):
    res = make_results(workloads=("chat",), concs=(1,), completed=False, error="server died")
    res.runs[0] = make_run("chat", True, 1, n=3, al=2.0, errors=2, completed=False, error="stream closed",
                           err_msg="StatusCode.UNAVAILABLE")
    res.runs[1] = make_run("chat", False, 1, n=0, errors=4, completed=False, err_msg="StatusCode.UNAVAILABLE")
    html = render_report(res)
    p = parse(html)
    assert 'id="partial"' in html and "server died" in html
    assert "StatusCode.UNAVAILABLE &times; 4" in html and "run stopped: stream closed" in html
    assert "plot-speedup-missing" in p.missing and "plot-throughput" in p.imgs
    assert "n/a" in p.rows[("chat", "c=1")]["baseline_tokens_per_s"]
    # nothing at all measured: every figure explains itself, nothing crashes
    empty = make_results(workloads=("chat",), concs=(1,), completed=False, error="no server")
    empty.runs = []
    p = parse(render_report(empty))
    assert set(p.missing) == {f"{fid}-missing" for fid in FIGURES} and not p.imgs
    only_errors = make_results(workloads=("chat",), concs=(1,), baseline=False)
    only_errors.runs = [make_run("chat", True, 1, n=0, errors=3)]
    p = parse(render_report(only_errors))
    assert set(p.missing) == {f"{fid}-missing" for fid in FIGURES}


def test_user_strings_are_escaped():
    evil = '<script>alert("x")</script>&'
    res = make_results(workloads=(evil,), concs=(1,))
    res.runs[0] = make_run(evil, True, 1, al=2.0, errors=1, err_msg='<img src=x onerror="y">')
    res.settings.url = '"><b>url'
    html = render_report(res)
    assert "<script" not in html and "<img src=x" not in html and "<b>url" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in html
    assert parse(html).rows[(evil, "c=1")]  # attribute round-trips through the parser


def test_written_atomically_and_errors_name_the_file(tmp_path):
    res = make_results(workloads=("chat",), concs=(1,))
    out = tmp_path / "report.html"
    out.write_text("old report")
    write_report_from(res, out)
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert sorted(os.listdir(tmp_path)) == ["report.html"]  # no temporary sibling left behind
    (tmp_path / "d").mkdir()
    with pytest.raises(TrtspecError, match="is a directory"):
        write_report_from(res, tmp_path / "d")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "trtspec.perf/1", "created": 1}')
    with pytest.raises(TrtspecError, match="bad.json"):
        write_report(bad, tmp_path / "x.html")
    assert not (tmp_path / "x.html").exists()


def test_cli_perf_report_and_help_stays_light(tmp_path, tuning, capsys):
    (tmp_path / "results.json").write_text(dump_results(make_results(workloads=("chat",), concs=(1,))))
    out = tmp_path / "o" / "report.html"
    code, stdout, _ = run_cli(capsys, "perf-report", tmp_path / "results.json", "--tuning", tuning, "--out", out)
    assert code == 0 and str(out) in stdout
    assert set(parse(out.read_text()).imgs) == set(FIGURES)
    code, _, err = run_cli(capsys, "perf-report", tmp_path / "missing.json")
    assert code == 2 and "missing.json" in err and "Traceback" not in err
    # registering the command (what `trtspec --help` does) imports neither matplotlib nor torch
    probe = ("import sys; import trtspec.cli; "
             "print(sorted(m for m in ('matplotlib', 'torch') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.strip() == "[]", r.stderr


def test_a_speedup_inside_its_interval_is_not_coloured_as_a_win():
    """K=0 against speculation off (same ITL both sides, jitter only): the speedup cell is neutral and
    says "no measurable difference"; a real 2x is green and "faster". Intervals come out of the run
    records here (these summaries carry none, as in results.json written before intervals)."""
    runs = [make_run("same", True, 1, itl=0.012, seed=1), make_run("same", False, 1, itl=0.012, seed=2),
            make_run("fast", True, 1, itl=0.006, seed=3), make_run("fast", False, 1, itl=0.012, seed=4)]
    res = make_results(workloads=("same",), concs=(1,))
    res.runs = runs
    html = render_report(res)
    cells = re.findall(r'<td class="big([^"]*)" data-k="speedup">([^<]*)<span class="ci">\[([0-9.]+)x, ([0-9.]+)x\]',
                       html)
    (same_cls, _, lo, hi), (fast_cls, _, flo, _) = cells
    assert same_cls == " neutral" and float(lo) < 1.0 < float(hi)
    assert fast_cls == " good" and float(flo) > 1.0
    notes = parse(html).rows
    assert notes[("same", "c=1")]["verdict"].startswith("no measurable difference")
    assert "same computation" not in notes[("same", "c=1")]["verdict"]  # these records do not say what K was served
    for r in runs[0].requests:
        r.num_draft_tokens = 0 if r.status == "ok" else None  # the tuned setting served off: an A/A control
    note = parse(render_report(res)).rows[("same", "c=1")]["verdict"]
    assert note.startswith("no measurable difference; the same computation, no speculation served")
    assert notes[("fast", "c=1")]["verdict"].startswith("faster") and "±5% needs ~" in notes[("fast", "c=1")]["verdict"]
    assert "TTFT mean 95% CI (ms)" in html


def test_an_interleaved_comparisons_request_count_is_its_pairs_in_the_report_as_in_the_summary():
    """Interleaved runs whose failures hit different prompts: 9 successes each, 8 same-prompt pairs.
    The speedup interval resampled the 8 pairs, so the report sizes a ±5% claim from 8, the number
    the CLI's sentence (compare.comparisons' requests_for_5pct) gives, not from min(requests_ok) = 9."""
    from trtspec.perf.compare import comparisons
    from trtspec.perf.stats import summarize

    rng = np.random.default_rng(0)
    runs = []
    for spec, fail in ((True, 1), (False, 7)):
        recs, t = [], 0.0
        for i in range(10):
            e2e, ok = float(np.exp(rng.normal(0, 0.3))) / (1.3 if spec else 1.0), i != fail
            recs.append(RequestRecord(index=i, prompt_id=f"p{i % 5}", start_s=t, status="ok" if ok else "error",
                                      ttft_s=0.1 if ok else None, e2e_s=e2e if ok else None,
                                      output_tokens=32 if ok else 0, block=i // 5))
            t += e2e
        runs.append(Run(workload="chat", speculation=spec, concurrency=1, started_at="2026-11-23T06:00:00Z",
                        completed=True, requests=recs, summary=summarize(recs)))
    res = make_results(workloads=("chat",), concs=(1,))
    res.runs = runs
    (c,) = comparisons(runs)
    assert c.paired_requests == 8 and min(r.summary.requests_ok for r in runs) == 9
    note = parse(render_report(res)).rows[("chat", "c=1")]["verdict"]
    assert f"±5% needs ~{c.requests_for_5pct} pairs (measured 8)" in note, note
