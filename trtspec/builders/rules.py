"""The combinations TensorRT-LLM 1.2 rejects or silently degrades, refused before any GPU time.

Each refusal is one line: what is wrong (naming the flag or the config field), why (the reference
section), and what to do instead. Combinations that build but are not officially exercised (FP8 or
weight-only EAGLE, a Qwen2 EAGLE base, a SmoothQuant or weight-only draft-target pair) become
warnings, not refusals: the user may have validated them; the plan says so plainly.
"""

from __future__ import annotations

from ..checkpoints.scheme import QuantScheme
from ..checkpoints.trtllm_ckpt import TrtllmCheckpoint
from ..errors import TrtspecError
from ..upstream import trtllm
from .options import BuildOptions

SPECULATIVE = ("eagle", "target", "draft")


def check_options(opts: BuildOptions) -> None:
    """Flag-level checks that need no checkpoint."""
    if opts.gpu not in trtllm.GPU_MEMORY_MIB:
        raise TrtspecError(f"build.gpu: {opts.gpu!r} is not one of {', '.join(trtllm.GPU_MEMORY_MIB)} "
                           f"(plans are for SM{trtllm.SM_VERSION} Hopper GPUs)")
    for field in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens", "max_beam_width"):
        value = getattr(opts, field)
        if value is not None and value < 1:
            raise TrtspecError(f"build.{field}: expected a positive integer, got {value}")
    if opts.max_draft_len is not None and opts.max_draft_len < 1:
        raise TrtspecError(f"build.max_draft_len: expected >= 1, got {opts.max_draft_len}")
    if opts.max_input_len and opts.max_seq_len and opts.max_input_len > opts.max_seq_len:
        max_input_len(opts, opts.max_seq_len)  # refused before any checkpoint is read


def check_checkpoint(name: str, ckpt: TrtllmCheckpoint, opts: BuildOptions, warnings: list[str]) -> None:
    """Refuse what cannot build (or builds into something else) for this role; collect warnings."""
    q, kv = ckpt.quant_algo, ckpt.kv_cache_quant_algo
    if q in trtllm.BLACKWELL_ONLY_ALGOS:
        raise TrtspecError(f"{ckpt.where('quantization.quant_algo')} is {q}, which needs a Blackwell GPU; "
                           f"on H100/H200 quantize to FP8 instead")
    if q not in trtllm.SUPPORTED_QUANT_ALGOS:
        accepted = ", ".join(a for a in trtllm.SUPPORTED_QUANT_ALGOS if a)
        raise TrtspecError(f"{ckpt.where('quantization.quant_algo')} is {q!r}; H100 plans accept none or one of "
                           f"{accepted}")
    if kv is not None and kv not in trtllm.KV_CACHE_QUANT_ALGOS:
        raise TrtspecError(f"{ckpt.where('quantization.kv_cache_quant_algo')} is {kv!r}; expected null, FP8 or INT8")
    if name == "plain" and ckpt.is_eagle:
        raise TrtspecError(f"{ckpt.path}: an EagleForCausalLM checkpoint builds only as build.role eagle")
    if name in ("target", "draft") and ckpt.is_eagle:
        raise TrtspecError(f"{ckpt.path}: an EagleForCausalLM checkpoint cannot be the {name} of a draft-target "
                           "pair; build it with build.role eagle, or convert a plain checkpoint for the pair")
    if name == "eagle":
        _check_eagle(ckpt, opts, warnings)
    if name in SPECULATIVE:
        _check_speculative(name, ckpt, opts)
        if name != "eagle" and q not in trtllm.DTM_SUPPORTED_QUANT_ALGOS:
            warnings.append(f"{name}: {q} weights in a draft-target pair are outside the draft-target README's "
                            "support matrix (FP16/BF16/FP8); validate acceptance on the GPU before serving")
    elif opts.draft_logits:
        raise TrtspecError("build.draft_logits: applies to draft-target builds (a pair directory, build.role target "
                           "or draft); a plain engine has no draft to accept")
    if q and q.startswith(trtllm.SMOOTHQUANT_PREFIX) and kv == "FP8":
        warnings.append(f"{name}: SmoothQuant weights with an FP8 KV cache disable paged context FMHA; "
                        "INT8 or no KV quantization is the usual pairing")
    if name in ("plain",) and kv == "INT8":
        warnings.append(f"{name}: INT8 KV cache disables paged context FMHA, so this engine has no KV-cache "
                        "reuse and no chunked context; use FP8 KV to keep them")
    _check_positions(name, ckpt, opts, warnings)


