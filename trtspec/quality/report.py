"""Quality report of a quantized checkpoint against its unquantized reference (`trtspec quant-report`,
and written by `trtspec quantize` unless --no-report).

Per workload, both checkpoints run in the PyTorch runtime with TRT-LLM numerics:

- **Sequences.** Each prompt is decoded greedily by the *reference* for `max_new_tokens` tokens
  (EOS honoured); both models are then teacher-forced on the same sequence s = prompt + reference
  continuation, so every metric compares the two on identical inputs.
- **logit RMSE** = sqrt(mean over (generated position, vocab entry) of (l_quant - l_ref)^2), pooled
  over all samples. "Generated positions" are the indices P-1 .. L-2 of s (P = prompt length), the
  positions whose next token is a continuation token. `logit_max_abs` is the largest |difference|.
- **top-1 agreement** = fraction of generated positions where argmax l_quant == argmax l_ref (pooled,
  i.e. token-weighted). `top1_agreement_prompt` is the same over the prompt positions 0 .. P-2.
  `*_se`: standard errors over prompts, not tokens (metrics.py); the ALs' and the AL deltas' too.
- **perplexity** = exp(mean NLL), token-weighted over the samples, of each model on (a) the prompt
  tokens s_1 .. s_{P-1} (`perplexity.prompt`: real text the reference did not write, chat-template
  tokens included) and (b) the reference continuation (`perplexity.continuation`: biased in the
  reference's favour, since it is the reference's own greedy text; read it as "how far the quantized
  model drifts from the reference's choices"). `ratio` = quantized / reference.
- **mixed precision.** A checkpoint written with `exclude`/`keep_sensitive` is reported as is
  (its unquantized GEMMs run unquantized); `quantized.mixed_precision` says which and how many.
- **held-out prompts.** The prompts are drawn (seeded) only from samples not used for calibration:
  the quantized checkpoint's `trtspec.json` lists, per calibration source, the sample ids it was
  calibrated on (`options.calibration.sources[].ids`; multi-turn records appear as `ID#turnN`, and
  the record `ID` counts as used when any of its turns was; a derived set's sample counts as its base
  set's, so code-edit's HumanEval/N is held out when humaneval's was calibrated on). A workload whose
  source was entirely used for calibration is reported on calibration prompts instead, with
  `held_out: false` and a warning, rather than not at all.
- **acceptance length** (when a draft, or an EAGLE checkpoint, is given): each *pair* (quantized
  target + quantized draft, reference target + reference draft) is profiled on the same prompts with
  the acceptance profiler (trtspec.tuning.profile: each pair decodes its own greedy output, as a
  lossless speculative run would) and replayed (trtspec.tuning.acceptance.summarize) for every
  K = 1..max_k: `accept_length_by_k` of both and `delta_by_k` = quantized - reference. For EAGLE
  the chain is the drafter's top-1 chain. With no `ref_draft_ckpt`, the reference pair uses the
  same draft as the quantized pair (then the delta isolates the target's quantization).

Outputs in `out_dir` (written atomically): `quality_report.json` (schema `trtspec.quant-report/1`),
`quality_report.png` (render.py; `render.print_report` prints a rich table).
"""

from __future__ import annotations

import datetime as _dt
import json
import tempfile
from pathlib import Path

from .. import __version__
from ..checkpoints.options import ConvertOptions
from ..checkpoints.stage import convert as convert_ckpt
from ..errors import TrtspecError
from ..fsutil import write_text_atomic
from ..runtime.generate import generate_batch, load_models, resolve_pair
from ..tuning.acceptance import paired_ratio_delta_se
from ..workloads import load_workloads, render
from .metrics import PooledMetrics, al_counts, pair_acceptance, teacher_forced_logits
from .options import QualityReportOptions
from .render import plot_report
from .same_model import check_same_model
from .samples import calibration_ids, held_out_samples, mixed_precision, quant_block

SCHEMA = "trtspec.quant-report/1"
JSON_NAME, PNG_NAME = "quality_report.json", "quality_report.png"
REPORT_DIR = "quant_report"  # where `trtspec quantize` writes it, inside the checkpoint directory
DEFAULT_MAX_K = QualityReportOptions.model_fields["max_k"].default

