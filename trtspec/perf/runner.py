"""`trtspec perf` as a Python API: `run_perf(PerfOptions(...)) -> PerfResults`.

    from trtspec.perf.runner import PerfOptions, run_perf
    results = run_perf(PerfOptions(url="127.0.0.1:8001", workloads={"chat": "mt-bench"},
                                   concurrency=[1, 4], baseline=True, out=Path("perf")))

Order of work, and why:
1. everything that can be wrong without a server is checked first (options, workload specs, files,
   tuning.json), then the server and model (clear error within --timeout), then the prompts are
   rendered as profiling rendered them, less those the server would refuse (trtspec.perf.prompts);
2. with --baseline, one probe request with speculation=false, so a repository that cannot switch
   speculation off (EAGLE) fails at once with the server's reason instead of after a run of errors;
3. runs: for each workload, for each load point, speculation on and off (adjacent: both see the
   same machine state), each after its own warm-up, which goes first alternating from load point
   to load point (trtspec.perf.order); with perf.blocks > 1 interleaved in blocks instead (on,off |
   off,on | ...: `_interleaved`; trtspec.perf.stats for how the speedup interval pairs requests);
4. after every run results.json / CSVs are rewritten; a failure (server gone, run-level guard,
   Ctrl-C) appends the cut-short run, marks `completed: false` with the reason, writes, and raises
   `PerfRunError` (a TrtspecError carrying the partial results).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..options import first_problem

from .. import __version__
from ..errors import TrtspecError
from ..fsutil import check_output_dir
from . import client, load, procs, prompts, sweep
from .guard import guard, guard_s
from .compare import comparisons, load_predictions
from .parity import word_counts
from .sampling import request_seed, workload_sampling
from .options import PerfOptions, default_requests, load_points
from .output import write_results
from .schema import PerfResults, Run, Settings
from .metrics import to_record
from .order import forward
from .stats import summarize

class PerfRunError(TrtspecError):
    """A perf invocation stopped before its last run; `results` holds what was measured (also on disk)."""

    def __init__(self, message: str, results: PerfResults):
        super().__init__(message)
        self.results = results


def check_options(options: PerfOptions | dict) -> PerfOptions:
    """Validate (again: a constructed model may have been mutated); errors become one-line TrtspecErrors."""
    data = options.model_dump() if isinstance(options, PerfOptions) else options
    try:
        return PerfOptions.model_validate(data)
    except ValidationError as e:
        field, msg = first_problem(e)
        head, sep, rest = msg.partition(": ")  # a cross-field check names its field first ("blocks: ...")
        if not field and sep and head in PerfOptions.model_fields:
            field, msg = head, rest
        raise TrtspecError(f"perf.{field}: {msg}" if field else f"perf: {msg}") from None


def run_perf(options: PerfOptions) -> PerfResults:
    """Measure every workload x load point (x speculation on/off with baseline); write --out files."""
    o = check_options(options)
    check_output_dir(Path(o.out), overwrite=True)  # before the runs: a file there fails only when written
    specs = prompts.parse_workloads(o.workloads)
    workloads = prompts.load_all(specs, o.seed)
    tuning = load_predictions(o.tuning)
    return asyncio.run(_run(o, workloads, tuning))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _settings(o: PerfOptions, sampling: dict) -> Settings:
    return Settings(url=o.url, model=o.model, workloads=dict(o.workloads), concurrency=list(o.concurrency),
                    request_rate=o.request_rate, requests=o.requests, duration_s=o.duration_s, warmup=o.warmup,
                    timeout_s=o.timeout_s, max_tokens=o.max_tokens, baseline=o.baseline, seed=o.seed,
                    tuning=str(o.tuning) if o.tuning else None, processes=o.processes, blocks=o.blocks, sweep=o.sweep,
                    sampling={w: s.model_dump() for w, s in sampling.items() if not s.greedy})


async def _prepare(o: PerfOptions, workloads: list):
    info = await client.check_server(o.url, o.model, o.connect_timeout_s)
    if o.baseline and "speculation" not in info.inputs:
        raise TrtspecError(f"perf.baseline: model {o.model!r} at {o.url} has no 'speculation' input (a repository "
                           "written before it existed, or not a trtspec repository); regenerate it with `trtspec triton`")
    tokenizer = None
    if o.chat:
        path = o.tokenizer or await client.tokenizer_dir(o.url, o.connect_timeout_s)
        if path is None:
            raise TrtspecError(f"perf.tokenizer: needed: the server at {o.url} has no 'preprocessing' model to take "
                               "the tokenizer from, and the chat template is rendered on the client; give "
                               "perf.tokenizer, or turn perf.chat off for plain prompts")
        tokenizer = prompts.load_tokenizer(path)
    rendered = prompts.render_all(workloads, o.seed, tokenizer, o.chat)
    served = tokenizer if o.tokenizer is None else None  # loaded from preprocessing's directory: count with it
    return info, await prompts.drop_refused(rendered, o.url, o.model, o.max_tokens, o.connect_timeout_s, served)


def _extras(o: PerfOptions, info, texts, sampling) -> dict:
    """{prompt id: its sampling inputs} (trtspec.perf.sampling: per-prompt seeds)."""
    return {pid: client.sampling_inputs(info, sampling, request_seed(o.seed, sampling, name, pid))
            for name, pid, text in texts}


def _plan(o: PerfOptions, info, texts, speculation: bool | None, concurrency, rate, extras: dict) -> load.Plan:
    ps = [load.Prompt(pid, client.build_request(o.model, info, text, o.max_tokens, name, speculation, extras[pid]))
          for name, pid, text in texts]
    n = o.requests
    if n is None and o.duration_s is None:
        n = default_requests(concurrency, rate)
    return load.Plan(ps, n, o.duration_s, o.timeout_s, "num_output_tokens" in info.outputs)


async def _probe(o: PerfOptions, info, texts, channel) -> None:
    name, pid, text = texts[0]
    req = client.build_request(o.model, info, text, 1, name, False)
    r = await client.Stream(client.service_pb2_grpc.GRPCInferenceServiceStub(channel), o.url).send(
        req, pid, o.timeout_s, True)
    if r.status != "ok":
        raise TrtspecError(f"perf.baseline: the server refused speculation=false: {r.error}")


async def _measure(pool, plan, concurrency, rate, seed, results, warmup: int, progress, task, clock: dict) -> None:
    """Warm-up, then the measured requests into `results`; clock gets the measured start (perf_counter
    and wall time)."""
    if warmup:
        await load.closed_loop(pool, load.warmup_plan(plan, warmup), concurrency or 1, [])
    clock.update(start=time.perf_counter(), started_at=_now())
    ticker = asyncio.ensure_future(_tick(progress, task, lambda: len(results))) if progress is not None else None
    try:
        async with guard(guard_s(plan, concurrency, rate)):
            if concurrency:
                await load.closed_loop(pool, plan, concurrency, results)
            else:
                await load.open_loop(pool, plan, rate, seed, results)
    finally:
        if ticker is not None:
            ticker.cancel()
            progress.update(task, completed=len(results))


async def _measure_procs(ps, shares, plan, concurrency, rate, results, progress, task, clock: dict) -> None:
    """The same over several client processes (trtspec.perf.procs): they warm up, meet at a barrier
    and measure together; the start is the earliest measured send. Cut short, `results` still gets
    what the processes completed (procs.Processes.run)."""
    ticker = asyncio.ensure_future(_tick(progress, task, ps.done)) if progress is not None else None
    clock.update(started_at=_now())
    try:
        async with guard(guard_s(plan, concurrency, rate) + procs.BARRIER_TIMEOUT_S):
            error = await ps.run(shares, results)
        if error:
            raise _process_error(error)
    finally:
        if results:
            clock["start"] = min(r.start for r in results)
        if ticker is not None:
            ticker.cancel()
            progress.update(task, completed=ps.done())


def _process_error(reason: str) -> BaseException:
    """What a client process's reason for stopping early is in the parent: Ctrl-C reaching that process
    (procs.INTERRUPTED) an interruption, as Ctrl-C in the parent is (_reason); a process that did not
    reach the start in time a plain error; anything else the lost server it reports (client.ServerGone)."""
    if reason == procs.INTERRUPTED:
        return KeyboardInterrupt()
    if reason.startswith(procs.LATE_START):
        return TrtspecError(reason)
    return client.ServerGone(reason)


async def _tick(progress, task, done) -> None:
    while True:
        progress.update(task, completed=done())
        await asyncio.sleep(0.1)


def _progress(o: PerfOptions):
    if not o.progress:
        return contextlib.nullcontext(None)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True))


async def _run(o: PerfOptions, workloads: list, tuning) -> PerfResults:
    info, rendered = await _prepare(o, workloads)
    sampling = {wl.name: workload_sampling(o, tuning, wl.name) for wl in workloads}
    res = PerfResults(created=_now(), trtspec_version=__version__, settings=_settings(o, sampling), completed=False,
                      runs=[])
    channel = client.open_channel(o.url)
    stub = client.service_pb2_grpc.GRPCInferenceServiceStub(channel)
    ps = procs.Processes(o.processes) if o.processes > 1 else None
    try:
        if o.baseline:
            first = workloads[0].name
            await _probe(o, info, [(first, *rendered[first][0])], channel)
        if o.sweep:  # progress: none per block (the settings interleave)
            res.sweep = await _sweep(o, res, stub, info, workloads, rendered, sampling)
            res.completed = True
            write_results(res, o.out)
            return res
        with _progress(o) as progress:
            points = itertools.count()  # load points in the order measured, workloads in turn (order.forward)
            for wl in workloads:
                texts = [(wl.name, pid, text) for pid, text in rendered[wl.name]]
                extras = _extras(o, info, texts, sampling[wl.name])
                for (concurrency, rate), point in zip(load_points(o), points):
                    if o.baseline and o.blocks > 1:
                        await _interleaved(o, res, stub, info, texts, extras, wl.name, concurrency, rate, progress,
                                           tuning, sampling[wl.name], point)
                        continue
                    modes = [on for _, on, _ in load.block_schedule(1, 1, point)] if o.baseline else [True]
                    for spec_on in modes:  # the baseline carries the same settings and seeds
                        speculation = None if spec_on else False
                        plan = _plan(o, info, texts, speculation, concurrency, rate, extras)
                        split = procs.shares(ps.n, o.url, info, [(pid, text, w, extras[pid]) for w, pid, text in texts],
                                             speculation, o.max_tokens, o.timeout_s, plan.counted, concurrency,
                                             plan.requests, plan.duration_s, rate, o.seed, o.warmup) if ps else None
                        await _one_run(o, res, stub, plan, wl.name, spec_on, concurrency, rate, progress, tuning,
                                       ps, split, sampling[wl.name], [spec_on == modes[0]] if o.baseline else None)
        res.completed = True
        write_results(res, o.out)
        return res
    finally:
        if ps is not None:
            ps.close()
        await channel.close()


async def _one_run(o, res: PerfResults, stub, plan, workload, spec_on, concurrency, rate, progress, tuning,
                   ps=None, split=None, sampling=None, sent_first=None):
    task = progress.add_task(_label(workload, spec_on, concurrency, rate), total=plan.requests) \
        if progress is not None else None
    pool = load.StreamPool(lambda: client.Stream(stub, o.url))
    results: list[client.Result] = []
    clock, error = {"start": time.perf_counter(), "started_at": _now()}, None
    try:
        if ps is not None:
            await _measure_procs(ps, split, plan, concurrency, rate, results, progress, task, clock)
        else:
            await _measure(pool, plan, concurrency, rate, o.seed, results, o.warmup, progress, task, clock)
    except (TrtspecError, KeyboardInterrupt, asyncio.CancelledError) as e:
        error = _reason(e)
    finally:
        pool.close()
    results.sort(key=lambda r: r.start)
    records = [to_record(i, r, clock["start"]) for i, r in enumerate(results)]
    _append_run(res, tuning, workload, spec_on, concurrency, rate, clock["started_at"], records, results, error,
                sampling, sent_first)
    _write(o, res, error, workload, spec_on, concurrency, rate)


async def _interleaved(o, res: PerfResults, stub, info, texts, extras, workload, concurrency, rate, progress, tuning,
                       sampling, point: int = 0) -> None:
    """perf.blocks > 1: the load point's requests in `blocks` blocks, each sending the same prompts
    with speculation on and off, on,off | off,on | ... from the `point`-th load point's start
    (load.block_schedule; trtspec.perf.stats: the speedup interval pairs each request with its
    prompt's in the other mode of its block).
    Both modes warm up in the first block; open-loop arrivals are seeded per block, alike in both."""
    plans = {on: _plan(o, info, texts, None if on else False, concurrency, rate, extras) for on in (True, False)}
    n = plans[True].requests
    logs = {on: {"results": [], "blocks": [], "first": [], "clock": {}, "task": progress.add_task(
        _label(workload, on, concurrency, rate) + f" ({o.blocks} blocks)", total=n) if progress is not None else None}
        for on in (True, False)}
    pool, error = load.StreamPool(lambda: client.Stream(stub, o.url)), None
    try:
        for j, on, sent in load.block_schedule(n, o.blocks, point):
            log, p = logs[on], plans[on]
            log["first"].append(len(log["first"]) == len(logs[not on]["first"]))  # the other has not sent block j
            block = load.Plan([p.prompts[i % len(p.prompts)] for i in sent], len(sent), None, p.timeout_s, p.counted)
            got, clock = [], {}
            try:
                await _measure(pool, block, concurrency, rate, o.seed + j, got, o.warmup if j == 0 else 0,
                               None, None, clock)
            finally:
                log["clock"] = log["clock"] or clock
                log["results"] += got
                log["blocks"] += [j] * len(got)
                if progress is not None:
                    progress.update(log["task"], completed=len(log["results"]))
    except (TrtspecError, KeyboardInterrupt, asyncio.CancelledError) as e:
        error = _reason(e)
    finally:
        pool.close()
    for on in (True, False):  # a run cut short: both halves are (the interleaving is), each with the reason
        log = logs[on]
        if log["clock"]:  # else never started (the first block's other mode failed)
            done = sorted(zip(log["results"], log["blocks"]), key=lambda rb: rb[0].start)
            records = [to_record(i, r, log["clock"]["start"], b) for i, (r, b) in enumerate(done)]
            _append_run(res, tuning, workload, on, concurrency, rate, log["clock"]["started_at"], records,
                        [r for r, _ in done], error, sampling, log["first"])
    _write(o, res, error, workload, None, concurrency, rate)


async def _sweep(o: PerfOptions, res: PerfResults, stub, info, workloads, rendered, sampling):
    """perf.sweep: per workload x concurrency, every served setting (trtspec.perf.sweep) in perf.blocks
    blocks, forward and reversed by turns from block to block and load point to load point (order.forward);
    results.json rewritten after each load point; a run cut short is kept and raises PerfRunError."""
    routing, max_k = await sweep.served(o.url, o.model, o.connect_timeout_s)
    res.sweep, points = sweep.new_sweep(routing, max_k), itertools.count()
    for wl in workloads:
        texts = [(wl.name, pid, text) for pid, text in rendered[wl.name]]
        extras = _extras(o, info, texts, sampling[wl.name])
        for (concurrency, _), point in zip(load_points(o), points):
            settings = sweep.settings_for(routing, wl.name, max_k)
            plans = [_plan(o, info, texts, None if st.speculation else False, concurrency, None, extras)
                     for st in settings]
            for st, p in zip(settings, plans):
                p.prompts = [load.Prompt(q.id, sweep.with_setting(q.request, st)) for q in p.prompts]
            logs = [{"results": [], "blocks": [], "clock": {}, "places": []} for _ in settings]
            pool, error = load.StreamPool(lambda: client.Stream(stub, o.url)), None
            try:
                for j, sent in sweep.schedule(plans[0].requests, o.blocks):
                    order = range(len(settings)) if forward(point, j) else reversed(range(len(settings)))
                    for place, i in enumerate(order):
                        p, log, got, clock = plans[i], logs[i], [], {}
                        log["places"].append(place)
                        block = load.Plan([p.prompts[k % len(p.prompts)] for k in sent], len(sent), None,
                                          p.timeout_s, p.counted)
                        try:
                            await _measure(pool, block, concurrency, None, o.seed + j, got,
                                           o.warmup if j == 0 else 0, None, None, clock)
                        finally:
                            log["clock"] = log["clock"] or clock
                            log["results"] += got
                            log["blocks"] += [j] * len(got)
            except (TrtspecError, KeyboardInterrupt, asyncio.CancelledError) as e:
                error = _reason(e)
            finally:
                pool.close()
            for st, log in zip(settings, logs):
                done = sorted(zip(log["results"], log["blocks"]), key=lambda rb: rb[0].start)
                records = [to_record(i, r, log["clock"].get("start", 0.0), b) for i, (r, b) in enumerate(done)]
                res.sweep.runs.append(sweep.sweep_run(wl.name, concurrency, st, log["clock"].get("started_at", _now()),
                                                      records, error, log["places"]))
            if error is not None:
                res.error = f"sweep {wl.name} c={concurrency}: {error}"
                raise PerfRunError(f"{res.error}; partial results in {write_results(res, o.out)}", res)
            write_results(res, o.out)
    return res.sweep


def _label(workload, spec_on, concurrency, rate) -> str:
    return f"{workload} {'spec' if spec_on else 'base'} " + (f"c={concurrency}" if concurrency else f"r={rate:g}/s")


def _reason(e: BaseException) -> str:
    return "interrupted" if isinstance(e, (KeyboardInterrupt, asyncio.CancelledError)) else (str(e) or "interrupted")


def _append_run(res: PerfResults, tuning, workload, spec_on, concurrency, rate, started_at, records, results,
                error, sampling, sent_first=None) -> None:
    """Add one run (and the comparisons it completes) to the results; sent_first: Run.sent_first."""
    sampled = sampling is not None and not sampling.greedy
    res.runs.append(Run(workload=workload, speculation=spec_on, concurrency=concurrency, request_rate=rate,
                        started_at=started_at, completed=error is None, error=error, requests=records,
                        summary=summarize(records), sampling=sampling.model_dump() if sampled else None,
                        output_words=word_counts(r.output_text for r in results if r.status == "ok") if sampled
                        else None, sampling_fallbacks=sum(r.sampling_fallback == "greedy" for r in results),
                        sent_first=sent_first))
    res.comparisons = comparisons(res.runs, tuning)


def _write(o, res: PerfResults, error, workload, spec_on, concurrency, rate) -> None:
    """Rewrite the results; after a run cut short, raise PerfRunError (spec_on None: interleaved)."""
    if error is not None:
        mode = "interleaved" if spec_on is None else f"speculation {'on' if spec_on else 'off'}"
        where = f"{workload}, {mode}, " + (f"concurrency {concurrency}" if concurrency else f"rate {rate:g}/s")
        res.error = f"run {len(res.runs)} ({where}): {error}"
        path = write_results(res, o.out)
        raise PerfRunError(f"{res.error}; partial results in {path}", res)
    write_results(res, o.out)