def _check_eagle(ckpt: TrtllmCheckpoint, opts: BuildOptions, warnings: list[str]) -> None:
    if _is_qwen3(ckpt):
        raise TrtspecError(f"{ckpt.path}: EAGLE on Qwen3 cannot build: EagleForCausalLM is LLaMA-based and has no "
                           "q/k norm (reference §4.7, §9.17); use a draft-target pair (trtspec convert --draft)")
    if not ckpt.is_eagle:
        raise TrtspecError(f"{ckpt.path}: build.role eagle needs an EagleForCausalLM checkpoint, got "
                           f"{ckpt.architecture} (convert with 'trtspec convert --hf BASE --eagle HEAD')")
    q = ckpt.quant_algo
    if q and q.startswith(trtllm.SMOOTHQUANT_PREFIX):
        raise TrtspecError(f"{ckpt.where('quantization.quant_algo')} is {q}: SmoothQuant with EAGLE is broken "
                           "upstream (TRT-LLM issue 3207, reference §3.6, §9.5); quantize the EAGLE checkpoint "
                           "to FP8 (with FP8 KV) instead")
    k = eagle_draft_len(ckpt)
    if opts.max_draft_len is not None and opts.max_draft_len != k:
        raise TrtspecError(f"build.max_draft_len: {opts.max_draft_len} differs from the checkpoint's max_draft_len "
                           f"{k}; "
                           "EAGLE engines size their tree from the checkpoint, so reconvert with "
                           f"'trtspec convert --eagle ... --max-draft-len {opts.max_draft_len}' or leave "
                           "build.max_draft_len unset")
    if opts.max_batch_size > trtllm.EAGLE_MAX_BATCH_SIZE:
        raise TrtspecError(f"build.max_batch_size: EAGLE engines allow at most {trtllm.EAGLE_MAX_BATCH_SIZE} "
                           f"(builder.py asserts it), got {opts.max_batch_size}")
    if q and q != "FP8":
        warnings.append(f"eagle: {q} weights with EAGLE are not an officially exercised configuration "
                        "(reference §3.7, §4.6); validate acceptance on the GPU before serving")
    elif q == "FP8":
        net = QuantScheme.from_config(ckpt.config.get("eagle_net_config") or {}, ckpt.where("eagle_net_config"))
        if net.quant_algo != "FP8":
            warnings.append("eagle: FP8 base with a non-FP8 EAGLE head (eagle_net_config.quantization) is not the "
                            "official route (reference §4.6 item 4); test it on the GPU first")
    if q and not ckpt.quant.is_excluded("eagle_nets.0.lm_head"):
        warnings.append("eagle: exclude_modules does not match eagle_nets.N.lm_head, so TensorRT-LLM quantizes the "
                        "EAGLE heads' lm_head (an explicit list replaces the defaults, reference §3.3, §9.13); "
                        "add '*lm_head' when re-quantizing")
    if ckpt.spec.attn_bias:
        warnings.append("eagle: a base with qkv bias (Qwen2-style) under EagleForCausalLM is unverified upstream "
                        "(reference §4.7)")


def eagle_draft_len(ckpt: TrtllmCheckpoint) -> int:
    """The EAGLE checkpoint's max_draft_len (typed when the checkpoint was loaded: EagleConfig's
    default when absent, a null refused), within what builder.py asserts."""
    k = int(ckpt.config.get("max_draft_len", trtllm.EAGLE_DEFAULT_MAX_DRAFT_LEN))
    limit = trtllm.EAGLE_MAX_DRAFT_LEN_LIMIT
    if not 1 <= k <= limit:
        raise TrtspecError(f"{ckpt.where('max_draft_len')} is {k}; EAGLE engines need 1..{limit} "
                           "(builder.py asserts it); reconvert with --max-draft-len")
    return k


def _is_qwen3(ckpt: TrtllmCheckpoint) -> bool:
    return ckpt.spec.family == "qwen3" or ckpt.config.get("qwen_type") == "qwen3" or ckpt.spec.qk_norm