DEFINITIONS = {
    "logit_rmse": "sqrt(mean((logits_quant - logits_ref)^2)) over generated positions x vocab, pooled",
    "top1_agreement": "fraction of generated positions where argmax(quant) == argmax(ref), pooled",
    "perplexity.prompt": "exp(mean NLL) of each model on the held-out prompt tokens (teacher-forced)",
    "perplexity.continuation": "exp(mean NLL) of each model on the reference's greedy continuation",
    "sequences": "prompt + the reference model's greedy continuation; both models teacher-forced on it",
    "held_out": "prompts drawn from samples whose ids are not in the quantized checkpoint's calibration set",
    "acceptance": "acceptance length (tokens per target verify step) replayed from the profiler, K = 1..max_k; "
                  "delta = quantized pair - reference pair",
    "standard errors": "*_se: over prompts (tokens of one prompt are correlated), delta method on the pooled "
                       "ratio; delta_se_by_k is paired (both pairs ran the same prompts); 95% = 1.96 x se",
}


# ---- the report -------------------------------------------------------------------------------------

def quality_report(quant_ckpt: Path, ref_ckpt: Path, workloads: list, out_dir: Path | None = None,
                   draft_ckpt: Path | None = None, ref_draft_ckpt: Path | None = None,
                   max_new_tokens: int = 32, samples: int | None = None, seed: int = 0,
                   max_k: int = DEFAULT_MAX_K, prompts: dict[str, list[tuple[str, list[int]]]] | None = None,
                   progress=None) -> dict:
    """Compare `quant_ckpt` with `ref_ckpt` on `workloads` (trtspec.workloads.Workload list) and, when
    `out_dir` is given, write quality_report.json and quality_report.png there. See the module doc.

    samples: prompts per workload (None: every held-out one). `prompts` ({name: [(id, ids)]}) replaces
    the workloads with token-id prompts (tests, API callers; they are taken as held-out). A pair
    directory (target/ + draft/) stands for a checkpoint and its draft."""
    if max_new_tokens < 1:
        raise TrtspecError(f"max_new_tokens: expected a positive integer, got {max_new_tokens}")
    if max_k < 1:
        raise TrtspecError(f"max_k: expected a positive integer, got {max_k}")
    if samples is not None and samples < 1:  # 0 would read as "every prompt" below
        raise TrtspecError(f"samples: expected a positive integer or None (every held-out prompt), got {samples}")
    for p, name in ((quant_ckpt, "quant_ckpt"), (ref_ckpt, "ref_ckpt"), (draft_ckpt, "draft_ckpt"),
                    (ref_draft_ckpt, "ref_draft_ckpt")):
        if p is not None and not Path(p).is_dir():
            raise TrtspecError(f"{name}: {p}: not a checkpoint directory")
    quant_ckpt, draft_ckpt = resolve_pair(Path(quant_ckpt), draft_ckpt)
    ref_ckpt, ref_draft_ckpt = resolve_pair(Path(ref_ckpt), ref_draft_ckpt)
    if ref_draft_ckpt is None:
        ref_draft_ckpt = draft_ckpt  # same draft on both sides: the delta isolates the target
    if draft_ckpt is None and ref_draft_ckpt is not None:
        raise TrtspecError("ref_draft_ckpt: needs `draft_ckpt` (the quantized pair's draft)")
    say = progress or (lambda msg: None)
    qm = load_models(quant_ckpt, draft_ckpt)
    rm = load_models(ref_ckpt, ref_draft_ckpt)
    check_same_model(quant_ckpt, ref_ckpt, qm.tokenizer, rm.tokenizer)
    if qm.target.spec.vocab_size != rm.target.spec.vocab_size:
        raise TrtspecError(f"{quant_ckpt} and {ref_ckpt}: vocabularies differ ({qm.target.spec.vocab_size} vs "
                           f"{rm.target.spec.vocab_size}); compare a checkpoint with its own unquantized source")
    if (qm.eagle is None) != (rm.eagle is None):
        raise TrtspecError(f"{quant_ckpt} and {ref_ckpt}: one is an EAGLE checkpoint and the other is not")
    if qm.eagle is not None:
        max_k = min(max_k, qm.eagle.num_levels, rm.eagle.num_levels)
    sets = prompt_sets(quant_ckpt, ref_ckpt, rm, qm, workloads, prompts, samples, seed)
    report_workloads: dict[str, dict] = {}
    for name, meta, items in sets:
        if not items:
            raise TrtspecError(f"workload {name}: no prompts")
        say(f"quality report {name}: {len(items)} prompts x {max_new_tokens} tokens")
        report_workloads[name] = workload_entry(rm, qm, meta, items, max_new_tokens, max_k)

    agreements = [w["top1_agreement"] for w in report_workloads.values() if w["top1_agreement"] is not None]
    report = {
        "schema": SCHEMA,
        "trtspec_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quantized": {"path": str(Path(quant_ckpt).resolve()), "quantization": quant_block(quant_ckpt),
                      "mixed_precision": mixed_precision(quant_ckpt),
                      "draft": str(Path(draft_ckpt).resolve()) if draft_ckpt else None,
                      "draft_quantization": quant_block(draft_ckpt) if draft_ckpt else None},
        "reference": {"path": str(Path(ref_ckpt).resolve()), "quantization": quant_block(ref_ckpt),
                      "draft": str(Path(ref_draft_ckpt).resolve()) if ref_draft_ckpt else None},
        "options": {"max_new_tokens": max_new_tokens, "samples": samples, "seed": seed, "max_k": max_k,
                    "runtime_dtype": str(qm.target.dtype), "temperature": 0.0},
        "definitions": DEFINITIONS,
        "workloads": report_workloads,
        "summary": {"min_top1_agreement": min(agreements) if agreements else None,
                    "max_logit_rmse": max((w["logit_rmse"] for w in report_workloads.values()
                                           if w["logit_rmse"] is not None), default=None)},
    }
    if out_dir is not None:
        write_report(report, Path(out_dir))
    return report


