"""HF model (+ EAGLE head, or + draft) -> quantized TRT-LLM checkpoint(s).

Every request is checked before any work starts (refusals.py); then the prompts are rendered,
the model is loaded in float32, ModelOpt calibrates it (on `quantization.device`: the CPU by default, or a
GPU; the calibrated model comes back to the CPU), and the exporter writes
the checkpoint through the same plans and writer as the plain converter, into a temporary sibling
directory that is renamed into place only after the offline self-check passed.

- EAGLE (the official route, trtllm.md §4.6): the head is quantized with the base, calibrated on
  the base's features in the same forward loop; its lm_head stays in the model dtype; its
  attention gets KV scales; `eagle_net_config.quantization` is the top-level block.
- Draft-target pairs: target and draft are quantized independently on the same prompts, with
  the same format and KV format unless `draft_format` says otherwise ("none": the draft is only
  converted). TRT-LLM runs them as two engines, so nothing ties their formats together.

Memory: calibration needs the whole model in float32 (4 bytes/parameter) plus ModelOpt's
quantizer state; the checkpoint is then written one tensor at a time. W8A16 without a KV format
needs no calibration and streams from disk like `trtspec convert`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..upstream import trtllm
from ..checkpoints.convert import prepare_decoder, write_decoder
from ..checkpoints.eagle import check_eagle_options, open_eagle
from ..checkpoints.layout import eagle_plans
from ..checkpoints.options import ConvertOptions
from ..checkpoints.pair import check_same_tokenizer
from ..checkpoints.quant import check_group_size
from ..checkpoints.scheme import QuantScheme
from ..checkpoints.writer import source_record, write_manifest
from ..errors import TrtspecError
from ..fsutil import atomic_dir, check_output_dir
from ..tokenizer import load_tokenizer
from .data import CalibSet, check_calib_options, load_calib_set, token_id_set
from .eagle_quant import calibrate_eagle, write_quantized_eagle
from .formats import QuantFormat, check_format, check_kv_format
from .hf_export import quantize_hf_unified, quantize_pair_unified
from .mixed import check_keep_count, check_mixed_algo, hf_modules, resolve_excludes
from .options import QuantizeOptions
from .pipeline import (KeepSensitive, calibrate_decoder, exclude_sensitive, mixed_record, needs_calibration,
                       write_quantized_decoder)
from .refusals import check_request, quant_dtype


@dataclass
class CalibOptions:
    """Where the calibration prompts come from: workloads (`calib`) or token ids (`prompts`)."""

    calib: str | list[str] | None = "mt-bench"
    samples: int = 512
    seq_len: int = 512
    seed: int = 0
    prompts: list[list[int]] | None = None  # overrides `calib` (tests, API callers)
    device: str = "cpu"  # where the calibration forward passes run (calibrate.calib_device)

    def load(self, tokenizer_dir: Path) -> CalibSet:
        return replace(self._load(tokenizer_dir), device=self.device)

    def _load(self, tokenizer_dir: Path) -> CalibSet:
        if self.prompts is not None:
            return token_id_set(self.prompts, self.samples, self.seq_len)
        if not self.calib:
            raise TrtspecError("quantization.calib: no calibration source given")
        tok = load_tokenizer(tokenizer_dir, "the model's")
        if tok is None:
            raise TrtspecError(f"{tokenizer_dir}: no tokenizer files; calibration prompts are rendered with "
                               "the model's tokenizer (and chat template)")
        return load_calib_set(self.calib, tok, self.samples, self.seq_len, self.seed)


def _layout(fmt: QuantFormat, kv_algo: str | None, group_size: int) -> QuantScheme:
    return QuantScheme(fmt.quant_algo, kv_algo, group_size)


def quantize_hf(hf_dir: Path, out_dir: Path, fmt: str = "fp8", kv_cache: str | None = None,
                calib: CalibOptions | None = None, dtype: str = "auto", tp: int = 1,
                group_size: int = trtllm.AWQ_DEFAULT_GROUP_SIZE, overwrite: bool = False,
                exclude: list[str] | None = None, keep_sensitive: KeepSensitive | None = None) -> Path:
    """Quantize the HF decoder in `hf_dir` into a TRT-LLM checkpoint at `out_dir`.

    exclude: fnmatch patterns of TRT-LLM linears kept in the model dtype; keep_sensitive: keep
    the N most sensitive ones as well, measured after calibration (mixed.py)."""
    hf_dir, out_dir, calib = Path(hf_dir), Path(out_dir), calib or CalibOptions()
    qfmt, kv_algo = check_format(fmt), check_kv_format(kv_cache)
    layout = _layout(qfmt, kv_algo, group_size)
    check_request(layout, speculative=None)
    check_calib_options(calib.samples, calib.seq_len)
    keep = check_keep_sensitive(keep_sensitive, layout.quant_algo)
    check_output_dir(out_dir, overwrite)
    d = prepare_decoder(hf_dir, quant_dtype(dtype, hf_dir), tp)
    layout = replace(layout, exclude=resolve_excludes(exclude or [], d.plans, layout.quant_algo))
    if keep is not None:
        check_keep_count(keep.count, d.plans, layout)
    check_group_size(d.plans, layout, tp, str(hf_dir / "config.json"))
    data = calib.load(hf_dir) if needs_calibration(layout) else None
    mixed = None
    with atomic_dir(out_dir, overwrite) as tmp:
        cal = calibrate_decoder(hf_dir, qfmt, layout, data, hf_modules(d.plans, set(layout.exclude))) if data else None
        sensitivity = None
        if keep is not None:
            layout, sensitivity = exclude_sensitive(d, qfmt, layout, cal, keep)
        if layout.exclude or keep is not None:
            mixed = mixed_record(layout, d, exclude, keep, sensitivity)
        write_quantized_decoder(d, tmp, qfmt, layout, cal, mixed)
    return out_dir


def check_keep_sensitive(keep: KeepSensitive | None, algo: str | None) -> KeepSensitive | None:
    """None when nothing is to be measured (absent, or a count of 0)."""
    if keep is None or keep.count == 0:
        return None
    for value, field, low in ((keep.count, "keep_sensitive", 0), (keep.samples, "sensitivity_samples", 1),
                              (keep.seq_len, "sensitivity_seq_len", 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise TrtspecError(f"quantization.{field}: expected an integer >= {low}, got {value!r}")
    check_mixed_algo(algo, "quantization.keep_sensitive")
    return keep


def quantize_pair(target_hf: Path, draft_hf: Path, out_dir: Path, fmt: str = "fp8", kv_cache: str | None = None,
                  draft_format: str | None = None, calib: CalibOptions | None = None, dtype: str = "auto",
                  tp: int = 1, group_size: int = trtllm.AWQ_DEFAULT_GROUP_SIZE, overwrite: bool = False) -> Path:
    """`out_dir/target` and `out_dir/draft`, each quantized on its own (see module doc)."""
    target_hf, draft_hf, out_dir, calib = Path(target_hf), Path(draft_hf), Path(out_dir), calib or CalibOptions()
    qfmt, kv_algo = check_format(fmt), check_kv_format(kv_cache)
    dfmt = (qfmt if draft_format in (None, "same") else
            None if draft_format == "none" else check_format(draft_format, "quantization.draft_format"))
    layout = _layout(qfmt, kv_algo, group_size)
    d_layout = _layout(dfmt, kv_algo, group_size) if dfmt else None
    check_request(layout, speculative="draft-target")
    if d_layout:
        check_request(d_layout, speculative="draft-target")
    check_calib_options(calib.samples, calib.seq_len)
    check_output_dir(out_dir, overwrite)
    size = check_same_tokenizer(target_hf, draft_hf)
    target = prepare_decoder(target_hf, quant_dtype(dtype, target_hf), tp)
    draft = prepare_decoder(draft_hf, quant_dtype(dtype, draft_hf), tp)
    check_group_size(target.plans, layout, tp, str(target_hf / "config.json"))
    if d_layout:
        check_group_size(draft.plans, d_layout, tp, str(draft_hf / "config.json"))
    needs = needs_calibration(layout) or (d_layout is not None and needs_calibration(d_layout))
    data = calib.load(target_hf) if needs else None  # one tokenizer: the same prompts for both
    with atomic_dir(out_dir, overwrite) as tmp:
        (tmp / "target").mkdir()
        write_quantized_decoder(target, tmp / "target", qfmt, layout,
                                calibrate_decoder(target_hf, qfmt, layout, data) if needs_calibration(layout) else None)
        (tmp / "draft").mkdir()
        if d_layout is None:
            write_decoder(draft, tmp / "draft")
        else:
            write_quantized_decoder(draft, tmp / "draft", dfmt, d_layout,
                                    calibrate_decoder(draft_hf, dfmt, d_layout, data)
                                    if needs_calibration(d_layout) else None)
        write_manifest(tmp, "draft-target-pair",
                       [source_record("target", target.hf_dir, target.weights),
                        source_record("draft", draft.hf_dir, draft.weights)],
                       {"dtype": target.dtype, "tp": target.tp, "draft_tp": draft.tp, "tokenizer_size": size,
                        "format": qfmt.name, "draft_format": dfmt.name if dfmt else "none",
                        "kv_cache_quant_algo": kv_algo})
    return out_dir


def quantize_eagle(base_hf: Path, head_dir: Path, out_dir: Path, fmt: str = "fp8", kv_cache: str | None = None,
                   calib: CalibOptions | None = None, dtype: str = "auto", tp: int = 1,
                   group_size: int = trtllm.AWQ_DEFAULT_GROUP_SIZE,
                   max_draft_len: int = trtllm.EAGLE_DEFAULT_MAX_DRAFT_LEN,
                   num_eagle_layers: int = trtllm.EAGLE_DEFAULT_NUM_LAYERS,
                   max_non_leaves: int = trtllm.EAGLE_DEFAULT_MAX_NON_LEAVES,
                   allow_pickle: bool = False, overwrite: bool = False) -> Path:
    """Base + EAGLE-1 head -> one quantized EagleForCausalLM checkpoint (see module doc)."""
    base_hf, head_dir, out_dir, calib = Path(base_hf), Path(head_dir), Path(out_dir), calib or CalibOptions()
    qfmt, kv_algo = check_format(fmt), check_kv_format(kv_cache)
    layout = _layout(qfmt, kv_algo, group_size)
    check_request(layout, speculative="eagle")
    check_calib_options(calib.samples, calib.seq_len)
    check_eagle_options(max_draft_len, num_eagle_layers, max_non_leaves)
    check_output_dir(out_dir, overwrite)
    base, head, sources = open_eagle(base_hf, head_dir, tp, allow_pickle)
    dtype = quant_dtype(dtype, base_hf)
    plans = eagle_plans(base, head, num_eagle_layers, "embed_tokens.weight" in sources["head"], True)
    check_group_size(plans, layout, tp, f"{base_hf} + {head_dir}")
    data = calib.load(base_hf) if needs_calibration(layout) else None
    eagle_opts = {"max_draft_len": max_draft_len, "num_eagle_layers": num_eagle_layers,
                  "max_non_leaves_per_layer": max_non_leaves}
    with atomic_dir(out_dir, overwrite) as tmp:
        calibrated = calibrate_eagle(base_hf, head, sources["head"], qfmt, layout, data) if data else None
        write_quantized_eagle(tmp, base_hf, head_dir, base, head, sources, plans, qfmt, layout, calibrated, dtype, tp,
                              eagle_opts)
    return out_dir


def quantize(hf: Path, out_dir: Path, options: QuantizeOptions, convert: ConvertOptions | None = None,
             eagle_head: Path | None = None, draft_hf: Path | None = None, overwrite: bool = False) -> Path:
    """The quantize stage: `options` is the recipe's `quantization:` section / the `trtspec quantize`
    flags, `convert` its dtype, tp and EAGLE limits. With `eagle_head` or `draft_hf` the pair is
    quantized (quantize_eagle / quantize_pair), else the plain decoder (quantize_hf)."""
    convert = convert or ConvertOptions()
    if eagle_head is not None and draft_hf is not None:
        raise TrtspecError("quantize: an EAGLE head and a draft model are mutually exclusive")
    if options.draft_format != "same" and draft_hf is None:
        raise TrtspecError("quantization.draft_format: applies to a draft-target pair; give a draft too")
    if options.mixed and (eagle_head is not None or draft_hf is not None):
        raise TrtspecError(f"{mixed_field(options)}: mixed precision (exclude, keep_sensitive) is written for a "
                           "plain decoder only, not with an EAGLE head or a draft")
    calib = CalibOptions(calib=[f"{n}={s}" for n, s in options.calib.items()] if options.calib else "mt-bench",
                         samples=options.samples, seq_len=options.seq_len, seed=options.seed, device=options.device)
    if options.output_format == "hf":
        check_hf_request(options, convert, eagle_head, draft_hf)
        args = (calib, options.format, options.kv_cache, convert.dtype, options.awq_group_size, overwrite)
        if draft_hf is not None:
            return quantize_pair_unified(hf, draft_hf, out_dir, *args)
        return quantize_hf_unified(hf, out_dir, *args)
    common = dict(fmt=options.format, kv_cache=options.kv_cache, calib=calib, dtype=convert.dtype, tp=convert.tp,
                  group_size=options.awq_group_size, overwrite=overwrite)
    if eagle_head is not None:
        e = convert.eagle
        return quantize_eagle(hf, eagle_head, out_dir, max_draft_len=e.max_draft_len,
                              num_eagle_layers=e.num_eagle_layers, max_non_leaves=e.max_non_leaves,
                              allow_pickle=convert.allow_pickle, **common)
    if draft_hf is not None:
        return quantize_pair(hf, draft_hf, out_dir, draft_format=options.draft_format, **common)
    keep = KeepSensitive(options.keep_sensitive, options.sensitivity_samples, options.sensitivity_seq_len)
    return quantize_hf(hf, out_dir, exclude=list(options.exclude), keep_sensitive=keep, **common)


def mixed_field(options: QuantizeOptions) -> str:
    """The mixed-precision field the request set (exclude wins), so a refusal names what the user gave."""
    return "quantization.exclude" if options.exclude else "quantization.keep_sensitive"


def check_hf_request(options: QuantizeOptions, convert: ConvertOptions, eagle_head: Path | None,
                     draft_hf: Path | None) -> None:
    """What `output_format: hf` does not write, refused before any work (hf_export.py writes the rest)."""
    if eagle_head is not None:
        raise TrtspecError("quantization.output_format: hf with an EAGLE head: trtspec quantizes no drafter into the "
                           "HF format (an EAGLE-1 head runs only in the engine flow: use quantization.output_format "
                           "trtllm; an EAGLE-3 head is served as is, its KV cache following the target's)")
    if draft_hf is not None and options.draft_format not in ("same", options.format):
        raise TrtspecError(f"quantization.draft_format: {options.draft_format} with quantization.output_format hf: "
                           "the pair is written in one format (draft_format same)")
    if options.mixed:
        raise TrtspecError(f"{mixed_field(options)}: mixed precision (exclude, keep_sensitive) is written for "
                           "quantization.output_format trtllm only")
    if convert.tp != 1:
        raise TrtspecError(f"convert.tp: {convert.tp} with quantization.output_format hf: the unified HF checkpoint "
                           "is not sharded (the PyTorch backend splits it at load time); use tp 1")
