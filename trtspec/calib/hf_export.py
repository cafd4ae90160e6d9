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
(checkpoints/hf_unified.py) as a self-check before it is renamed into place.
"""

from __future__ import annotations

from pathlib import Path
import torch

from ..checkpoints.convert import prepare_decoder
from ..checkpoints.hf_unified import load_hf_unified
from ..checkpoints.quant import check_group_size
from ..checkpoints.scheme import QuantScheme
from ..checkpoints.writer import TORCH_DTYPES, source_record, write_manifest
from ..fsutil import atomic_dir, check_output_dir
from ..upstream.trtllm import AWQ_DEFAULT_GROUP_SIZE
from ..upstream.transformers import TOKENIZER_FILES
from .data import check_calib_options
from .formats import check_format, check_hf_format, check_kv_format
from .pipeline import calib_manifest, calibrate_decoder, options_record
from .refusals import quant_dtype

MANIFEST_KIND = "modelopt-hf"


def export_unified(model: torch.nn.Module, out: Path, dtype: str) -> None:
    """Cast the calibrated `model` to `dtype` and let ModelOpt export it into `out`. Mutates
    `model` (ModelOpt replaces the quantized weights by their FP8/INT4 payloads)."""
    # lazy: modelopt takes ~7 s to import
    from modelopt.torch.export import export_hf_checkpoint

    tdtype = TORCH_DTYPES[dtype]
    model.to(tdtype)
    export_hf_checkpoint(model, dtype=tdtype, export_dir=out)


def copy_missing_tokenizer(src: Path, out: Path) -> list[str]:
    """The tokenizer files of `src` that the export did not write (it writes generation_config.json)."""
    import shutil

    copied = []
    for name in TOKENIZER_FILES:
        if (src / name).is_file() and not (out / name).exists():
            shutil.copy2(src / name, out / name)
            copied.append(name)
    return copied


def quantize_hf_unified(hf_dir: Path, out_dir: Path, calib, fmt: str = "fp8", kv_cache: str | None = None,
                        dtype: str = "auto", group_size: int = AWQ_DEFAULT_GROUP_SIZE, overwrite: bool = False) -> Path:
    """Calibrate the HF decoder in `hf_dir` and write ModelOpt's unified HF checkpoint at `out_dir`.
    `calib`: a quantize.CalibOptions (where the prompts come from; its `load` renders them)."""
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    qfmt, kv_algo = check_format(fmt), check_kv_format(kv_cache)
    check_hf_format(qfmt, kv_algo)
    layout = QuantScheme(qfmt.quant_algo, kv_algo, group_size)
    check_calib_options(calib.samples, calib.seq_len)
    check_output_dir(out_dir, overwrite)
    d = prepare_decoder(hf_dir, quant_dtype(dtype, hf_dir), 1)
    check_group_size(d.plans, layout, 1, str(hf_dir / "config.json"))
    data = calib.load(hf_dir)
    with atomic_dir(out_dir, overwrite) as tmp:
        cal = calibrate_decoder(hf_dir, qfmt, layout, data)
        export_unified(cal.model, tmp, d.dtype)
        copy_missing_tokenizer(hf_dir, tmp)
        extra = {"output_format": "hf", "family": d.spec.family, "exporter": "modelopt.torch.export."
                 "export_hf_checkpoint", "calibration": calib_manifest(cal)}
        write_manifest(tmp, MANIFEST_KIND, [source_record("hf", d.hf_dir, d.weights)],
                       options_record(qfmt, layout, d.dtype, 1, extra))
        load_hf_unified(tmp)  # self-check: headers, config keys and the tensors the backend reads
    return out_dir
