"""What a repository serves, resolved from the command line: engines or checkpoints, tokenizer, limits.

Each flavor serves different artifacts:
- trtllm: TensorRT-LLM engine directories (`--engines`: one engine dir, or a `trtspec build` output
  directory holding `engines/<name>/`); their `config.json` is read through the builders' engine
  manifest reader, which also checks the rank files exist.
- pytorch (alias cpu): TensorRT-LLM checkpoints (`--ckpt`: a plain/EAGLE checkpoint, or a `target/` + `draft/` pair),
  or ModelOpt unified HF checkpoints, run by trtspec.runtime inside python-backend models.
- llmapi: Hugging Face directories (the PyTorch backend loads HF weights; `--ckpt` the target,
  `--draft-ckpt` the EAGLE-3 head or draft model), a ModelOpt unified HF checkpoint
  (`trtspec quantize --output-format hf`) included: the backend reads its hf_quant_config.json, and
  the KV-cache dtype follows it (KvCacheConfig.dtype "auto"), so model.yaml names it like any HF
  directory. A trtspec-converted checkpoint is accepted too and resolved to the HF directory its
  `trtspec.json` recorded (for a quantized TRT-LLM checkpoint that source is the unquantized model).

Every mistake ends in one TrtspecError line naming the option, the path and what was expected.
Paths are made absolute: the trtllm README mounts them at the same paths inside the container.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..builders.manifest import read_engine
from ..checkpoints.eagle3 import head_aux_layers
from ..checkpoints.hf_unified import is_hf_unified
from ..checkpoints.spec import spec_from_hf, spec_from_trtllm
from ..errors import TrtspecError
from ..fsutil import read_json
from ..upstream import trtllm
from ..upstream.trtllm import EAGLE_ARCHITECTURE

MANIFEST_FILE = "engine_manifest.json"  # builders.manifest.MANIFEST_FILE
BUILD_PLAN_FILE = "build_plan.json"
TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass
class Artifact:
    """One served model's weights: an engine dir, a TRT-LLM checkpoint or an HF directory."""
    role: str                  # target | draft | eagle
    path: Path                 # absolute
    kind: str                  # engine | checkpoint | hf
    config: dict               # engine: pretrained_config; checkpoint/hf: config.json
    max_draft_len: int = 0     # engine/checkpoint bound on draft tokens (0: none)
    num_eagle_layers: int | None = None
    max_non_leaves: int | None = None
    tp: int = 1
    pp: int = 1
    dtype: str = "float16"
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    max_seq_len: int | None = None
    speculative_mode: str | None = None
    build: dict = field(default_factory=dict)  # engine build_config

    @property
    def world_size(self) -> int:
        return self.tp * self.pp


def attention_window(art: Artifact) -> int | None:
    """The sliding window a served model attends over (DecoderSpec.sliding_window, read from its
    config as the runtime reads it: Mistral-7B-v0.1's 4096), for the serving config's window
    (upstream.trtllm SLIDING_WINDOW_CONFIG_KEY); None when it attends everything it can hold: no
    window, or none below its max_seq_len (an engine's) or max_position_embeddings."""
    hf = art.kind == "hf" or "architectures" in art.config  # an HF config.json (llmapi, ModelOpt unified)
    if hf:
        archs = art.config.get("architectures")
        if not isinstance(archs, list) or not archs or trtllm.HF_ARCHITECTURES.get(archs[0], ("",))[-1] != "mistral":
            return None  # only Mistral has a window (checkpoints.spec); other configs are not read here
    spec = spec_from_hf(art.path) if hf else spec_from_trtllm(art.config, art.path / "config.json")
    limit = art.max_seq_len or spec.max_position_embeddings
    return spec.sliding_window if spec.sliding_window and spec.sliding_window < limit else None


def window_unknown(art: Artifact) -> str | None:
    """A warning for a Mistral engine or checkpoint that records no window: TensorRT-LLM's own
    converter drops HF's `sliding_window`, so such a model is served attending everything, which
    differs from transformers past the window for a model that has one (Mistral-7B-v0.1)."""
    if (art.kind != "hf" and "architectures" not in art.config and art.config.get("architecture") == "MistralForCausalLM"
            and trtllm.SLIDING_WINDOW_CONFIG_KEY not in art.config):
        return (f"{art.path}: a MistralForCausalLM config without '{trtllm.SLIDING_WINDOW_CONFIG_KEY}' (TensorRT-LLM's "
                "converter drops it): served with full attention; for a model with a window (Mistral-7B-v0.1: 4096) "
                "convert with `trtspec convert`, or set max_attention_window_size in the tensorrt_llm config")
    return None


