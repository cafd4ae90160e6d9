"""Calibration and quantized export: HF model (+ EAGLE head / draft) -> quantized TRT-LLM checkpoint.

    from trtspec.calib import CalibOptions, quantize_hf, quantize_eagle, quantize_pair

    quantize_hf("Llama-3.1-8B-Instruct", "ckpt/fp8", fmt="fp8", kv_cache="fp8",
                calib=CalibOptions(calib="chat=mt-bench,code=humaneval", samples=512, seq_len=512), tp=2)

Stages (one module each): `formats` (the four H100 formats and their ModelOpt recipes),
`refusals` (requests TRT-LLM cannot build), `data` (workload prompts -> token ids), `calibrate`
(mtq.quantize + reading the quantizers back), `mixed`/`sensitivity` (linears kept in the model
dtype: named by pattern, or the most sensitive ones measured), `eagle_head` (base + EAGLE head as one module),
`export` (quantizer state -> TRT-LLM tensors, plain torch), `pipeline`/`eagle_quant`/`quantize`
(the checkpoint writers; `quantize.quantize` is the stage's entry, taking `options.QuantizeOptions`),
`hf_export` (`output_format: hf`: ModelOpt's unified HF checkpoint for the PyTorch backend, written
by ModelOpt's own exporter after the same calibration).
The quality report, and the `trtspec quantize` command that runs quantization then the report,
live in trtspec.quality (above calib and tuning).

The checkpoint layout (names, shapes, dtypes, TP rules of the quantized tensors) lives with the
other layouts in `trtspec.checkpoints.quant`; the validator and the runtime read it from there.
"""

from ..lazy import lazy_exports

_EXPORTS = {"CalibSet": "data", "load_calib_set": "data", "token_id_set": "data",
            "FORMATS": "formats", "KV_FORMATS": "formats", "check_format": "formats", "check_kv_format": "formats",
            "CalibOptions": "quantize", "quantize_eagle": "quantize", "quantize_hf": "quantize",
            "quantize_pair": "quantize", "KeepSensitive": "pipeline", "quantize_hf_unified": "hf_export",
            "quantize_pair_unified": "hf_export"}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
