"""The `trtspec` command line: one Typer app, each subcommand a thin call into a stage module."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Optional

import typer

from .checkpoints.options import EAGLE_FLAGS, ConvertOptions as C, EagleOptions as E
from .checkpoints.default_model import default_cache_root
from .errors import TrtspecError
from .fsutil import write_text_atomic
from .options import default, doc, flag_context, flag_of, from_cli
from .runtime.command import COMPILE_LAYERS, DEVICE, DTYPE, FP8_GEMM
from .runtime.options import GenerateOptions as G

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Speculative decoding for TensorRT-LLM: convert, quantize, build, tune, serve, measure.")
DEBUG_ENV = "TRTSPEC_DEBUG"
_DEBUG = {"on": False}  # set by the global --debug option, read by main() after the command failed


@app.callback()
def _global_options(debug: bool = typer.Option(
        False, "--debug", envvar=DEBUG_ENV,
        help=f"On an internal error, print the full traceback instead of one line (or set {DEBUG_ENV}=1).")):
    _DEBUG["on"] = debug


@app.command()
def convert(
    hf: Path = typer.Option(..., "--hf", help="HF model directory (the target, or the EAGLE base)."),
    out: Path = typer.Option(..., "--out", help="Output checkpoint directory (must not exist or be empty)."),
    dtype: str = typer.Option(default(C, "dtype"), help=doc(C, "dtype")),
    tp: int = typer.Option(default(C, "tp"), help=doc(C, "tp")),
    eagle: Optional[Path] = typer.Option(None, help="SafeAILab-style EAGLE-1 head directory."),
    draft: Optional[Path] = typer.Option(None, help="HF draft model directory (draft-target pair)."),
    max_draft_len: int = typer.Option(default(E, "max_draft_len"), help=doc(E, "max_draft_len")),
    num_eagle_layers: int = typer.Option(default(E, "num_eagle_layers"), help=doc(E, "num_eagle_layers")),
    max_non_leaves: int = typer.Option(default(E, "max_non_leaves"), help=doc(E, "max_non_leaves")),
    allow_pickle: bool = typer.Option(default(C, "allow_pickle"), help=doc(C, "allow_pickle")),
):
    """Convert HF weights into a TensorRT-LLM 1.2 checkpoint (plain, EAGLE, or a draft-target pair)."""
    from .checkpoints.stage import convert as run_convert

    if eagle and draft:
        raise TrtspecError("--eagle and --draft are mutually exclusive")
    options = from_cli(C, EAGLE_FLAGS, dtype=dtype, tp=tp, allow_pickle=allow_pickle, eagle=dict(
        max_draft_len=max_draft_len, num_eagle_layers=num_eagle_layers, max_non_leaves=max_non_leaves))
    with flag_context(C), flag_context(E):  # library errors name convert./eagle.FIELD
        run_convert(hf, out, options, eagle_head=eagle, draft_hf=draft)
    typer.echo(f"wrote {out}")


WORDS_JSON = ' As a JSON list: \'["foo", " bar baz"]\' or, as token ids, \'[[42], [7, 8]]\'.'


def _json_list(text: str | None, flag: str) -> list:
    """A flag's JSON list (as --stop-words, --bad-words and --eagle-choices take theirs); unset: empty."""
    if text is None:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise TrtspecError(f"{flag}: not valid JSON ({e.msg})") from None
    if not isinstance(value, list):
        raise TrtspecError(f"{flag}: expected a JSON list, got {text!r}")
    return value


GENERATE_PARAMS = {name: flag_of(name) for name in  # run_generate's arguments -> flags
                   ("chat", "accept_rule", "max_new_tokens", "draft_len", "eagle_choices")}


