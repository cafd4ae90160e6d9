"""HF decoder -> ModelOpt's unified Hugging Face checkpoint, for the PyTorch / LLM-API backend.

The calibration is the one the TRT-LLM checkpoints get (pipeline.calibrate_decoder: the model in
float32, ModelOpt's config for the format and KV format, the recipe's prompts). The calibrated
model is then cast to the checkpoint dtype as a whole, quantizer state included (what calibrating
in that dtype on a GPU leaves behind), and ModelOpt's own `export_hf_checkpoint` writes it. trtspec
computes no tensor of this format itself: the checkpoint is ModelOpt's export by construction, and
tests/calib/test_hf_export.py checks it against a direct call, tensor for tensor.

Files (ModelOpt's): config.json (with `quantization_config`), hf_quant_config.json,
model.safetensors, generation_config.json; then ours: the tokenizer files and trtspec.json. All of
it goes into a temporary sibling that is opened with the checkpoint view
(checkpoints/hf_unified.py) as a self-check before it is renamed into place. A draft-target pair
is two such checkpoints, `target/` and `draft/`, under one directory (the runtime and the
repository generator read a pair directory that way).
"""

from __future__ import annotations

from pathlib import Path
import torch

from ..checkpoints.convert import PreparedDecoder, prepare_decoder
from ..checkpoints.hf_unified import load_hf_unified
from ..checkpoints.pair import check_same_tokenizer
from ..checkpoints.quant import check_group_size
from ..checkpoints.scheme import QuantScheme
from ..checkpoints.writer import TORCH_DTYPES, copy_tokenizer, source_record, write_manifest
from ..fsutil import atomic_dir, check_output_dir
from ..upstream.trtllm import AWQ_DEFAULT_GROUP_SIZE
from .data import CalibSet, check_calib_options
from .formats import QuantFormat, check_format, check_hf_format, check_kv_format
from .pipeline import calib_manifest, calibrate_decoder, options_record
from .refusals import quant_dtype

MANIFEST_KIND = "modelopt-hf"
PAIR_KIND = "modelopt-hf-pair"  # out/target + out/draft, each a MANIFEST_KIND checkpoint


def export_unified(model: torch.nn.Module, out: Path, dtype: str) -> None:
    """Cast the calibrated `model` to `dtype` and let ModelOpt export it into `out`. Mutates
    `model` (ModelOpt replaces the quantized weights by their FP8/INT4 payloads)."""
    # lazy: modelopt takes ~7 s to import
    from modelopt.torch.export import export_hf_checkpoint

    tdtype = TORCH_DTYPES[dtype]
    model.to(tdtype)
    export_hf_checkpoint(model, dtype=tdtype, export_dir=out)


def _prepare(hf_dir: Path, layout: QuantScheme, dtype: str) -> PreparedDecoder:
    d = prepare_decoder(hf_dir, quant_dtype(dtype, hf_dir), 1)
    check_group_size(d.plans, layout, 1, str(hf_dir / "config.json"))
    return d


def write_unified(d: PreparedDecoder, out: Path, qfmt: QuantFormat, layout: QuantScheme, data: CalibSet) -> None:
    """Calibrate the decoder `d` on `data` and write its unified HF checkpoint into the directory `out`."""
    cal = calibrate_decoder(d.hf_dir, qfmt, layout, data)
    export_unified(cal.model, out, d.dtype)
    copy_tokenizer(d.hf_dir, out, skip_existing=True)  # the export wrote generation_config.json
    extra = {"output_format": "hf", "family": d.spec.family, "exporter": "modelopt.torch.export."
             "export_hf_checkpoint", "calibration": calib_manifest(cal)}
    write_manifest(out, MANIFEST_KIND, [source_record("hf", d.hf_dir, d.weights)],
                   options_record(qfmt, layout, d.dtype, 1, extra))
    load_hf_unified(out)  # self-check: headers, config keys and the tensors the backend reads


def _request(fmt: str, kv_cache: str | None, group_size: int, calib) -> tuple[QuantFormat, QuantScheme]:
    qfmt, kv_algo = check_format(fmt), check_kv_format(kv_cache)
    check_hf_format(qfmt, kv_algo)
    check_calib_options(calib.samples, calib.seq_len)
    return qfmt, QuantScheme(qfmt.quant_algo, kv_algo, group_size)


def quantize_hf_unified(hf_dir: Path, out_dir: Path, calib, fmt: str = "fp8", kv_cache: str | None = None,
                        dtype: str = "auto", group_size: int = AWQ_DEFAULT_GROUP_SIZE, overwrite: bool = False) -> Path:
    """Calibrate the HF decoder in `hf_dir` and write ModelOpt's unified HF checkpoint at `out_dir`.
    `calib`: a quantize.CalibOptions (where the prompts come from; its `load` renders them)."""
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    qfmt, layout = _request(fmt, kv_cache, group_size, calib)
    check_output_dir(out_dir, overwrite)
    d = _prepare(hf_dir, layout, dtype)
    data = calib.load(hf_dir)
    with atomic_dir(out_dir, overwrite) as tmp:
        write_unified(d, tmp, qfmt, layout, data)
    return out_dir


def quantize_pair_unified(target_hf: Path, draft_hf: Path, out_dir: Path, calib, fmt: str = "fp8",
                          kv_cache: str | None = None, dtype: str = "auto", group_size: int = AWQ_DEFAULT_GROUP_SIZE,
                          overwrite: bool = False) -> Path:
    """`out_dir/target` and `out_dir/draft`, each a unified HF checkpoint calibrated on its own on the
    same prompts (one tokenizer), in the same format (the PyTorch backend loads the two-model
    drafter from its own directory, hf_quant_config.json included)."""
    target_hf, draft_hf, out_dir = Path(target_hf), Path(draft_hf), Path(out_dir)
    qfmt, layout = _request(fmt, kv_cache, group_size, calib)
    check_output_dir(out_dir, overwrite)
    size = check_same_tokenizer(target_hf, draft_hf)
    target, draft = _prepare(target_hf, layout, dtype), _prepare(draft_hf, layout, dtype)
    data = calib.load(target_hf)
    with atomic_dir(out_dir, overwrite) as tmp:
        for role, d in (("target", target), ("draft", draft)):
            (tmp / role).mkdir()
            write_unified(d, tmp / role, qfmt, layout, data)
        write_manifest(tmp, PAIR_KIND, [source_record("target", target.hf_dir, target.weights),
                                        source_record("draft", draft.hf_dir, draft.weights)],
                       {"output_format": "hf", "dtype": target.dtype, "tokenizer_size": size, "format": qfmt.name,
                        "draft_format": qfmt.name, "kv_cache_quant_algo": layout.kv_cache_quant_algo})
    return out_dir
