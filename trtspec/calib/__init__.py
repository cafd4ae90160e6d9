"""Calibration and quantized export: HF model (+ EAGLE head / draft) -> quantized TRT-LLM checkpoint.

    from trtspec.calib import CalibOptions, quantize_hf, quantize_eagle, quantize_pair

    quantize_hf("Llama-3.1-8B-Instruct", "ckpt/fp8", fmt="fp8", kv_cache="fp8",
                calib=CalibOptions(calib="chat=mt-bench,code=humaneval", samples=512, seq_len=512), tp=2)

Stages (one module each): `formats` (the four H100 formats and their ModelOpt recipes),
`refusals` (requests TRT-LLM cannot build), `data` (workload prompts -> token ids), `calibrate`
(mtq.quantize + reading the quantizers back), `eagle_head` (base + EAGLE head as one module),
`export` (quantizer state -> TRT-LLM tensors, plain torch), `pipeline`/`eagle_quant`/`quantize`
(the checkpoint writers), `command` (the `trtspec quantize` Typer command).

The checkpoint layout (names, shapes, dtypes, TP rules of the quantized tensors) lives with the
other layouts in `trtspec.checkpoints.quant`; the validator and the runtime read it from there.
"""

from .data import CalibSet, load_calib_set, token_id_set
from .formats import FORMATS, KV_FORMATS, check_format, check_kv_format
from .quantize import CalibOptions, quantize_eagle, quantize_hf, quantize_pair

__all__ = ["FORMATS", "KV_FORMATS", "CalibOptions", "CalibSet", "check_format", "check_kv_format", "load_calib_set",
           "quantize_eagle", "quantize_hf", "quantize_pair", "token_id_set"]
