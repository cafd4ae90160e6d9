"""An EAGLE-3 head on a target, as ModelOpt builds, trains and exports it.

The head is ModelOpt's own (`modelopt.torch.speculative.convert` with EAGLE3_DEFAULT_CFG): its
architecture, its forward with training-time-test (TTT) steps and its loss (soft cross-entropy against
the target's next-token distribution, decayed per TTT step) are ModelOpt's, and the output is what
`modelopt.torch.export.export_speculative_decoding` writes (config.json + model.safetensors), with
its decoder layer renamed from `layers.0.*` to `midlayer.*`: TensorRT-LLM main renames it on load, but
1.2.0rc2's Eagle3ForCausalLM.load_weights does not (upstream.trtllm, EAGLE-3), and `midlayer.*` (the
SafeAILab layout) is what every version loads (a head of several layers: `midlayer.{i}.*`, the list
TensorRT-LLM builds then). We only size it for the target: ModelOpt's default
head is sized for 8B targets (intermediate 14336, 32 heads), so width, heads and head_dim follow
the target, and its rope the target's too."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import torch

from ..checkpoints.eagle3 import draft_to_target, midlayer_name, modelopt_name
from ..errors import TrtspecError
from ..upstream.modelopt import EAGLE3_CPU_OVERRIDES, EAGLE3_EXPORT_FILES
from .options import TrainDraftOptions


def eagle3_config(target_config, options: TrainDraftOptions) -> dict:
    """ModelOpt's EAGLE-3 mode config, sized for `target_config` (an HF config)."""
    import modelopt.torch.speculative as mtsp

    cfg = copy.deepcopy(mtsp.EAGLE3_DEFAULT_CFG["config"])
    cfg.update(EAGLE3_CPU_OVERRIDES)
    cfg["eagle_ttt_steps"] = options.ttt_steps
    heads = target_config.num_attention_heads
    theta = getattr(target_config, "rope_theta", None) or cfg["eagle_architecture_config"]["rope_theta"]
    cfg["eagle_architecture_config"].update(
        num_hidden_layers=options.num_layers,
        intermediate_size=options.intermediate_size or target_config.intermediate_size,
        num_attention_heads=heads,
        num_key_value_heads=getattr(target_config, "num_key_value_heads", None) or heads,
        head_dim=getattr(target_config, "head_dim", None) or target_config.hidden_size // heads,
        rope_theta=theta, rope_scaling={"rope_type": "default", "rope_theta": theta},
        torch_dtype=str(target_config.torch_dtype or "float32").replace("torch.", ""),
        draft_vocab_size=options.draft_vocab_size or target_config.vocab_size)
    return cfg


def check_draft_vocab(options: TrainDraftOptions, vocab_size: int) -> None:
    """Refuse a draft vocabulary larger than the target's before the target answers any prompt (else
    ModelOpt's conversion asserts, after the costly regeneration)."""
    if options.draft_vocab_size and options.draft_vocab_size > vocab_size:
        raise TrtspecError(f"draft.train.draft_vocab_size: {options.draft_vocab_size} exceeds the target's "
                           f"vocabulary ({vocab_size})")


def frequent_vocab(responses: list[list[int]], size: int, vocab_size: int) -> torch.Tensor:
    """ModelOpt's d2t for a draft vocabulary of the `size` most frequent response tokens (as its
    utils.calibrate_frequent_vocab, counted over token ids we already have rather than re-tokenised
    text), topped up with the lowest unused ids when fewer distinct tokens occur; sorted by id.
    d2t[i] = target id - i."""
    counts = Counter(t for r in responses for t in r)
    chosen = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]
    taken = set(chosen)
    chosen += [t for t in range(vocab_size) if t not in taken][:size - len(chosen)]
    ids = torch.tensor(sorted(chosen), dtype=torch.int64)
    return ids - torch.arange(size, dtype=torch.int64)


def vocab_coverage(d2t: torch.Tensor | None, examples) -> dict[str, float]:
    """{workload: share of its response tokens the draft vocabulary holds} (`examples`: data.Example).
    A token outside it can never be drafted, so each uncovered share is a ceiling on acceptance that no
    training lifts: SmolLM2's held-out MT-Bench answers are 84% covered by a 4096-token vocabulary
    chosen on the training answers, its code and math answers 93%. None (the full vocabulary): 1.0."""
    vocab = None if d2t is None else set(draft_to_target(d2t, len(d2t)).tolist())
    tokens: dict[str, list[int]] = {}
    for e in examples:
        tokens.setdefault(e.workload, []).extend(e.response)
    return {w: (sum(t in vocab for t in ts) / len(ts) if vocab is not None else 1.0)
            for w, ts in tokens.items() if ts}


def convert(target, options: TrainDraftOptions, d2t: torch.Tensor | None, seed: int):
    """Turn a loaded HF target into ModelOpt's EAGLE-3 model (in place; only the head trains, its
    first input_layernorm excepted). The head's initial weights are drawn under `seed`."""
    import modelopt.torch.speculative as mtsp

    cfg = eagle3_config(target.config, options)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mtsp.convert(target, [("eagle", cfg)])
    if d2t is not None:
        target.eagle_module.d2t.copy_(d2t.to(target.eagle_module.d2t.device))
    # ModelOpt's training forward applies the first layer's input_layernorm to the hidden half too,
    # TensorRT-LLM (and our runtime) do not (upstream.modelopt, the double-norm quirk): the two agree
    # only while its weight is all ones, so it stays at ModelOpt's ones, untrained.
    target.eagle_module.layers[0].input_layernorm.weight.requires_grad_(False)
    return target


def head_state(model) -> dict[str, torch.Tensor]:
    """The trainable head's tensors (and d2t), as saved in a resumable checkpoint."""
    return {k: v.detach().clone() for k, v in model.eagle_module.state_dict().items()}


def export(model, out: Path) -> None:
    """ModelOpt's exporter writes the head into `out` (an existing, empty directory)."""
    from modelopt.torch.export import export_speculative_decoding

    was_training = model.training
    model.eval()
    export_speculative_decoding(model, export_dir=out)
    model.train(was_training)
    missing = [f for f in EAGLE3_EXPORT_FILES if not (Path(out) / f).is_file()]
    if missing:
        raise TrtspecError(f"{out}: ModelOpt's export wrote no {', '.join(missing)}")
    layers = len(model.eagle_module.layers)
    _rename_tensors(Path(out) / "model.safetensors", lambda name: midlayer_name(name, layers))


def _rename_tensors(path: Path, rename) -> None:
    """Rewrite a safetensors file with its tensors renamed (a temp sibling, then rename)."""
    from safetensors.torch import load_file, save_file

    tensors = {rename(k): v.contiguous() for k, v in load_file(str(path)).items()}
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(path)


def load_head(model, head_dir: Path) -> None:
    """Load an exported head's tensors into a converted model's `eagle_module` (strict: every tensor
    the module has, no other; `lm_head` is skipped when the head shares the target's)."""
    from safetensors.torch import load_file

    layers = len(model.eagle_module.layers)
    sd = {modelopt_name(k, layers): v for k, v in load_file(str(Path(head_dir) / "model.safetensors")).items()}
    if not hasattr(model.eagle_module, "lm_head"):
        sd.pop("lm_head.weight", None)
    try:
        model.eagle_module.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        raise TrtspecError(f"{head_dir}: not a head for this target and configuration ({' '.join(str(e).split())[:300]})") from None
