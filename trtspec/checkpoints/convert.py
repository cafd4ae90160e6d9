"""HF decoder -> TensorRT-LLM 1.2 checkpoint (`config.json` + `rank{r}.safetensors`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import TrtspecError
from ..fsutil import atomic_dir, read_json, write_json
from ..upstream import trtllm
from .layout import decoder_plans
from .safetensors_io import WeightSource, open_weights
from .sharding import check_tp
from .spec import DecoderSpec, spec_from_hf, trtllm_config
from .validate import validate_checkpoint
from .writer import copy_tokenizer, source_record, validate_sources, write_manifest, write_ranks


def resolve_dtype(dtype: str, hf_dir: Path) -> str:
    """'auto' means the HF checkpoint's own dtype (float16 when it names none we can write)."""
    if dtype == "auto":
        hf = read_json(Path(hf_dir) / "config.json", "HF config.json")
        dtype = str(hf.get("torch_dtype") or hf.get("dtype") or "float16").replace("torch.", "")
        return dtype if dtype in trtllm.DTYPES else "float16"
    if dtype not in trtllm.DTYPES:
        raise TrtspecError(f"convert.dtype: {dtype!r} is not one of {', '.join(trtllm.DTYPES)} or auto")
    return dtype


def check_decoder_tp(spec: DecoderSpec, tp: int, where: Path) -> None:
    if tp < 1:
        raise TrtspecError(f"convert.tp: expected a positive integer, got {tp}")
    check_tp(spec.num_heads, spec.num_kv_heads, spec.intermediate_size, tp, str(where / "config.json"))


def check_head_rows(spec: DecoderSpec, weights: WeightSource, where: Path) -> None:
    """Head counts that disagree with the weights, named by config field: with an explicit head size
    (legitimately heads x head_dim != hidden_size, as in Qwen3) the shape check alone would only name
    a projection tensor."""
    for proj, heads, key in (("q_proj", spec.num_heads, "num_attention_heads"),
                             ("k_proj", spec.num_kv_heads, "num_key_value_heads")):
        name, want = f"model.layers.0.self_attn.{proj}.weight", [heads * spec.head_size, spec.hidden_size]
        got = list(weights.shape(name)) if name in weights else want
        if got[:1] != want[:1]:
            raise TrtspecError(f"{where}: {key}: {heads} heads x head size {spec.head_size} = {want[0]} rows, but "
                               f"tensor '{name}' has shape {got}, expected {want} (does {key} match the weights?)")


def convert_hf(hf_dir: Path, out_dir: Path, dtype: str = "auto", tp: int = 1,
               overwrite: bool = False) -> Path:
    """Convert an HF Llama/Mistral/Qwen2/Qwen3 directory into a TRT-LLM checkpoint at `out_dir`.

    The embedding is written vocab-parallel (padded, split on dim 0), as ModelOpt's TRT-LLM export
    does; every input is checked (names, shapes) before a byte is written.
    """
    with atomic_dir(Path(out_dir), overwrite) as tmp:
        write_decoder(prepare_decoder(hf_dir, dtype, tp), tmp)
    return Path(out_dir)


class PreparedDecoder:
    """An HF decoder whose inputs were fully checked; `write_decoder` then only writes."""

    def __init__(self, hf_dir: Path, dtype: str, tp: int):
        self.hf_dir = Path(hf_dir)
        self.spec = spec_from_hf(self.hf_dir)
        check_decoder_tp(self.spec, tp, self.hf_dir)
        self.dtype = resolve_dtype(dtype, self.hf_dir)
        self.tp = tp
        self.weights = open_weights(self.hf_dir)
        check_head_rows(self.spec, self.weights, self.hf_dir / "config.json")
        self.plans = decoder_plans(self.spec, parallel_embedding=True)
        allowed = {"base": {"lm_head.weight"}} if self.spec.tie_word_embeddings else None
        validate_sources(self.plans, {"base": self.weights}, allowed)


def prepare_decoder(hf_dir: Path, dtype: str = "auto", tp: int = 1) -> PreparedDecoder:
    return PreparedDecoder(hf_dir, dtype, tp)


def write_decoder(d: PreparedDecoder, out: Path) -> None:
    write_ranks(out, d.plans, {"base": d.weights}, d.tp, d.dtype, label=f"converting {d.hf_dir.name}")
    write_json(out / "config.json", trtllm_config(d.spec, d.dtype, d.tp, parallel_embedding=True))
    copy_tokenizer(d.hf_dir, out)
    write_manifest(out, "decoder", [source_record("hf", d.hf_dir, d.weights)],
                   {"dtype": d.dtype, "tp": d.tp, "family": d.spec.family})
    validate_checkpoint(out)  # header-only self-check before the directory is renamed into place