def _dir(path: Path | None, option: str) -> Path:
    if path is None:
        raise TrtspecError(f"{option}: needed")
    p = Path(path).expanduser().resolve()
    if not p.exists():
        raise TrtspecError(f"{option}: {p}: directory not found")
    if not p.is_dir():
        raise TrtspecError(f"{option}: {p}: not a directory")
    return p


def _engine(path: Path, role: str, option: str) -> Artifact:
    if not (path / "config.json").is_file():
        raise TrtspecError(f"{option}: {path} has no config.json (expected a TensorRT-LLM engine directory, or a "
                           f"'trtspec build' output directory with {MANIFEST_FILE})")
    m = read_engine(path, role)
    cfg = read_json(path / "config.json", "engine config.json")
    pre = cfg["pretrained_config"]
    return Artifact(role=role, path=path, kind="engine", config=pre, max_draft_len=m.max_draft_len,
                    num_eagle_layers=m.num_eagle_layers, max_non_leaves=m.max_non_leaves_per_layer,
                    tp=m.tp_size, pp=m.pp_size, dtype=m.dtype, max_batch_size=m.max_batch_size,
                    max_num_tokens=m.max_num_tokens, max_seq_len=m.max_seq_len,
                    speculative_mode=m.speculative_decoding_mode, build=cfg["build_config"])


def _build_dir_engines(path: Path) -> dict[str, Path]:
    """{name: engine dir} of a `trtspec build` output directory."""
    data = read_json(path / MANIFEST_FILE, "engine manifest")
    try:
        return {name: (path / e["engine_dir"]).resolve() for name, e in data["engines"].items()}
    except (KeyError, TypeError):
        raise TrtspecError(f"{path / MANIFEST_FILE}: expected {{'engines': {{name: {{'engine_dir': ...}}}}}}") from None


def resolve_engines(mode: str, engines: Path | None, draft_engines: Path | None,
                    draft_needed: bool = True) -> list[Artifact]:
    """trtllm flavor: [target, draft] for draft-target, [eagle] for EAGLE, [target] for n-gram.
    draft_needed False: a draft-target tuning whose drafter choice serves no draft model (repo.py);
    without a draft engine it is [target] alone, a draft given is checked all the same."""
    root = _dir(engines, "engines")
    found = _build_dir_engines(root) if (root / MANIFEST_FILE).is_file() else None
    if mode == "ngram":
        return [_ngram_target_engine(root, found, draft_engines)]
    if mode == "eagle":
        if draft_engines is not None:
            raise TrtspecError("draft_engines: an EAGLE engine drafts itself; give only `engines`")
        path = (found or {}).get("eagle", root) if found is not None else root
        if found is not None and "eagle" not in found:
            raise TrtspecError(f"engines: {root / MANIFEST_FILE} has no 'eagle' engine "
                               f"(it has {', '.join(found)}); the tuning is for EAGLE")
        art = _engine(_dir(path, "engines"), "eagle", "engines")
        if art.speculative_mode != "eagle":
            raise TrtspecError(f"engines: {art.path} is not an EAGLE engine (speculative_decoding_mode "
                               f"{art.speculative_mode}); the tuning is for EAGLE")
        return [art]
    if found is not None:
        if "target" not in found:
            raise TrtspecError(f"engines: {root / MANIFEST_FILE} has no 'target' engine (it has "
                               f"{', '.join(found)}); a draft-target repository needs a target and a draft")
        target_dir, draft_dir = found["target"], found.get("draft")
    else:
        target_dir, draft_dir = root, None
    target = _engine(_dir(target_dir, "engines"), "target", "engines")
    if target.speculative_mode != "draft_tokens_external":
        raise TrtspecError(f"engines: the target engine {target.path} was built with speculative_decoding_mode "
                           f"{target.speculative_mode}; draft-target serving needs draft_tokens_external "
                           "(trtspec build on the pair directory does that)")
    if draft_engines is not None:
        draft_dir = _dir(draft_engines, "draft_engines")
        if (draft_dir / MANIFEST_FILE).is_file():  # a build directory of the draft alone
            built = _build_dir_engines(draft_dir)
            draft_dir = built.get("draft") or built.get("plain") or draft_dir
    if draft_dir is None:
        if not draft_needed:
            return [target]
        raise TrtspecError("draft_engines: needed (the draft engine directory), or give `engines` a "
                           "'trtspec build' output directory of a draft-target pair")
    draft = _engine(_dir(draft_dir, "draft_engines"), "draft", "draft_engines")
    if draft.speculative_mode is not None:
        raise TrtspecError(f"draft_engines: {draft.path} is a speculative engine ({draft.speculative_mode}); "
                           "expected a plain draft engine")
    return [target, draft]