def _check_speculative(name: str, ckpt: TrtllmCheckpoint, opts: BuildOptions) -> None:
    q, kv = ckpt.quant_algo, ckpt.kv_cache_quant_algo
    what = "EAGLE" if name == "eagle" else "draft-target"
    if kv == "INT8":
        raise TrtspecError(f"{ckpt.where('quantization.kv_cache_quant_algo')} is INT8: an INT8 KV cache disables "
                           f"paged context FMHA, which {what} engines need (reference §7.2, §9.6); quantize the KV "
                           "cache to FP8 (with FP8 weights) or leave it unquantized")
    if kv == "FP8" and q not in trtllm.FP8_CONTEXT_FMHA_ALGOS:
        raise TrtspecError(f"{ckpt.where('quantization')}: FP8 KV cache with {q or 'unquantized'} weights disables "
                           f"paged context FMHA, which {what} engines need (reference §7.2); use FP8 weights with "
                           "FP8 KV, or leave the KV cache unquantized")
    if opts.max_beam_width > 1:
        raise TrtspecError(f"build.max_beam_width: speculative decoding needs beam width 1, got {opts.max_beam_width} "
                           "(reference §7.1, §9.4); build a separate plain engine for beam search")
    if opts.gather_context_logits and name in ("eagle", "target"):
        raise TrtspecError("build.gather_context_logits: not with a draft length: trtllm-build refuses it ('Gather "
                           "context logits is not support with draft len > 0', reference §5.1); use "
                           "build.draft_logits (generation logits) for logits-based acceptance")
    if opts.draft_logits and name == "eagle":
        raise TrtspecError("build.draft_logits: applies to draft-target engines; EAGLE accepts inside the engine "
                           "(typical acceptance is the runtime eagle_posterior_threshold), so leave it off")


def _check_positions(name: str, ckpt: TrtllmCheckpoint, opts: BuildOptions, warnings: list[str]) -> None:
    """builder.py warns (accuracy) when max_seq_len exceeds the positions the RoPE setup covers."""
    if not opts.max_seq_len:
        return
    scaling = ckpt.config.get("rotary_scaling") or {}
    kind = scaling.get("type", scaling.get("rope_type"))
    factor = 1.0 if kind in ("su", "longrope", "llama3") or not scaling else float(scaling.get("factor", 1.0))
    limit = int(ckpt.spec.max_position_embeddings * factor)
    if opts.max_seq_len > limit:
        warnings.append(f"{name}: --max-seq-len {opts.max_seq_len} exceeds the model's {limit} positions "
                        "(max_position_embeddings x rotary factor); accuracy past that is not guaranteed")


def draft_len(role: str, ckpt: TrtllmCheckpoint, opts: BuildOptions) -> int:
    """The engine's max_draft_len: the checkpoint's for EAGLE, --max-draft-len (default 8) for pairs."""
    if role == "eagle":
        return eagle_draft_len(ckpt)
    if role in ("pair", "target", "draft"):
        return opts.max_draft_len or trtllm.DTM_DEFAULT_MAX_DRAFT_LEN
    if opts.max_draft_len is not None:
        raise TrtspecError("build.max_draft_len: applies to speculative builds (eagle, a pair, target or draft); "
                           "this is a plain checkpoint")
    return 0


def max_input_len(opts: BuildOptions, max_seq_len: int) -> int:
    """build.max_input_len (default max_seq_len / 2); refuse one above max_seq_len, given or defaulted,
    which _init_max_seq_len would silently clip to it."""
    if opts.max_input_len is None:
        return max(1, max_seq_len // 2)
    if opts.max_input_len > max_seq_len:
        seq = "build.max_seq_len" if opts.max_seq_len else "the default max_seq_len (min(8192, model positions))"
        raise TrtspecError(f"build.max_input_len: {opts.max_input_len} exceeds {seq} {max_seq_len} (trtllm-build "
                           "would silently clip it); raise build.max_seq_len or lower build.max_input_len")
    return opts.max_input_len


def max_num_tokens(opts: BuildOptions, max_seq_len: int, k: int, name: str) -> int:
    """The value trtllm-build will keep: refuse a user value it would silently clip or raise."""
    ceiling = max_seq_len * opts.max_batch_size  # _init_max_seq_len clips above this
    spec_floor = opts.max_batch_size * (k + 1) if k else 0  # build() raises below this
    floor = max(spec_floor, trtllm.TOKENS_PER_BLOCK)  # check_max_num_tokens raises below this, for every build
    if opts.max_num_tokens is None:
        return max(min(trtllm.CLI_MAX_NUM_TOKENS, ceiling), floor)
    if opts.max_num_tokens > ceiling:
        raise TrtspecError(f"build.max_num_tokens: {opts.max_num_tokens} exceeds max_batch_size x max_seq_len = "
                           f"{ceiling} for the {name} engine (trtllm-build would clip it); use at most {ceiling}")
    if opts.max_num_tokens < floor:
        why = (f"max_batch_size x (max_draft_len + 1) = {opts.max_batch_size} x ({k} + 1)" if spec_floor == floor
               else f"tokens_per_block ({trtllm.TOKENS_PER_BLOCK})")
        raise TrtspecError(f"build.max_num_tokens: {opts.max_num_tokens} is below {why} = {floor} for the {name} "
                           f"engine (trtllm-build would silently raise it); use at least {floor}")
    return opts.max_num_tokens
