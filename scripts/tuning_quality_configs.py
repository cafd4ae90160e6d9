"""The two configurations scripts/bench_tuning_quality.py measures: the models and the prompts.

`Config` is one of them: its target and draft checkpoints, workloads (prompt ids per name), the
draft lengths, new tokens and concurrency bands to measure. smollm2_config converts SmolLM2 with
its first layers as the draft; synthetic_config builds the two-halves SYNTHETIC pair (the bench
script's docstring, "Configurations", says what each is and why). Apart from the bench script
because building the models is a job of its own, unrelated to the profiling, tuning and brute
force the script then runs on them, the way scripts/published_setups.py holds the rows that
scripts/bench_published_setups.py checks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import torch


@dataclass
class Config:
    name: str
    synthetic: bool
    description: str
    max_k: int
    new_tokens: int
    bands: list[int]
    workloads: dict[str, list[list[int]]] = field(default_factory=dict)  # name -> prompt ids
    target: Path | None = None
    draft: Path | None = None


def smollm2_config(work: Path, prompts_per_set: int = 2, draft_layers: int = 6) -> Config:
    from trtspec.checkpoints.default_model import smollm2_dir
    from trtspec.checkpoints.derive import truncate_layers
    from trtspec.checkpoints.pair import convert_pair
    from trtspec.tokenizer import load_tokenizer
    from trtspec.workloads import load_workload, render

    hf = smollm2_dir()
    draft = truncate_layers(hf, work / "smol_draft_hf", draft_layers)
    pair = convert_pair(hf, draft, work / "smol_pair", dtype="float32")
    tok = load_tokenizer(hf)
    cfg = Config("smollm2", False, f"SmolLM2-135M-Instruct (30 layers) + draft = its first {draft_layers} layers; "
                 f"the {prompts_per_set} shortest prompts of each set", max_k=3, new_tokens=16, bands=[1],
                 target=pair / "target", draft=pair / "draft")
    for name, source in (("chat", "mt-bench"), ("code", "humaneval")):
        rendered = sorted((render(s, tok) for s in load_workload(source).samples), key=len)
        cfg.workloads[name] = rendered[:prompts_per_set]
    return cfg


V, H, NH, NKV, HD, INTER, LAYERS = 2048, 512, 8, 4, 64, 1536, 12
LOW_SCALE, HIGH_SCALE = 3e-4, 2e-3


def build_synthetic_pair(out: Path, seed: int = 0) -> tuple[Path, Path]:
    """The two-halves target and its bigram draft (bench_tuning_quality.py's docstring), as TRT-LLM checkpoints."""
    import transformers as tf

    from trtspec.checkpoints.convert import convert_hf

    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(architectures=["LlamaForCausalLM"], hidden_size=H, intermediate_size=INTER,
                         num_hidden_layers=LAYERS, num_attention_heads=NH, num_key_value_heads=NKV, vocab_size=V,
                         max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
                         rope_theta=10000.0)
    model = tf.LlamaForCausalLM(cfg).eval()
    low_dim, low_tok, low_inter = (torch.arange(n) < n // 2 for n in (H, V, INTER))
    low_q = torch.arange(NH * HD) // HD < NH // 2
    low_kv = torch.arange(NKV * HD) // HD < NKV // 2
    scale = torch.where(low_dim, LOW_SCALE, HIGH_SCALE)[:, None]

    def same_half(rows, cols):  # [rows, cols] mask: 1 where row and column belong to the same half
        return (rows[:, None] == cols[None, :]).float()

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() != 2:
                continue
            p.mul_(4.0)  # as tests/tiny_models.py: random init gives near-flat logits otherwise
            if name.endswith("embed_tokens.weight") or name == "lm_head.weight":
                p.mul_(same_half(low_tok, low_dim))
            elif "q_proj" in name:
                p.mul_(same_half(low_q, low_dim))
            elif "k_proj" in name or "v_proj" in name:
                p.mul_(same_half(low_kv, low_dim))
            elif "o_proj" in name:
                p.mul_(same_half(low_dim, low_q) * scale)
            elif "gate_proj" in name or "up_proj" in name:
                p.mul_(same_half(low_inter, low_dim))
            elif "down_proj" in name:
                p.mul_(same_half(low_dim, low_inter) * scale)
    model.save_pretrained(out / "syn_target_hf")
    dcfg = copy.deepcopy(cfg)
    dcfg.num_hidden_layers = 1
    draft = tf.LlamaForCausalLM(dcfg).eval()
    draft.load_state_dict({k: v for k, v in model.state_dict().items() if ".layers." not in k or ".layers.0." in k})
    with torch.no_grad():
        for name, p in draft.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.zero_()
    draft.save_pretrained(out / "syn_draft_hf")
    convert_hf(out / "syn_target_hf", out / "syn_target", dtype="float32")
    convert_hf(out / "syn_draft_hf", out / "syn_draft", dtype="float32")
    return out / "syn_target", out / "syn_draft"


def synthetic_config(work: Path, prompts: int = 4, prompt_len: int = 16) -> Config:
    target, draft = build_synthetic_pair(work)
    cfg = Config("synthetic", True, f"SYNTHETIC two-halves target ({LAYERS} layers, hidden {H}, vocab {V}; layer "
                 f"scale {LOW_SCALE:g} on ids < {V // 2}, {HIGH_SCALE:g} above) + its 1-layer bigram draft; "
                 f"{prompts} random prompts of {prompt_len} ids per workload", max_k=6, new_tokens=32,
                 bands=[1, 4], target=target, draft=draft)
    g = torch.Generator().manual_seed(1)
    cfg.workloads["synA"] = [torch.randint(10, V // 2, (prompt_len,), generator=g).tolist() for _ in range(prompts)]
    cfg.workloads["synB"] = [torch.randint(V // 2, V, (prompt_len,), generator=g).tolist() for _ in range(prompts)]
    return cfg