def _ngram_target_engine(root: Path, found: dict | None, draft_engines: Path | None) -> Artifact:
    """n-gram: the target engine alone, built with draft_tokens_external (the orchestration model
    sends the n-gram drafts as draft_input_ids; upstream.trtllm NGRAM)."""
    if draft_engines is not None:
        raise TrtspecError("draft_engines: n-gram drafting has no draft engine; give only `engines`")
    target = _engine(_dir((found or {}).get("target", root), "engines"), "target", "engines")
    if target.speculative_mode != "draft_tokens_external":
        raise TrtspecError(f"engines: the target engine {target.path} was built with speculative_decoding_mode "
                           f"{target.speculative_mode}; n-gram serving needs draft_tokens_external")
    return target


def _checkpoint(path: Path, role: str, option: str) -> Artifact:
    if is_hf_unified(path):  # ModelOpt's unified HF checkpoint: the runtime executes it as well (hf_weights.py)
        cfg = read_json(path / "config.json", "config.json")
        return Artifact(role=role, path=path, kind="checkpoint", config=cfg, dtype=_hf_dtype(cfg),
                        max_seq_len=cfg.get("max_position_embeddings"))
    cfg = read_json(path / "config.json", "TRT-LLM config.json")
    if "architecture" not in cfg:
        hint = (" (a Hugging Face directory: convert it with 'trtspec convert' first)"
                if cfg.get("architectures") else "")
        raise TrtspecError(f"{option}: {path / 'config.json'} is not a TensorRT-LLM checkpoint config{hint}")
    mapping = cfg.get("mapping") or {}
    tp, pp = int(mapping.get("tp_size", 1)), int(mapping.get("pp_size", 1))
    missing = [f"rank{r}.safetensors" for r in range(tp * pp) if not (path / f"rank{r}.safetensors").is_file()]
    if missing:
        raise TrtspecError(f"{option}: {path}: missing {missing[0]} (mapping.tp_size={tp})")
    eagle = cfg["architecture"] == EAGLE_ARCHITECTURE
    return Artifact(role=role, path=path, kind="checkpoint", config=cfg,
                    max_draft_len=int(cfg.get("max_draft_len") or 0) if eagle else 0,
                    num_eagle_layers=cfg.get("num_eagle_layers") if eagle else None,
                    max_non_leaves=cfg.get("max_non_leaves_per_layer") if eagle else None,
                    tp=tp, pp=pp, dtype=cfg.get("dtype", "float32"),
                    max_seq_len=cfg.get("max_position_embeddings"),
                    speculative_mode="eagle" if eagle else None)