def prompt_sets(quant_ckpt: Path, ref_ckpt: Path, rm, qm, workloads: list, prompts: dict | None,
                samples: int | None, seed: int) -> list[tuple[str, dict, list[tuple[str, list[int]]]]]:
    """[(workload, provenance, [(sample id, prompt ids)])]: token-id `prompts` as given, else each
    workload's held-out samples rendered with the reference's tokenizer (chat template)."""
    sets: list[tuple[str, dict, list[tuple[str, list[int]]]]] = []
    if prompts is not None:
        for name, items in prompts.items():
            items = list(items)[:samples] if samples else list(items)
            sets.append((name, {"source": "token-ids", "held_out": True, "excluded_calibration_samples": 0},
                         [(str(i), list(map(int, ids))) for i, ids in items]))
    else:
        tok = rm.tokenizer or qm.tokenizer
        if tok is None:
            raise TrtspecError(f"{ref_ckpt}: no tokenizer files; workload prompts are rendered with the chat template")
        calib_ids = calibration_ids(quant_ckpt)
        for w in workloads:
            chosen, flag, excluded = held_out_samples(w, calib_ids, samples, seed)
            sets.append((w.name, {"source": w.source, "held_out": flag, "excluded_calibration_samples": excluded},
                         [(s.id, render(s, tok)) for s in chosen]))
    if not sets:
        raise TrtspecError("workloads: no workload to report on")
    return sets


def workload_entry(rm, qm, meta: dict, items: list[tuple[str, list[int]]], max_new_tokens: int, max_k: int) -> dict:
    """One workload of the report: the reference's continuations, both models teacher-forced on
    them (PooledMetrics), and with drafters the acceptance of both pairs."""
    ref_acc = pair_acceptance(rm, items, max_new_tokens, max_k)
    if ref_acc is not None:  # the profiler's greedy outputs are the reference continuations
        outputs = [p.output_ids for p in ref_acc[2]]
    else:
        outputs = [r.output_ids[:max_new_tokens]
                   for r in generate_batch(rm, [p for _, p in items], max_new_tokens, mode="greedy")]
    acc = PooledMetrics()
    for (_, prompt), out in zip(items, outputs):
        seq = list(prompt) + list(out)
        acc.add(teacher_forced_logits(rm.target, seq), teacher_forced_logits(qm.target, seq), seq, len(prompt))
    entry = {**meta, "num_samples": len(items), "sample_ids": [i for i, _ in items], **acc.result(),
             "acceptance": None}
    q_acc = pair_acceptance(qm, items, max_new_tokens, max_k) if ref_acc is not None else None
    if ref_acc is not None and q_acc is not None:
        delta_se = {str(k): paired_ratio_delta_se(al_counts(ref_acc[0], ref_acc[2], k, max_k),
                                                  al_counts(q_acc[0], q_acc[2], k, max_k))
                    for k in range(1, max_k + 1)}
        entry["acceptance"] = acceptance_delta(ref_acc[0], ref_acc[1], q_acc[1], max_k, delta_se)
    return entry


