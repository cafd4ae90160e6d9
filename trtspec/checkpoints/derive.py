"""Models derived from an HF checkpoint.

`truncate_layers` keeps the first N decoder layers of a model together with its embeddings, final
norm and LM head: a draft that shares the target's tokenizer and is "derived from the target"
(self-speculation), for demos and tests. Tensors are streamed one at a time from the source
safetensors into the output file, so memory stays near the largest tensor.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import TrtspecError
from ..fsutil import atomic_dir, read_json, write_json
from .safetensors_io import StreamingWriter, open_weights
from .writer import copy_tokenizer

# The decoder-layer index in an HF tensor name: `model.layers.12.mlp.up_proj.weight` -> 12.
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# Config lists with one entry per decoder layer (transformers 4.57: Qwen2/Qwen3 `layer_types`).
_PER_LAYER_KEYS = ("layer_types",)


def layer_index(name: str) -> int | None:
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def truncate_layers(hf_dir: Path, out_dir: Path, num_layers: int, overwrite: bool = False) -> Path:
    """Write an HF model made of the first `num_layers` decoder layers of `hf_dir` plus its
    embeddings, final norm and LM head (tied or not) to `out_dir`; returns `out_dir`."""
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    cfg_path = hf_dir / "config.json"
    cfg = read_json(cfg_path, "HF config.json")
    total = cfg.get("num_hidden_layers")
    if not isinstance(total, int) or total < 1:
        raise TrtspecError(f"{cfg_path}: num_hidden_layers must be a positive integer, got {total!r}")
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 1 <= num_layers <= total:
        raise TrtspecError(f"num_layers: expected an integer from 1 to {total} (num_hidden_layers of "
                           f"{cfg_path}), got {num_layers!r}")
    if out_dir.resolve() == hf_dir.resolve():
        raise TrtspecError(f"{out_dir}: the output directory must differ from the source model directory")

    weights = open_weights(hf_dir)
    names = sorted(weights.names(), key=_order_key)
    layers_seen = {i for i in map(layer_index, names) if i is not None}
    missing = sorted(set(range(num_layers)) - layers_seen)
    if missing:
        raise TrtspecError(f"{weights.where}: no tensors for decoder layer {missing[0]} "
                           f"(config.json says {total} layers)")
    keep = [n for n in names if (layer_index(n) is None or layer_index(n) < num_layers)]
    entries = [(n, weights.infos[n].dtype, weights.infos[n].shape) for n in keep]

    new_cfg = dict(cfg, num_hidden_layers=num_layers)
    for key in _PER_LAYER_KEYS:
        if isinstance(new_cfg.get(key), list) and len(new_cfg[key]) == total:
            new_cfg[key] = new_cfg[key][:num_layers]
    metadata = {"trtspec_derived_from": str(hf_dir.resolve()),
                "trtspec_num_layers": f"{num_layers}/{total}"}

    with atomic_dir(out_dir, overwrite) as tmp:
        writer = StreamingWriter(tmp / "model.safetensors", entries, metadata)
        try:
            for name in keep:
                writer.write(name, weights.get(name))
        finally:
            writer._file.close()
        writer.close()
        write_json(tmp / "config.json", new_cfg)
        copy_tokenizer(hf_dir, tmp)
    return out_dir


def _order_key(name: str) -> tuple:
    """Embeddings first, then layers in numeric order, then everything else (norm, lm_head)."""
    i = layer_index(name)
    if i is not None:
        return (1, i, name)
    return (0 if "embed" in name else 2, 0, name)