def resolve_checkpoints(mode: str, ckpt: Path | None, draft_ckpt: Path | None,
                        draft_needed: bool = True) -> list[Artifact]:
    """pytorch flavor: [target, draft], [eagle], [target] for n-gram, or for eagle3 [target, the EAGLE-3 head].
    draft_needed: as resolve_engines' (without a draft or head: [target])."""
    root = _dir(ckpt, "ckpt")
    if mode == "eagle3":
        target = _checkpoint(root, "target", "ckpt")
        if draft_ckpt is None and not draft_needed:
            return [target]
        return [target, eagle3_head(draft_ckpt, "draft_ckpt", ", but the tuning is eagle3")]
    pair = (root / "target" / "config.json").is_file() and (root / "draft" / "config.json").is_file()
    if mode == "ngram":
        if draft_ckpt is not None:
            raise TrtspecError("draft_ckpt: n-gram drafting has no draft model; give only `ckpt`")
        return [_checkpoint(root / "target" if pair else root, "target", "ckpt")]
    if mode == "eagle":
        if draft_ckpt is not None or pair:
            raise TrtspecError("ckpt: the tuning is for EAGLE; give the EagleForCausalLM checkpoint only")
        art = _checkpoint(root, "eagle", "ckpt")
        if art.speculative_mode != "eagle":
            raise TrtspecError(f"ckpt: {root} is a {art.config['architecture']} checkpoint; the tuning is for "
                               "EAGLE (expected EagleForCausalLM)")
        return [art]
    if pair:
        target_dir = root / "target"
        draft_dir = _dir(draft_ckpt, "draft_ckpt") if draft_ckpt is not None else root / "draft"
    else:
        target_dir, draft_dir = root, _dir(draft_ckpt, "draft_ckpt") if draft_ckpt is not None else None
    if draft_dir is None and draft_needed:
        raise TrtspecError("draft_ckpt: needed for a draft-target tuning (or give `ckpt` a pair directory "
                           "with target/ and draft/)")
    arts = [_checkpoint(target_dir, "target", "ckpt")]
    if draft_dir is not None:
        arts.append(_checkpoint(Path(draft_dir), "draft", "draft_ckpt"))
    for a in arts:
        if a.speculative_mode == "eagle":
            raise TrtspecError(f"{a.path}: an EagleForCausalLM checkpoint, but the tuning is draft-target")
    return arts


def _recorded_source(path: Path, roles: tuple[str, ...]) -> Path | None:
    """The HF directory a trtspec checkpoint was converted from (its trtspec.json `sources`:
    [{"role": "hf" | "target" | "draft" | "eagle_head", "path": ...}])."""
    manifest = path / "trtspec.json"
    if not manifest.is_file():
        return None
    try:
        sources = json.loads(manifest.read_text()).get("sources") or []
    except (json.JSONDecodeError, AttributeError):
        return None
    by_role = {s.get("role"): s.get("path") for s in sources if isinstance(s, dict)}
    for role in roles:
        src = by_role.get(role)
        if src and (Path(src) / "config.json").is_file():
            return Path(src).resolve()
    return None


def _hf_dir(path: Path, option: str, roles: tuple[str, ...] = ("hf", "target")) -> Path:
    """An HF directory; a trtspec checkpoint resolves to the HF source its trtspec.json names."""
    cfg = read_json(path / "config.json", "config.json") if (path / "config.json").is_file() else {}
    if "architectures" in cfg:
        return path
    src = _recorded_source(path, roles)
    if src is not None:
        return src
    raise TrtspecError(f"{option}: {path} is not a Hugging Face model directory (no 'architectures' in "
                       "config.json); the llmapi flavor runs HF weights on the PyTorch backend")


def resolve_hf(mode: str, ckpt: Path | None, draft_ckpt: Path | None,
               draft_needed: bool = True) -> list[Artifact]:
    """llmapi flavor: [target, draft] HF directories (the draft: the EAGLE-3 head of an eagle3 tuning,
    else a draft model); [target] for n-gram. draft_needed: as resolve_engines'."""
    root = _dir(ckpt, "ckpt")
    if mode == "ngram":
        if draft_ckpt is not None:
            raise TrtspecError("draft_ckpt: n-gram drafting has no draft model; give only `ckpt`")
        target_dir = root if is_hf_unified(root) else _hf_dir(root, "ckpt")
        tcfg = read_json(target_dir / "config.json")
        return [Artifact(role="target", path=target_dir, kind="hf", config=tcfg, dtype=_hf_dtype(tcfg))]
    if is_hf_unified(root / "target"):  # a pair of unified HF checkpoints (quantize --output-format hf --draft)
        target_dir = root / "target"
        draft_dir = _dir(draft_ckpt, "draft_ckpt") if draft_ckpt is not None else root / "draft"
    else:
        target_dir = _hf_dir(root, "ckpt")
        if draft_ckpt is None and _recorded_source(root, ("draft",)) is not None:  # a trtspec pair directory
            draft_dir = _recorded_source(root, ("draft",))
        else:
            draft_dir = _dir(draft_ckpt, "draft_ckpt") if draft_ckpt is not None or draft_needed else None
    tcfg = read_json(target_dir / "config.json")
    target = Artifact(role="target", path=target_dir, kind="hf", config=tcfg, dtype=_hf_dtype(tcfg))
    if draft_dir is None:
        return [target]
    if mode == "eagle3":
        return [target, eagle3_head(draft_dir, "draft_ckpt", ", but the tuning is eagle3")]
    dcfg = read_json(draft_dir / "config.json")
    if "architectures" not in dcfg:
        draft_dir = _hf_dir(draft_dir, "draft_ckpt")
        dcfg = read_json(draft_dir / "config.json")
    if is_eagle3(dcfg):
        raise TrtspecError(f"draft_ckpt: {draft_dir} is an EAGLE-3 head, but the tuning is {mode} (profile and tune "
                           "the head as eagle3)")
    return [target, Artifact(role="draft", path=draft_dir, kind="hf", config=dcfg, dtype=_hf_dtype(dcfg))]