def acceptance_delta(mode: str, rs: dict, qs: dict, max_k: int, delta_se: dict) -> dict:
    """Both pairs' acceptance lengths by K (with their standard errors over prompts) and quantized -
    reference, with the paired standard error `delta_se` ({K: se})."""
    delta = {k: (None if qs["accept_length_by_k"][k] is None or rs["accept_length_by_k"][k] is None
                 else qs["accept_length_by_k"][k] - rs["accept_length_by_k"][k])
             for k in rs["accept_length_by_k"]}
    keys = ("mean_accept_length", "accept_length_by_k", "accept_length_se_by_k")
    return {"mode": mode, "max_k": max_k,
            "reference": {k: rs[k] for k in keys}, "quantized": {k: qs[k] for k in keys},
            "delta_by_k": delta, "delta_se_by_k": delta_se,
            "delta_at_max_k": delta[str(max_k)], "delta_se_at_max_k": delta_se[str(max_k)]}


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    """quality_report.json and quality_report.png in `out_dir` (each written atomically)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise TrtspecError(f"{out_dir}: exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    js = out_dir / JSON_NAME
    write_text_atomic(js, json.dumps(report, indent=2) + "\n")
    return js, plot_report(report, out_dir / PNG_NAME)


# ---- the report `trtspec quantize` writes ----------------------------------------------------------

def report_after_quantize(hf: Path, quant_out: Path, options: QualityReportOptions, seed: int = 0,
                          draft_hf: Path | None = None, eagle_head: Path | None = None,
                          convert: ConvertOptions | None = None, progress=None, report_dir: Path | None = None) -> dict:
    """The report `trtspec quantize` and the recipe's quantize stage write into `quant_out/quant_report`
    (or `report_dir`).

    The reference is the same HF model (and draft / EAGLE head) converted unquantized in float32
    into a temporary directory (deleted afterwards). The runtime computes in float32, so the
    reference is exactly the HF weights. `seed` is the quantization's (the prompt sampling's) seed;
    `convert` its conversion options (EAGLE limits, allow_pickle; dtype and tp are the reference's own)."""
    wls = load_workloads([f"{n}={s}" for n, s in options.workloads.items()], seed=seed)
    ref_options = (convert or ConvertOptions()).model_copy(update={"dtype": "float32", "tp": 1})
    with tempfile.TemporaryDirectory(prefix="trtspec-quant-ref-") as tmp:
        ref = convert_ckpt(hf, Path(tmp) / "ref", ref_options, eagle_head=eagle_head)
        ref_draft = None
        if draft_hf is not None:
            ref_draft = convert_ckpt(draft_hf, Path(tmp) / "ref_draft", ref_options)
        out_dir = Path(report_dir) if report_dir is not None else Path(quant_out) / REPORT_DIR
        return quality_report(quant_out, ref, wls, out_dir, ref_draft_ckpt=ref_draft,
                              max_new_tokens=options.max_new_tokens, samples=options.samples, seed=seed,
                              max_k=options.max_k, progress=progress)


def report_or_warning(hf: Path, quant_out: Path, options: QualityReportOptions, warn, **kw) -> dict | None:
    """report_after_quantize, where a report that cannot be made is a warning (`warn(text)`), not a
    failure: the checkpoint is complete and valid by then. The CLI and the recipe stage both use it."""
    try:
        return report_after_quantize(hf, quant_out, options, **kw)
    except TrtspecError as e:
        warn(f"quality report not written: {e}")
        return None
