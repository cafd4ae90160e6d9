"""What a results.json cut short (server gone, a run's guard, Ctrl-C: `completed: false` with the
reason, trtspec.perf.runner) holds, for report.html's banner and its headline rows.

The runner keeps every finished run plus the cut one. A comparison needs both of its halves
finished: a cut half measured fewer requests, under whatever went wrong, so its speedup would be a
half-measured number, and compare.comparisons makes none there (`cut_short` says why in its place).
The banner says how many of the planned runs finished (settings: workloads x load points x
speculation on/off) and how many load points the comparisons cover.
"""

from __future__ import annotations

from html import escape

from .options import points_of
from .schema import PerfResults, Run, Settings


def is_partial(results: PerfResults) -> bool:
    """Whether results.json says it was cut short (or holds a run that was)."""
    runs = results.sweep.runs if results.sweep is not None else results.runs
    return not results.completed or any(not r.completed for r in runs)


def planned_runs(settings: Settings) -> int:
    """Runs a complete `trtspec perf` of these settings writes: per workload and load point, one with
    speculation and, with a baseline, one without (interleaved blocks too: two runs per load point)."""
    return len(settings.workloads) * len(points_of(settings.concurrency, settings.request_rate)) * (
        2 if settings.baseline else 1)


def cut_short(spec: Run | None, base: Run | None) -> str | None:
    """Why a load point has no comparison although it was measured: a half cut short (the reason its
    run recorded); None when no half present was cut."""
    cut = [(name, r) for name, r in (("speculation", spec), ("baseline", base)) if r is not None and not r.completed]
    if not cut:
        return None
    why = {r.error or "no reason recorded" for _, r in cut}
    if len(cut) == 2 and len(why) == 1:
        return f"the speculation and baseline runs were cut short ({why.pop()})"
    return "; ".join(f"the {name} run was cut short ({r.error or 'no reason recorded'})" for name, r in cut)


def _key(r: Run):
    return r.workload, r.concurrency, r.request_rate


def compared_points(runs: list[Run]) -> int:
    """Load points whose speculation and baseline runs both finished."""
    done = {(_key(r), r.speculation) for r in runs if r.completed}
    return sum((k, False) in done for k, spec in done if spec)


def banner(results: PerfResults) -> str:
    """The incomplete banner at the top of report.html ('' for complete results)."""
    if not is_partial(results):
        return ""
    runs = results.sweep.runs if results.sweep is not None else results.runs
    why = results.error or next((r.error for r in runs if r.error), None) or "no reason recorded"
    if results.sweep is not None:
        counts = f"{sum(r.completed for r in runs)} sweep runs finished"
        scope = "the sweep table shows what was measured; the settings and load points after the cut are missing."
    else:
        st = results.settings
        counts = f"{sum(r.completed for r in runs)} of {planned_runs(st)} planned runs finished"
        points = len(st.workloads) * len(points_of(st.concurrency, st.request_rate))
        scope = (f"the comparisons below cover only the {compared_points(runs)} of {points} load points whose "
                 "speculation and baseline runs both finished; a load point cut short shows what was measured and "
                 "no speedup." if st.baseline else "no baseline was planned (settings.baseline is false).")
    cut = sum(not r.completed for r in runs)
    counts += f", {cut} cut short" if cut else ""
    return (f'<div class="banner incomplete" id="partial"><b>Incomplete: cut short</b> &mdash; {escape(why)}; '
            f"{escape(counts)}; {escape(scope)}</div>")