@app.command()
def generate(
    ckpt: Path = typer.Option(..., "--ckpt", help="TRT-LLM checkpoint directory (plain, EAGLE, or a pair "
                                                  "directory with target/ and draft/)."),
    draft_ckpt: Optional[Path] = typer.Option(None, "--draft-ckpt", help="Draft checkpoint (draft-target)."),
    eagle3_head: Optional[Path] = typer.Option(None, "--eagle3-head",
                                               help="EAGLE-3 head directory (SafeAILab or ModelOpt layout); "
                                                    "drafts --draft-len tokens per step."),
    draft_len: Optional[int] = typer.Option(default(G, "draft_len"), "--draft-len", help=doc(G, "draft_len")),
    eagle_choices: Optional[str] = typer.Option(default(G, "eagle_choices"), "--eagle-choices",
                                                help=doc(G, "eagle_choices") + " As JSON."),
    eagle_dynamic_top_k: Optional[int] = typer.Option(default(G, "eagle_dynamic_top_k"), "--eagle-dynamic-top-k",
                                                      help=doc(G, "eagle_dynamic_top_k")),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="Prompt text (uses the checkpoint's tokenizer)."),
    prompt_ids: Optional[str] = typer.Option(None, "--prompt-ids", help="Prompt token ids as a JSON list."),
    chat: bool = typer.Option(default(G, "chat"), help=doc(G, "chat")),
    max_new_tokens: int = typer.Option(default(G, "max_new_tokens"), "--max-new-tokens", help=doc(G, "max_new_tokens")),
    ignore_eos: bool = typer.Option(default(G, "ignore_eos"), help=doc(G, "ignore_eos")),
    min_tokens: int = typer.Option(default(G, "min_tokens"), "--min-tokens", help=doc(G, "min_tokens")),
    stop_words: Optional[str] = typer.Option(None, "--stop-words", help=doc(G, "stop_words") + WORDS_JSON),
    bad_words: Optional[str] = typer.Option(None, "--bad-words", help=doc(G, "bad_words") + WORDS_JSON),
    batch_invariant: bool = typer.Option(default(G, "batch_invariant"), help=doc(G, "batch_invariant")),
    temperature: float = typer.Option(default(G, "temperature"), help=doc(G, "temperature")),
    top_k: int = typer.Option(default(G, "top_k"), "--top-k", help=doc(G, "top_k")),
    top_p: float = typer.Option(default(G, "top_p"), "--top-p", help=doc(G, "top_p")),
    seed: int = typer.Option(default(G, "seed"), help=doc(G, "seed")),
    accept_rule: Optional[str] = typer.Option(default(G, "accept_rule"), "--accept-rule", help=doc(G, "accept_rule")),
    fp8_gemm: str = FP8_GEMM,
    device: str = DEVICE,
    dtype: Optional[str] = DTYPE,
    compile_layers: bool = COMPILE_LAYERS,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Decode with the PyTorch runtime: greedy, draft-target, or EAGLE tree (static or dynamic)."""
    from .runtime.generate import run_generate

    if (prompt is None) == (prompt_ids is None):
        raise TrtspecError("give exactly one of --prompt or --prompt-ids")
    ids = None
    if prompt_ids is not None:
        try:
            ids = json.loads(prompt_ids)
            assert isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids)
        except (json.JSONDecodeError, AssertionError):
            raise TrtspecError("--prompt-ids: expected a non-empty JSON list of integers") from None
    choices = None if eagle_choices is None else _json_list(eagle_choices, "--eagle-choices")  # unset: default tree
    options = from_cli(G, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, accept_rule=accept_rule,
                       fp8_gemm=fp8_gemm, device=device, dtype=dtype, compile_layers=compile_layers,
                       min_tokens=min_tokens, stop_words=_json_list(stop_words, "--stop-words"),
                       bad_words=_json_list(bad_words, "--bad-words"))
    with flag_context(G, params=GENERATE_PARAMS):  # run_generate names its arguments
        result = run_generate(ckpt, prompt=prompt, prompt_ids=ids, chat=chat, max_new_tokens=max_new_tokens,
                              draft_ckpt=draft_ckpt, draft_len=draft_len, eagle3_head=eagle3_head,
                              eagle_choices=choices, ignore_eos=ignore_eos, eagle_dynamic_top_k=eagle_dynamic_top_k,
                              batch_invariant=batch_invariant, sampling=options.sampling(), accept=options.accept_rule,
                              fp8_gemm=options.fp8_gemm, device=options.device, dtype=options.dtype,
                              compile_layers=options.compile_layers, min_tokens=options.min_tokens,
                              stop_words=options.stop_words, bad_words=options.bad_words)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        typer.echo(result["text"] if result["text"] is not None else result["output_ids"])
        if result["acceptance_length"] is not None:
            typer.echo(f"acceptance length {result['acceptance_length']:.3f} over {result['steps']} target steps",
                       err=True)


def _register_stage_commands() -> None:
    """Stage commands live next to their stage (a thin Typer function over its Python API)."""
    from .builders.command import build_command
    from .drafts.command import train_draft_command
    from .quality.quantize_command import quantize_command
    from .perf.command import perf_command
    from .pipeline.command import run_command
    from .perf.report_command import perf_report_command
    from .quality.command import quant_report_command
    from .triton_repo.command import serve_command, triton_command
    from .tuning.command import measure_cost_command, tune_command
    from .tuning.profile_command import profile_command

    app.command("quantize")(quantize_command)
    app.command("quant-report")(quant_report_command)
    app.command("build")(build_command)
    app.command("profile")(profile_command)
    app.command("tune")(tune_command)
    app.command("measure-cost")(measure_cost_command)
    app.command("triton")(triton_command)
    app.command("serve")(serve_command)
    app.command("perf")(perf_command)
    app.command("run")(run_command)
    app.command("perf-report")(perf_report_command)
    app.command("train-draft")(train_draft_command)


_register_stage_commands()


@app.command()
def demo(out: Path = typer.Option(Path("out/demo"), "--out", help="Where the demo writes its artifacts."),
         until: Optional[str] = typer.Option(None, "--until", help="Stop after this stage (see trtspec run)."),
         force: Optional[str] = typer.Option(None, "--force", help="Re-run this stage and every stage after it."),
         dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; run nothing.")):
    """Run the whole pipeline on the embedded SmolLM2-135M-Instruct, on CPU (the packaged cpu-demo recipe)."""
    from .demo import run_demo

    run_demo(out, until, force, dry_run)


def main() -> None:
    """The entry point. Typer (standalone mode) shows usage errors itself, as `Usage: ... Error: ...`
    with exit 2; a `TrtspecError` is one `error:` line (exit 2); anything else is a bug of ours and
    gets one line naming the file that holds its traceback (exit 1), or the traceback with --debug."""
    _DEBUG["on"] = False  # the callback sets it (flag or TRTSPEC_DEBUG) before the command runs
    try:
        app()
    except TrtspecError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except Exception as e:
        if _DEBUG["on"]:
            traceback.print_exception(e)
            sys.exit(1)
        where = _save_traceback(e)
        typer.echo(f"error: internal error ({type(e).__name__}: {_one_line(e)}); full traceback in {where} "
                   f"(or run with --debug)", err=True)
        sys.exit(1)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _save_traceback(e: BaseException) -> str:
    """Write the traceback to `$TRTSPEC_CACHE/crash/` (else the temp dir); the path, or why not."""
    text = "".join(traceback.format_exception(e))
    name = f"traceback-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.txt"
    for folder in (default_cache_root() / "crash", Path(tempfile.gettempdir()) / "trtspec-crash"):
        try:
            write_text_atomic(folder / name, text)
            return str(folder / name)
        except (OSError, TrtspecError):
            continue
    return "nowhere (the cache and temp directories are not writable; run with --debug)"