def _hf_dtype(cfg: dict) -> str:
    """config.json's dtype: `torch_dtype`, or `dtype` as transformers >= 4.56 (and ModelOpt's export) write it."""
    return str(cfg.get("torch_dtype", cfg.get("dtype")))


def is_eagle3(cfg: dict) -> bool:
    archs = [a.lower() for a in cfg.get("architectures") or []]
    return any("eagle3" in a for a in archs) or "eagle_config" in cfg


def eagle3_head(path: Path | None, field: str, why: str = "") -> Artifact:
    """An EAGLE-3 head directory as the draft Artifact the pytorch and llmapi flavors read (its
    config.json, dtype, positions): their draft_ckpt and each extra head (heads.py). why: said after
    "`field`: PATH is not an EAGLE-3 head" when it is not one."""
    head = _dir(path, field)
    cfg = read_json(head / "config.json", "EAGLE-3 head config.json") if (head / "config.json").is_file() else {}
    if not is_eagle3(cfg):
        raise TrtspecError(f"{field}: {head} is not an EAGLE-3 head{why}")
    return Artifact(role="draft", path=head, kind="hf", config=cfg, dtype=_hf_dtype(cfg),
                    max_seq_len=cfg.get("max_position_embeddings"))


def eagle3_capture(target: Artifact, head: Artifact) -> dict:
    """llmapi speculative_config entry for an EAGLE-3 head: its captured layers, written only where
    they differ from TensorRT-LLM's default (whether 1.2 reads the head config's ids is unverified:
    upstream.trtllm EAGLE-3 block)."""
    n = target.config.get("num_hidden_layers")
    if not isinstance(n, int):
        return {}
    ids = head_aux_layers(head.config, n, head.path / "config.json")
    if n >= trtllm.EAGLE3_MIN_LAYERS_FOR_DEFAULT and ids == trtllm.eagle3_default_capture(n):
        return {}
    return {trtllm.EAGLE3_LAYERS_FIELD: list(ids)}


def has_tokenizer(path: Path) -> bool:
    return any((Path(path) / f).is_file() for f in TOKENIZER_MARKERS)


def resolve_tokenizer(tokenizer: Path | None, artifacts: list[Artifact], engines_root: Path | None) -> Path:
    """--tokenizer, else the first of: the target checkpoint/HF dir, the checkpoint a build plan
    was made from (for engines), that has tokenizer files."""
    if tokenizer is not None:
        p = _dir(tokenizer, "tokenizer")
        if not has_tokenizer(p):
            raise TrtspecError(f"tokenizer: {p} has no tokenizer files ({', '.join(TOKENIZER_MARKERS)})")
        return p
    candidates = [a.path for a in artifacts if a.kind != "engine"]
    if engines_root is not None:
        for plan_dir in (engines_root, *[a.path.parent.parent for a in artifacts if a.kind == "engine"]):
            plan = plan_dir / BUILD_PLAN_FILE
            if plan.is_file():
                try:
                    builds = json.loads(plan.read_text()).get("builds") or []
                except json.JSONDecodeError:
                    builds = []
                for b in sorted(builds, key=lambda b: b.get("name") != "target"):
                    if b.get("checkpoint_dir"):
                        candidates.append(Path(b["checkpoint_dir"]))
    for c in candidates:
        if has_tokenizer(c):
            return Path(c).resolve()
    raise TrtspecError("tokenizer: needed (no tokenizer files next to the checkpoint or the engines' build plan)")
