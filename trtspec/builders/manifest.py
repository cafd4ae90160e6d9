"""Engine manifests: what a built engine directory actually is, read from its `config.json`.

`trtllm-build` writes `{"version", "pretrained_config", "build_config"}` (reference §7.3,
builder.py `EngineConfig.to_dict`), `rank{r}.engine` per rank, and nothing else we need. The
Triton generator reads the manifest instead of re-parsing engine configs, and the runner compares
it with the plan: the builder may still rewrite a setting (a drifted default, a version we did
not pin), and the user should hear about it rather than find out at serving time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..checkpoints.scheme import QuantScheme
from ..errors import TrtspecError
from ..fsutil import read_json
from ..upstream import trtllm
from .engine import EngineBuild

MANIFEST_FILE = "engine_manifest.json"


@dataclass
class EngineManifest:
    name: str
    engine_dir: str               # relative to the build output directory
    trtllm_version: str
    architecture: str
    dtype: str
    quant_algo: str | None
    kv_cache_quant_algo: str | None
    tp_size: int
    pp_size: int
    world_size: int
    speculative_decoding_mode: str | None
    max_draft_len: int
    num_eagle_layers: int | None
    max_non_leaves_per_layer: int | None
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    max_beam_width: int
    gather_generation_logits: bool
    gather_context_logits: bool
    kv_cache_type: str | None
    tokens_per_block: int | None
    use_paged_context_fmha: bool | None
    use_fp8_context_fmha: bool | None
    rank_files: list[str]
    drift: list[str] = field(default_factory=list)  # differences from the plan


def spec_mode_name(value) -> str | None:
    """build_config.speculative_decoding_mode: the IntFlag's integer, or a name in some writers."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TrtspecError(f"unexpected speculative_decoding_mode {value!r}")
    if isinstance(value, int):
        if value not in trtllm.SPEC_MODE_FLAGS:
            raise TrtspecError(f"unknown speculative_decoding_mode flag {value}")
        return trtllm.SPEC_MODE_FLAGS[value]
    name = str(value).split(".")[-1].lower()  # "SpeculativeDecodingMode.EAGLE" or "eagle"
    return None if name == "none" else name


def _flag(value) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.lower() in ("enable", "true", "1")
    return bool(value)


def read_engine(engine_dir: Path, name: str, rel_dir: str | None = None) -> EngineManifest:
    """Parse `engine_dir/config.json` (and check the rank files exist) into a manifest."""
    engine_dir = Path(engine_dir)
    path = engine_dir / "config.json"
    cfg = read_json(path, "engine config.json")
    for key in ("version", "pretrained_config", "build_config"):
        if key not in cfg:
            raise TrtspecError(f"{path}: missing field '{key}' (not a TensorRT-LLM engine config)")
    pre, bld = cfg["pretrained_config"], cfg["build_config"]
    mapping, quant = pre.get("mapping") or {}, QuantScheme.from_config(pre, f"{path}: pretrained_config")
    plugins = bld.get("plugin_config") or {}
    tp, pp = int(mapping.get("tp_size", 1)), int(mapping.get("pp_size", 1))
    world = int(mapping.get("world_size", tp * pp))
    ranks = [f"rank{r}.engine" for r in range(world)]
    missing = [r for r in ranks if not (engine_dir / r).is_file()]
    if missing:
        raise TrtspecError(f"{engine_dir}: missing {missing[0]} (world_size={world})")
    try:
        return EngineManifest(
            name=name, engine_dir=rel_dir or str(engine_dir), trtllm_version=str(cfg["version"]),
            architecture=pre["architecture"], dtype=pre["dtype"],
            quant_algo=quant.quant_algo, kv_cache_quant_algo=quant.kv_cache_quant_algo,
            tp_size=tp, pp_size=pp, world_size=world,
            speculative_decoding_mode=spec_mode_name(bld.get("speculative_decoding_mode")),
            max_draft_len=int(bld.get("max_draft_len") or 0),
            num_eagle_layers=pre.get("num_eagle_layers"),
            max_non_leaves_per_layer=pre.get("max_non_leaves_per_layer"),
            max_batch_size=int(bld["max_batch_size"]), max_input_len=int(bld["max_input_len"]),
            max_seq_len=int(bld["max_seq_len"]), max_num_tokens=int(bld["max_num_tokens"]),
            max_beam_width=int(bld.get("max_beam_width", 1)),
            gather_generation_logits=bool(bld.get("gather_generation_logits", False)),
            gather_context_logits=bool(bld.get("gather_context_logits", False)),
            kv_cache_type=bld.get("kv_cache_type"),
            tokens_per_block=plugins.get("tokens_per_block"),
            use_paged_context_fmha=_flag(plugins.get("use_paged_context_fmha")),
            use_fp8_context_fmha=_flag(plugins.get("use_fp8_context_fmha")),
            rank_files=ranks)
    except KeyError as e:
        raise TrtspecError(f"{path}: missing field {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise TrtspecError(f"{path}: malformed engine config ({e})") from None


def compare_with_plan(m: EngineManifest, b: EngineBuild) -> list[str]:
    """What the builder changed relative to the plan (empty when the plan predicted it exactly)."""
    drift = []
    if not m.trtllm_version.startswith(trtllm.TRTLLM_VERSION_PREFIX):
        drift.append(f"built by TensorRT-LLM {m.trtllm_version}, the plan is for {trtllm.TRTLLM_VERSION_LABEL}")
    expected = {
        "speculative_decoding_mode": b.speculative_decoding_mode, "max_draft_len": b.max_draft_len,
        "max_batch_size": b.max_batch_size, "max_input_len": b.max_input_len,
        "max_seq_len": b.engine_max_seq_len, "max_num_tokens": b.max_num_tokens,
        "max_beam_width": b.max_beam_width, "quant_algo": b.quant_algo,
        "kv_cache_quant_algo": b.kv_cache_quant_algo, "tp_size": b.tp,
        "use_paged_context_fmha": b.plugins["use_paged_context_fmha"] == "enable",
        "use_fp8_context_fmha": b.plugins["use_fp8_context_fmha"] == "enable",
        "tokens_per_block": int(b.plugins["tokens_per_block"]),
    }
    for key, want in expected.items():
        got = getattr(m, key)
        optional = key not in ("speculative_decoding_mode", "quant_algo", "kv_cache_quant_algo")
        if (got is not None or not optional) and got != want:
            drift.append(f"{key}: planned {want}, engine has {got}")
    return drift


def to_dict(manifests: list[EngineManifest], plan_file: str) -> dict:
    return {"plan": plan_file, "engines": {m.name: asdict(m) for m in manifests}}
