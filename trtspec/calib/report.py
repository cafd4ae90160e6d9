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
- **perplexity** = exp(mean NLL), token-weighted over the samples, of each model on (a) the prompt
  tokens s_1 .. s_{P-1} (`perplexity.prompt`: real text the reference did not write, chat-template
  tokens included) and (b) the reference continuation (`perplexity.continuation`: biased in the
  reference's favour, since it is the reference's own greedy text; read it as "how far the quantized
  model drifts from the reference's choices"). `ratio` = quantized / reference.
- **mixed precision.** A checkpoint written with `--exclude`/`--keep-sensitive` is reported as is
  (its unquantized GEMMs run unquantized); `quantized.mixed_precision` says which and how many.
- **held-out prompts.** The prompts are drawn (seeded) only from samples not used for calibration:
  the quantized checkpoint's `trtspec.json` lists, per calibration source, the sample ids it was
  calibrated on (`options.calibration.sources[].ids`; multi-turn records appear as `ID#turnN`, and
  the record `ID` counts as used when any of its turns was). A workload whose source was entirely
  used for calibration is reported on calibration prompts instead, with `held_out: false` and a
  warning, rather than not at all.
- **acceptance length** (when a draft, or an EAGLE checkpoint, is given): each *pair* (quantized
  target + quantized draft, reference target + reference draft) is profiled on the same prompts with
  the acceptance profiler (trtspec.tuning.profile: each pair decodes its own greedy output, as a
  lossless speculative run would) and replayed (trtspec.tuning.acceptance.summarize) for every
  K = 1..max_k: `accept_length_by_k` of both and `delta_by_k` = quantized - reference. For EAGLE
  the chain is the drafter's top-1 chain. With no `ref_draft_ckpt`, the reference pair uses the
  same draft as the quantized pair (then the delta isolates the target's quantization).

Outputs in `out_dir` (written atomically): `quality_report.json` (schema `trtspec.quant-report/1`),
`quality_report.png`; `print_report` prints a rich table.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import sys
from pathlib import Path

import torch

from ..errors import TrtspecError
from ..fsutil import read_json, write_text_atomic

SCHEMA = "trtspec.quant-report/1"
JSON_NAME, PNG_NAME = "quality_report.json", "quality_report.png"
DEFAULT_MAX_K = 4

DEFINITIONS = {
    "logit_rmse": "sqrt(mean((logits_quant - logits_ref)^2)) over generated positions x vocab, pooled",
    "top1_agreement": "fraction of generated positions where argmax(quant) == argmax(ref), pooled",
    "perplexity.prompt": "exp(mean NLL) of each model on the held-out prompt tokens (teacher-forced)",
    "perplexity.continuation": "exp(mean NLL) of each model on the reference's greedy continuation",
    "sequences": "prompt + the reference model's greedy continuation; both models teacher-forced on it",
    "held_out": "prompts drawn from samples whose ids are not in the quantized checkpoint's calibration set",
    "acceptance": "acceptance length (tokens per target verify step) replayed from the profiler, K = 1..max_k; "
                  "delta = quantized pair - reference pair",
}


# ---- held-out selection -----------------------------------------------------------------------------

def _base_id(sample_id: str) -> str:
    return re.sub(r"#turn\d+$", "", str(sample_id))


def calibration_ids(ckpt: Path) -> dict[str, set[str]]:
    """Calibration sample ids (record ids, turn suffix dropped) per source, from the checkpoint's
    `trtspec.json` (a pair directory's target/, or the checkpoint itself). Empty when not recorded."""
    from ..runtime.generate import resolve_pair

    target, _ = resolve_pair(Path(ckpt), None)
    path = Path(target) / "trtspec.json"
    if not path.is_file():
        return {}
    calib = (read_json(path, "trtspec.json manifest").get("options") or {}).get("calibration") or {}
    out: dict[str, set[str]] = {}
    for src in calib.get("sources") or []:
        out.setdefault(str(src.get("source")), set()).update(_base_id(i) for i in src.get("ids") or [])
    return out


def held_out_samples(workload, calib_ids: dict[str, set[str]], samples: int | None, seed: int):
    """(samples drawn from the held-out ones, held_out flag, number of calibration samples excluded)."""
    from ..workloads.sample import select

    used = calib_ids.get(workload.source, set())
    held = [s for s in workload.samples if _base_id(s.id) not in used]
    excluded = len(workload.samples) - len(held)
    pool, flag = (held, True) if held else (list(workload.samples), False)
    if not held:
        print(f"warning: workload {workload.name} ({workload.source}): every sample was used for calibration; "
              "reporting on calibration prompts (held_out: false)", file=sys.stderr)
    return select(pool, f"workload {workload.name!r}", None, samples, seed), flag, excluded


# ---- metrics ----------------------------------------------------------------------------------------

@torch.inference_mode()
def _logits(decoder, seq: list[int]) -> torch.Tensor:
    logits, _ = decoder.forward(torch.tensor([seq]), decoder.new_cache(1, len(seq)))
    return logits[0].float()


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> float:
    return float(-torch.log_softmax(logits.double(), -1).gather(-1, targets[:, None]).sum())


class _Acc:
    """Pooled sums over all samples of one workload."""

    def __init__(self):
        self.sq = 0.0
        self.max_abs = 0.0
        self.n_logits = 0
        self.agree = self.positions = 0
        self.agree_prompt = self.positions_prompt = 0
        self.nll = {"prompt": [0.0, 0.0], "continuation": [0.0, 0.0]}  # [ref, quant]
        self.ntok = {"prompt": 0, "continuation": 0}

    def add(self, lr: torch.Tensor, lq: torch.Tensor, seq: list[int], prompt_len: int) -> None:
        tokens = torch.tensor(seq)
        P, L = prompt_len, len(seq)
        gen = slice(P - 1, L - 1)  # positions predicting the continuation tokens s[P..L-1]
        if L > P:
            d = (lq[gen] - lr[gen]).double()
            self.sq += float((d * d).sum())
            self.max_abs = max(self.max_abs, float(d.abs().max()))
            self.n_logits += d.numel()
            self.agree += int((lq[gen].argmax(-1) == lr[gen].argmax(-1)).sum())
            self.positions += L - P
            for i, lg in enumerate((lr, lq)):
                self.nll["continuation"][i] += _nll(lg[gen], tokens[P:])
            self.ntok["continuation"] += L - P
        if P > 1:
            pr = slice(0, P - 1)
            self.agree_prompt += int((lq[pr].argmax(-1) == lr[pr].argmax(-1)).sum())
            self.positions_prompt += P - 1
            for i, lg in enumerate((lr, lq)):
                self.nll["prompt"][i] += _nll(lg[pr], tokens[1:P])
            self.ntok["prompt"] += P - 1

    def result(self) -> dict:
        def ppl(kind):
            n = self.ntok[kind]
            if not n:
                return {"tokens": 0, "reference": None, "quantized": None, "ratio": None}
            r, q = (math.exp(x / n) for x in self.nll[kind])
            return {"tokens": n, "reference": r, "quantized": q, "ratio": q / r}

        return {"positions": self.positions,
                "logit_rmse": math.sqrt(self.sq / self.n_logits) if self.n_logits else None,
                "logit_max_abs": self.max_abs if self.n_logits else None,
                "top1_agreement": self.agree / self.positions if self.positions else None,
                "top1_agreement_prompt": self.agree_prompt / self.positions_prompt if self.positions_prompt else None,
                "perplexity": {"prompt": ppl("prompt"), "continuation": ppl("continuation")}}


def _acceptance(models, prompts, max_new_tokens: int, max_k: int):
    """(mode, per-workload summary, profiles) of a pair, or None when the models have no drafter."""
    from ..tuning.acceptance import summarize
    from ..tuning.profile import profile_prompts

    if models.draft is None and models.eagle is None:
        return None
    mode = "eagle" if models.eagle is not None else "draft-target"
    profiles = profile_prompts(models, prompts, max_new_tokens, max_k)
    lists = [p.rank_paths if mode == "eagle" else p.match_lengths for p in profiles]
    return mode, summarize(mode, lists, max_k), profiles


def mixed_precision(ckpt: Path) -> dict | None:
    """What `trtspec quantize --exclude/--keep-sensitive` kept in the model dtype (the manifest's
    options.mixed_precision, sensitivity scores left out), or None for a uniform checkpoint."""
    path = Path(ckpt) / "trtspec.json"
    if not path.is_file():
        return None
    mixed = (read_json(path, "trtspec.json manifest").get("options") or {}).get("mixed_precision")
    if not mixed:
        return None
    sens = mixed.get("sensitivity") or {}
    return {k: mixed.get(k) for k in ("excluded_gemms", "total_gemms", "excluded_linears", "exclude_patterns",
                                      "keep_sensitive")} | {"sensitivity_kept": sens.get("kept")}


def _quant_block(ckpt: Path) -> dict:
    cfg = Path(ckpt) / "config.json"
    return (read_json(cfg, "TRT-LLM config.json").get("quantization") or {}) if cfg.is_file() else {}


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
    from .. import __version__
    from ..runtime.generate import generate_batch, load_models, resolve_pair
    from ..workloads import render

    if max_new_tokens < 1:
        raise TrtspecError(f"--max-new-tokens: expected a positive integer, got {max_new_tokens}")
    if max_k < 1:
        raise TrtspecError(f"--max-k: expected a positive integer, got {max_k}")
    for p, what in ((quant_ckpt, "--ckpt"), (ref_ckpt, "--ref"), (draft_ckpt, "--draft-ckpt"),
                    (ref_draft_ckpt, "--ref-draft-ckpt")):
        if p is not None and not Path(p).is_dir():
            raise TrtspecError(f"{what} {p}: not a checkpoint directory")
    quant_ckpt, draft_ckpt = resolve_pair(Path(quant_ckpt), draft_ckpt)
    ref_ckpt, ref_draft_ckpt = resolve_pair(Path(ref_ckpt), ref_draft_ckpt)
    if ref_draft_ckpt is None:
        ref_draft_ckpt = draft_ckpt  # same draft on both sides: the delta isolates the target
    if draft_ckpt is None and ref_draft_ckpt is not None:
        raise TrtspecError("--ref-draft-ckpt needs --draft-ckpt (the quantized pair's draft)")
    say = progress or (lambda msg: None)
    qm = load_models(quant_ckpt, draft_ckpt)
    rm = load_models(ref_ckpt, ref_draft_ckpt)
    if qm.target.spec.vocab_size != rm.target.spec.vocab_size:
        raise TrtspecError(f"{quant_ckpt} and {ref_ckpt}: vocabularies differ ({qm.target.spec.vocab_size} vs "
                           f"{rm.target.spec.vocab_size}); compare a checkpoint with its own unquantized source")
    if (qm.eagle is None) != (rm.eagle is None):
        raise TrtspecError(f"{quant_ckpt} and {ref_ckpt}: one is an EAGLE checkpoint and the other is not")
    if qm.eagle is not None:
        max_k = min(max_k, qm.eagle.num_levels, rm.eagle.num_levels)
    calib_ids = calibration_ids(quant_ckpt)

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
        for w in workloads:
            chosen, flag, excluded = held_out_samples(w, calib_ids, samples, seed)
            sets.append((w.name, {"source": w.source, "held_out": flag, "excluded_calibration_samples": excluded},
                         [(s.id, render(s, tok)) for s in chosen]))
    if not sets:
        raise TrtspecError("--workloads: no workload to report on")

    report_workloads: dict[str, dict] = {}
    for name, meta, items in sets:
        if not items:
            raise TrtspecError(f"workload {name}: no prompts")
        say(f"quality report {name}: {len(items)} prompts x {max_new_tokens} tokens")
        ref_acc = _acceptance(rm, items, max_new_tokens, max_k)
        if ref_acc is not None:  # the profiler's greedy outputs are the reference continuations
            outputs = [p.output_ids for p in ref_acc[2]]
        else:
            outputs = [r.output_ids[:max_new_tokens]
                       for r in generate_batch(rm, [p for _, p in items], max_new_tokens, mode="greedy")]
        acc = _Acc()
        for (_, prompt), out in zip(items, outputs):
            seq = list(prompt) + list(out)
            acc.add(_logits(rm.target, seq), _logits(qm.target, seq), seq, len(prompt))
        entry = {**meta, "num_samples": len(items), "sample_ids": [i for i, _ in items], **acc.result(),
                 "acceptance": None}
        q_acc = _acceptance(qm, items, max_new_tokens, max_k) if ref_acc is not None else None
        if ref_acc is not None and q_acc is not None:
            rs, qs = ref_acc[1], q_acc[1]
            delta = {k: (None if qs["accept_length_by_k"][k] is None or rs["accept_length_by_k"][k] is None
                         else qs["accept_length_by_k"][k] - rs["accept_length_by_k"][k])
                     for k in rs["accept_length_by_k"]}
            entry["acceptance"] = {
                "mode": ref_acc[0], "max_k": max_k,
                "reference": {"mean_accept_length": rs["mean_accept_length"],
                              "accept_length_by_k": rs["accept_length_by_k"]},
                "quantized": {"mean_accept_length": qs["mean_accept_length"],
                              "accept_length_by_k": qs["accept_length_by_k"]},
                "delta_by_k": delta, "delta_at_max_k": delta[str(max_k)]}
        report_workloads[name] = entry

    agreements = [w["top1_agreement"] for w in report_workloads.values() if w["top1_agreement"] is not None]
    report = {
        "schema": SCHEMA,
        "trtspec_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quantized": {"path": str(Path(quant_ckpt).resolve()), "quantization": _quant_block(quant_ckpt),
                      "mixed_precision": mixed_precision(quant_ckpt),
                      "draft": str(Path(draft_ckpt).resolve()) if draft_ckpt else None,
                      "draft_quantization": _quant_block(draft_ckpt) if draft_ckpt else None},
        "reference": {"path": str(Path(ref_ckpt).resolve()), "quantization": _quant_block(ref_ckpt),
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


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    """quality_report.json and quality_report.png in `out_dir` (each written atomically)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise TrtspecError(f"{out_dir}: exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    js = out_dir / JSON_NAME
    write_text_atomic(js, json.dumps(report, indent=2) + "\n")
    return js, plot_report(report, out_dir / PNG_NAME)


def plot_report(report: dict, path: Path) -> Path:
    """Left: top-1 agreement per workload; middle: prompt perplexity of both models; right (with a
    draft): acceptance length against K for both pairs. Saved atomically (temp file + rename)."""
    import os
    import tempfile

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wl = report["workloads"]
    names = list(wl)
    with_al = any(w.get("acceptance") for w in wl.values())
    fig, axes = plt.subplots(1, 3 if with_al else 2, figsize=(14 if with_al else 9.5, 4))
    ax = axes[0]
    vals = [100 * (wl[n]["top1_agreement"] or 0.0) for n in names]
    bars = ax.bar(names, vals, color="tab:blue")
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set(ylabel="top-1 agreement with reference (%)", ylim=(0, 105), title="top-1 agreement")
    ax.grid(alpha=0.3, axis="y")
    ax = axes[1]
    x = range(len(names))
    ref = [wl[n]["perplexity"]["prompt"]["reference"] or 0.0 for n in names]
    qnt = [wl[n]["perplexity"]["prompt"]["quantized"] or 0.0 for n in names]
    ax.bar([i - 0.2 for i in x], ref, 0.4, label="reference")
    ax.bar([i + 0.2 for i in x], qnt, 0.4, label="quantized")
    ax.set_xticks(list(x), names)
    ax.set(ylabel="perplexity (prompt tokens)", title="held-out perplexity")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    if with_al:
        ax = axes[2]
        for n in names:
            a = wl[n].get("acceptance")
            if not a:
                continue
            ks = sorted(int(k) for k in a["reference"]["accept_length_by_k"])
            line, = ax.plot(ks, [a["reference"]["accept_length_by_k"][str(k)] for k in ks], marker="o",
                            label=f"{n} reference")
            ax.plot(ks, [a["quantized"]["accept_length_by_k"][str(k)] for k in ks], marker="s", ls="--",
                    color=line.get_color(), label=f"{n} quantized")
        ax.set(xlabel="draft length K", ylabel="acceptance length", title="acceptance length vs K")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"quantized vs reference: {Path(report['quantized']['path']).name}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return path


def _fmt(x, spec=".4f") -> str:
    return "-" if x is None else format(x, spec)


def report_table(report: dict):
    from rich.table import Table

    mixed = report["quantized"].get("mixed_precision")
    kept = f", {mixed['excluded_gemms']}/{mixed['total_gemms']} GEMMs unquantized" if mixed else ""
    t = Table(title=f"quantization quality ({report['quantized']['quantization'].get('quant_algo')}, "
                    f"KV {report['quantized']['quantization'].get('kv_cache_quant_algo')}{kept}) vs reference")
    for col in ("workload", "samples", "held-out", "positions", "logit RMSE", "top-1 agree", "ppl ref",
                "ppl quant", "AL ref", "AL quant", "ΔAL"):
        t.add_column(col, justify="left" if col == "workload" else "right")
    for name, w in report["workloads"].items():
        a = w.get("acceptance")
        k = str(a["max_k"]) if a else None
        ppl = w["perplexity"]["prompt"]
        t.add_row(name, str(w["num_samples"]), "yes" if w["held_out"] else "no", str(w["positions"]),
                  _fmt(w["logit_rmse"]), _fmt(w["top1_agreement"] and 100 * w["top1_agreement"], ".1f") + "%",
                  _fmt(ppl["reference"], ".2f"), _fmt(ppl["quantized"], ".2f"),
                  _fmt(a["reference"]["accept_length_by_k"][k], ".3f") if a else "-",
                  _fmt(a["quantized"]["accept_length_by_k"][k], ".3f") if a else "-",
                  (_fmt(a["delta_at_max_k"], "+.3f") + f" (K={k})") if a else "-")
    return t


def print_report(report: dict, console=None) -> None:
    from rich.console import Console

    (console or Console()).print(report_table(report))


# ---- the report `trtspec quantize` writes ----------------------------------------------------------

def report_after_quantize(hf: Path, quant_out: Path, report_dir: Path, workloads: str = "chat=mt-bench",
                          samples: int = 4, max_new_tokens: int = 32, seed: int = 0, draft_hf: Path | None = None,
                          eagle_head: Path | None = None, eagle_opts: dict | None = None,
                          allow_pickle: bool = False, max_k: int = DEFAULT_MAX_K, progress=None) -> dict:
    """The reference is the same HF model (and draft / EAGLE head) converted unquantized in float32
    into a temporary directory (deleted afterwards); the report goes to `report_dir`. The runtime
    computes in float32, so the reference is exactly the HF weights."""
    import tempfile

    from ..checkpoints.convert import convert_hf
    from ..workloads import load_workloads

    wls = load_workloads(workloads, seed=seed)
    with tempfile.TemporaryDirectory(prefix="trtspec-quant-ref-") as tmp:
        ref = Path(tmp) / "ref"
        ref_draft = None
        if eagle_head is not None:
            from ..checkpoints.eagle import convert_eagle

            convert_eagle(hf, eagle_head, ref, dtype="float32", allow_pickle=allow_pickle, **(eagle_opts or {}))
        else:
            convert_hf(hf, ref, dtype="float32")
        if draft_hf is not None:
            ref_draft = Path(tmp) / "ref_draft"
            convert_hf(draft_hf, ref_draft, dtype="float32")
        report = quality_report(quant_out, ref, wls, report_dir, ref_draft_ckpt=ref_draft,
                                max_new_tokens=max_new_tokens, samples=samples, seed=seed, max_k=max_k,
                                progress=progress)
    return report
