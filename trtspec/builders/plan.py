"""Build plans: a checkpoint (or a draft-target pair) plus limits -> exact `trtllm-build` argument lists.

A plan is written down before any GPU time is spent, so it must already be what TensorRT-LLM 1.2
will build: every flag whose default drifted across versions is explicit, and every combination
that `trtllm-build` rejects or silently rewrites is refused (`rules.py`) or set to the value the
builder would force anyway, with the reason recorded in `EngineBuild.notes`.

Paths in the argument lists: checkpoints are absolute; the engine and timing-cache paths are
relative to the build output directory, which is the working directory of `build.sh` and of the
runner. That keeps `build_plan.json` + `build.sh` relocatable and lets the runner build into a
temporary sibling directory that is renamed into place only when every engine is done.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import __version__
from ..checkpoints.trtllm_ckpt import TrtllmCheckpoint
from ..errors import TrtspecError
from ..upstream import trtllm
from . import rules
from .engine import EngineBuild
from .memory import MemoryEstimate, estimate_memory
from .options import ROLES, BuildOptions
from .source import is_pair_dir, read_checkpoint


@dataclass
class BuildPlan:
    """Every engine one `trtspec build` produces, in build order, with the memory estimate."""

    source: str
    role: str                 # resolved: plain | eagle | pair | target | draft
    gpu: str
    builds: list[EngineBuild]
    memory: MemoryEstimate
    warnings: list[str] = field(default_factory=list)
    trtllm_version: str = trtllm.TRTLLM_VERSION_LABEL
    trtspec_version: str = __version__

    def build(self, name: str | None = None) -> EngineBuild:
        if name is None:
            if len(self.builds) != 1:
                raise TrtspecError(f"this plan has {len(self.builds)} builds; name one of "
                                   f"{', '.join(b.name for b in self.builds)}")
            return self.builds[0]
        for b in self.builds:
            if b.name == name:
                return b
        raise TrtspecError(f"this plan has no build named {name!r}")

    def argv(self, name: str | None = None) -> list[str]:
        return self.build(name).argv()

    def to_dict(self) -> dict:
        d = asdict(self)
        for b, bd in zip(self.builds, d["builds"]):
            bd["argv"] = b.argv()
        m = self.memory
        d["memory"].update(weights_bytes=m.weights_bytes, activation_bytes=m.activation_bytes,
                           kv_bytes_per_token=m.kv_bytes_per_token)
        return d


def plugin_flags(quant_algo: str | None, kv_algo: str | None, notes: list[str]) -> dict[str, str]:
    """Plugin and feature flags for one engine; see trtspec.upstream.trtllm for where each rule comes from."""
    paged = True
    if kv_algo == "INT8":
        paged = False
        notes.append("use_paged_context_fmha disable: INT8 KV cache turns paged context FMHA off in build() "
                     "(no KV-cache reuse or chunked context with this engine)")
    elif kv_algo == "FP8" and quant_algo not in trtllm.FP8_CONTEXT_FMHA_ALGOS:
        paged = False
        notes.append(f"use_paged_context_fmha disable: FP8 KV without FP8 weights ({quant_algo}) turns paged "
                     "context FMHA off in build(); pair FP8 KV with FP8 weights to keep it")
    fp8_ctx = paged and quant_algo in trtllm.FP8_CONTEXT_FMHA_ALGOS and kv_algo == "FP8"
    if quant_algo == "FP8" and kv_algo != "FP8":
        notes.append("use_fp8_context_fmha disable: with paged context FMHA it needs an FP8 KV cache")
    fused_mlp = quant_algo in trtllm.FUSED_MLP_ALGOS
    if not fused_mlp:
        notes.append(f"use_fused_mlp disable: TensorRT-LLM never fuses {quant_algo} gate/up GEMMs (fuse_gate_mlp)")
    return {
        "gemm_plugin": trtllm.GEMM_PLUGIN,
        "gpt_attention_plugin": trtllm.GPT_ATTENTION_PLUGIN,
        "context_fmha": "enable",
        "remove_input_padding": "enable",
        "use_paged_context_fmha": "enable" if paged else "disable",
        "use_fp8_context_fmha": "enable" if fp8_ctx else "disable",
        "use_fused_mlp": "enable" if fused_mlp else "disable",
        "tokens_per_block": str(trtllm.TOKENS_PER_BLOCK),
    }


def default_max_seq_len(ckpt: TrtllmCheckpoint) -> int:
    """min(8192, the positions the model supports): trtllm-build's own default would be
    max_position_embeddings (131072 for Llama-3.1), far more KV cache than any batch needs."""
    return min(8192, ckpt.spec.max_position_embeddings)


def resolve_role(path: Path, role: str) -> tuple[str, dict[str, TrtllmCheckpoint]]:
    """(resolved role, {build name: checkpoint}) for build.role; a pair directory yields draft + target."""
    if role not in ROLES:
        raise TrtspecError(f"build.role: {role!r} is not one of {', '.join(ROLES)}")
    path = Path(path)
    if not path.is_dir():
        raise TrtspecError(f"{path}: checkpoint directory not found")
    if is_pair_dir(path):
        if role == "auto":
            return "pair", {"draft": read_checkpoint(path / "draft"), "target": read_checkpoint(path / "target")}
        if role in ("target", "draft"):
            return role, {role: read_checkpoint(path / role)}
        raise TrtspecError(f"{path}: a draft-target pair directory (target/ + draft/) cannot be built with "
                           f"build.role {role}; use build.role auto (both), target or draft")
    ckpt = read_checkpoint(path)
    if role == "auto":
        role = "eagle" if ckpt.is_eagle else "plain"
    return role, {role: ckpt}


def make_plan(ckpt_dir: Path, options: BuildOptions | None = None) -> BuildPlan:
    """Read the checkpoint(s), apply the rules, and return the plan (nothing is written)."""
    opts = options or BuildOptions()
    rules.check_options(opts)
    role, ckpts = resolve_role(ckpt_dir, opts.role)
    warnings: list[str] = []
    for name, ckpt in ckpts.items():
        rules.check_checkpoint(name, ckpt, opts, warnings)
    first = ckpts.get("target") or next(iter(ckpts.values()))
    seq = opts.max_seq_len or min(default_max_seq_len(c) for c in ckpts.values())
    inp = rules.max_input_len(opts, seq)
    k = rules.draft_len(role, first, opts)
    # A pair's requests live in both engines: same batch and the target's token budget for both (it is
    # within the draft's bounds too, whose max_seq_len is longer).
    tokens = rules.max_num_tokens(opts, seq, k, "target") if role == "pair" else None
    builds = [_engine_build(name, ckpt, opts, seq, inp, k, tokens, warnings) for name, ckpt in ckpts.items()]
    memory = estimate_memory(builds, ckpts, opts.gpu)
    warnings += memory.warnings
    return BuildPlan(source=str(Path(ckpt_dir).resolve()), role=role, gpu=opts.gpu, builds=builds,
                     memory=memory, warnings=warnings)


def _engine_build(name: str, ckpt: TrtllmCheckpoint, opts: BuildOptions, seq: int, inp: int, k: int,
                  tokens: int | None, warnings: list[str]) -> EngineBuild:
    notes: list[str] = []
    plugins = plugin_flags(ckpt.quant_algo, ckpt.kv_cache_quant_algo, notes)
    mode, draft, eagle_layers = None, 0, 0
    max_seq = seq
    if name == "eagle":
        mode, draft = trtllm.SPEC_MODE_EAGLE, k
        eagle_layers = int(ckpt.config.get("num_eagle_layers", trtllm.EAGLE_CONFIG_DEFAULT_NUM_LAYERS))
        notes.append(f"max_draft_len {k} from the checkpoint (EagleForCausalLM sizes its inputs from it)")
    elif name == "target":
        mode, draft = trtllm.SPEC_MODE_DRAFT_TOKENS_EXTERNAL, k
    elif name == "draft":
        max_seq = seq + k  # it drafts k tokens past any target prefix, as far as the target engine reaches
        notes.append(f"max_seq_len {seq}+{k}: the draft proposes up to max_draft_len tokens past the target's "
                     "longest sequence")
    if name in ("eagle", "target", "draft") and plugins["use_paged_context_fmha"] != "enable":
        raise AssertionError("rules.check_checkpoint must refuse KV formats that disable paged context FMHA")
    mnt = tokens if tokens is not None else rules.max_num_tokens(opts, max_seq, draft, name)
    if mnt < inp:
        if plugins["use_paged_context_fmha"] == "enable":
            warnings.append(f"{name}: max_num_tokens {mnt} < max_input_len {inp}; prompts longer than {mnt} tokens "
                            "need enable_chunked_context at run time")
        else:
            warnings.append(f"{name}: max_num_tokens {mnt} < max_input_len {inp} without paged context FMHA (so no "
                            f"chunked context): prompts longer than {mnt} tokens cannot be scheduled")
    if mnt > trtllm.MAX_NUM_TOKENS_ADVISED:
        warnings.append(f"{name}: max_num_tokens {mnt} > {trtllm.MAX_NUM_TOKENS_ADVISED}; trtllm-build warns this "
                        "rarely helps and can exceed TensorRT's tensor volume limit")
    engine_seq = max_seq + draft + eagle_layers
    if mode:
        notes.append(f"engine max_seq_len will be {engine_seq}: trtllm-build adds max_draft_len"
                     + (" and num_eagle_layers" if eagle_layers else ""))
    gen_logits = opts.draft_logits and name in ("target", "draft")
    if gen_logits:
        notes.append("gather_generation_logits: logits-based acceptance (use_logits=True) needs them on both "
                     "engines (trtllm-build calls the flag deprecated; the executor behind Triton still needs it)")
    return EngineBuild(
        name=name, checkpoint_dir=str(ckpt.path), engine_dir=f"engines/{name}", architecture=ckpt.architecture,
        dtype=ckpt.dtype, quant_algo=ckpt.quant_algo, kv_cache_quant_algo=ckpt.kv_cache_quant_algo, tp=ckpt.tp,
        speculative_decoding_mode=mode, max_draft_len=draft, num_eagle_layers=eagle_layers,
        max_batch_size=opts.max_batch_size, max_input_len=inp, max_seq_len=max_seq, engine_max_seq_len=engine_seq,
        max_num_tokens=mnt, max_beam_width=opts.max_beam_width, plugins=plugins,
        gather_generation_logits=gen_logits, gather_context_logits=opts.gather_context_logits, notes=notes)
