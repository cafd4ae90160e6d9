"""report.html of a results.json cut short (`completed: false`, trtspec.perf.incomplete): rendered under
a banner with the reason and the counts, and no speedup or verdict where a half was cut."""

from __future__ import annotations

from cli_helpers import run_cli
from trtspec.perf.compare import comparisons
from trtspec.perf.headline import load_label
from trtspec.perf.report import render_report
from trtspec.perf.schema import Sweep, SweepRun, SweepSetting, dump_results

from tests.perf.test_report import make_results, make_run, parse

CUT = "run 4 (chat, speculation off, concurrency 4): interrupted"


def cut_results():
    """chat and code at c=1 and c=4 with a baseline (8 runs planned), cut during the 4th: chat c=1
    complete, chat c=4's speculation run finished, its baseline cut after 5 requests."""
    res = make_results(completed=False, error=CUT)
    res.runs = res.runs[:4]
    res.runs[3] = make_run("chat", False, 4, n=5, itl=0.012, seed=104, completed=False, error="interrupted")
    res.comparisons = comparisons(res.runs)
    return res


def test_a_cut_results_json_renders_under_a_banner_and_compares_only_finished_halves(tmp_path, capsys):
    res = cut_results()
    whole = make_results(workloads=("chat",), concs=(4,))  # the same c=4 halves, both finished: a verdict
    assert comparisons(whole.runs)[0].verdict == "faster"
    assert [load_label(c) for c in res.comparisons] == ["c=1"]  # the cut half makes no comparison
    path = tmp_path / "perf.partial" / "results.json"
    path.parent.mkdir()
    path.write_text(dump_results(res))
    code, stdout, _ = run_cli(capsys, "perf-report", path)
    html = (path.parent / "report.html").read_text()
    assert code == 0 and str(path.parent / "report.html") in stdout
    top = html.index('id="partial"')
    assert top < html.index("<h2>") and "<title>trtspec perf report (incomplete)" in html
    assert ("<b>Incomplete: cut short</b> &mdash; " + CUT + "; 3 of 8 planned runs finished, 1 cut short; "
            "the comparisons below cover only the 1 of 4 load points whose speculation and baseline runs both "
            "finished") in html
    rows = parse(html).rows
    cut = rows[("chat", "c=4")]
    assert "n/a" in cut["speedup"] and "faster" not in cut["verdict"] and "slower" not in cut["verdict"]
    assert cut["verdict"] == "not compared: the baseline run was cut short (interrupted)"
    assert float(cut["tokens_per_s"].split()[0]) > 0 and float(cut["baseline_tokens_per_s"].split()[0]) > 0
    assert rows[("chat", "c=1")]["verdict"].startswith("faster")
    # interleaved blocks: both halves cut with the one reason
    both = cut_results()
    both.runs[2] = make_run("chat", True, 4, n=5, al=2.5, seed=4, completed=False, error="interrupted")
    verdict = parse(render_report(both)).rows[("chat", "c=4")]["verdict"]
    assert verdict == "not compared: the speculation and baseline runs were cut short (interrupted)"


def test_a_complete_results_json_has_no_banner_and_a_cut_sweep_says_what_finished():
    html = render_report(make_results())
    assert 'id="partial"' not in html and "Incomplete" not in html and "(incomplete)" not in html
    run = make_run("chat", True, 1, n=3)
    sweep = make_results(workloads=("chat",), concs=(1,), completed=False, error="sweep chat c=1: server gone")
    sweep.runs = []
    setting = SweepSetting(label="K=2", speculation=True, drafter="ngram", num_draft_tokens=2)
    sweep.sweep = Sweep(mode="ngram", runs=[
        SweepRun(workload="chat", concurrency=1, setting=setting, started_at="t", completed=done,
                 error=None if done else "server gone", requests=run.requests, summary=run.summary)
        for done in (True, False)])
    html = render_report(sweep)
    assert "sweep chat c=1: server gone; 1 sweep runs finished, 1 cut short; the sweep table shows" in html
