"""Builders shared by the Triton tests (no tests here): tiny checkpoints with a tokenizer, fake
engine directories, and tuning.json files with chosen settings.

Tuning files come from the real tuner (`run_tune` on a synthetic profile with the analytic H100
cost of config-only Llama-3.1-8B stand-ins), then the choices are overwritten with fixed values,
so that the schema is always the current one but the tests (and golden files) do not depend on the
cost model's numbers.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from tiny_models import make_eagle_head, make_hf_model, save_tiny_tokenizer

H, I = 64, 96
LLAMA = {"architecture": "LlamaForCausalLM", "dtype": "bfloat16", "vocab_size": 128256, "hidden_size": 4096,
         "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_size": 128,
         "intermediate_size": 14336, "max_position_embeddings": 131072, "rotary_base": 500000.0,
         "hidden_act": "silu", "norm_epsilon": 1e-5, "position_embedding_type": "rope_gpt_neox",
         "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
         "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
DRAFT = {**LLAMA, "hidden_size": 2048, "num_hidden_layers": 16, "head_size": 64, "intermediate_size": 8192}
EAGLE = {**LLAMA, "architecture": "EagleForCausalLM", "num_eagle_layers": 4, "max_draft_len": 63,
         "max_non_leaves_per_layer": 10,
         "eagle_net_config": {**{k: LLAMA[k] for k in LLAMA if k != "quantization"}, "num_hidden_layers": 1,
                              "quantization": {"quant_algo": None, "kv_cache_quant_algo": None}}}
# Fixed trees for the EAGLE tuning fixtures (depth 4 = num_eagle_layers, within 63 nodes / 10 non-leaves).
TREE_A = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0, 0]]
TREE_B = [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]


def fake_ckpt(path: Path, config: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file({"placeholder": torch.zeros(1)}, str(path / "rank0.safetensors"))
    return path


def fake_engine(out: Path, ckpt_config: dict, *, spec_mode: str | None = None, max_draft_len: int = 0,
                max_batch_size: int = 64) -> Path:
    """An engine directory as tests/fake_trtllm_build.py writes it (config.json + rank files)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fake_trtllm_build

    ckpt = fake_ckpt(out.parent / f".{out.name}-ckpt", ckpt_config)
    argv = ["--checkpoint_dir", str(ckpt), "--output_dir", str(out), "--max_batch_size", str(max_batch_size),
            "--max_input_len", "4096", "--max_seq_len", "8192", "--max_num_tokens", "8192",
            "--output_timing_cache", str(out.parent / f".{out.name}.cache")]
    if spec_mode:
        argv += ["--speculative_decoding_mode", spec_mode, "--max_draft_len", str(max_draft_len)]
    assert fake_trtllm_build.main(argv) == 0
    return out


def build_dir(root: Path, mode: str, tokenizer_ckpt: Path | None = None, max_draft_len: int = 8) -> Path:
    """A `trtspec build`-style output directory: engines/<name>/, engine_manifest.json, build_plan.json."""
    root.mkdir(parents=True, exist_ok=True)
    engines = {}
    if mode == "eagle":
        engines["eagle"] = fake_engine(root / "engines" / "eagle", EAGLE, spec_mode="eagle", max_draft_len=63)
    else:
        engines["target"] = fake_engine(root / "engines" / "target", LLAMA, spec_mode="draft_tokens_external",
                                        max_draft_len=max_draft_len)
        engines["draft"] = fake_engine(root / "engines" / "draft", DRAFT)
    (root / "engine_manifest.json").write_text(json.dumps(
        {"plan": "build_plan.json", "engines": {n: {"engine_dir": f"engines/{n}"} for n in engines}}))
    builds = [{"name": n, "checkpoint_dir": str(tokenizer_ckpt or root)} for n in engines]
    (root / "build_plan.json").write_text(json.dumps({"builds": builds}))
    return root


def tiny_tokenizer_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    save_tiny_tokenizer(path)
    return path


def _scaled(model, scale: float):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(scale)
    return model


def _sharpened(model, factor: float):
    """lm_head scaled by `factor`: peaked next-token distributions, so that sampling at T ~ 0.7 still
    follows the argmax often (the random tiny models are near-uniform over their 1001 tokens)."""
    if factor != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(factor)
    return model


def tiny_pair(d: Path, sharpen: float = 1.0) -> Path:
    """A draft-target pair directory (target/ + draft/) of tiny Llamas that agree often but not always
    (a near-bigram target and a pure-bigram draft, as in test_runtime_spec), with the tiny tokenizer.
    sharpen: scale both lm_heads (see _sharpened)."""
    from trtspec.checkpoints.pair import convert_pair

    base = _sharpened(_scaled(make_hf_model("llama", d / "hf", num_key_value_heads=1), 0.1), sharpen)
    base.save_pretrained(d / "hf")
    _scaled(copy.deepcopy(base), 0.0).save_pretrained(d / "draft_hf")
    for m in ("hf", "draft_hf"):
        save_tiny_tokenizer(d / m)
    convert_pair(d / "hf", d / "draft_hf", d / "pair", dtype="float32")
    return d / "pair"


def small_vocab_pair(d: Path, vocab: int = 12) -> Path:
    """A pair directory of tiny Llamas over a `vocab`-token vocabulary (no tokenizer), target and
    draft from different seeds with flattened logits, so that at temperature > 0 every token has
    a fair probability and the draft is often but not always right: the setting in which the
    output distribution of a sampling accept rule can be checked exhaustively."""
    from trtspec.checkpoints.options import ConvertOptions
    from trtspec.checkpoints.stage import convert

    for name, seed in (("target", 0), ("draft", 1)):
        m = make_hf_model("llama", d / f"{name}_hf", seed=seed, vocab_size=vocab, num_key_value_heads=1)
        with torch.no_grad():
            m.lm_head.weight.mul_(0.6)
        m.save_pretrained(d / f"{name}_hf")
        convert(d / f"{name}_hf", d / "small_pair" / name, ConvertOptions(dtype="float32"))
    return d / "small_pair"


def tiny_eagle(d: Path, sharpen: float = 1.0) -> Path:
    """An EAGLE-1 checkpoint (4 levels, max_draft_len 63) over a near-bigram tiny Llama, with a
    bigram head (fc picks the token embedding), and the tiny tokenizer. sharpen: scale the lm_head
    the target and the head share (see _sharpened)."""
    from trtspec.checkpoints.eagle import convert_eagle

    base = _sharpened(_scaled(make_hf_model("llama", d / "ehf", num_key_value_heads=1), 0.1), sharpen)
    base.save_pretrained(d / "ehf")
    save_tiny_tokenizer(d / "ehf")
    head = {"embed_tokens.weight": base.model.embed_tokens.weight.detach().clone(),
            "fc.weight": torch.cat([torch.eye(H), torch.zeros(H, H)], 1), "fc.bias": torch.zeros(H),
            "layers.0.self_attn.o_proj.weight": torch.zeros(H, H), "layers.0.mlp.down_proj.weight": torch.zeros(H, I)}
    make_eagle_head(d / "ehf", d / "head", extra=head)
    convert_eagle(d / "ehf", d / "head", d / "eagle", dtype="float32", tp=1)
    return d / "eagle"


def tuning_file(path: Path, mode: str, choices: dict, bands=(1, 4), max_profiles: int | None = None) -> Path:
    """tuning.json with fixed choices. draft-target: choices = {workload: K or [K per band]}; eagle3:
    the same chain choices, the tuning relabelled as tuned for an EAGLE-3 head;
    eagle: choices = {workload: tree}, workloads sharing a tree share a profile; ngram: choices =
    {workload: (K, max_matching_ngram_size)}, K = 0 for off."""
    from trtspec.tuning.tune import run_tune
    from trtspec.tuning.schema import dump_json
    from trtspec.tuning.select import SelectConfig
    from trtspec.tuning.synthetic import chain_profile, eagle_profile

    d = path.parent
    d.mkdir(parents=True, exist_ok=True)
    cfg = SelectConfig(concurrency_bands=list(bands))
    if mode == "ngram":
        from trtspec.tuning.synthetic import ngram_profile

        t = fake_ckpt(d / "ck_t", LLAMA)
        sizes = sorted({n for _, n in choices.values() if n})
        (d / "profile.json").write_text(dump_json(ngram_profile({w: 0.7 for w in choices}, sizes, target=str(t))))
        tuning = run_tune(d / "profile.json", "h100", t, None, cfg)
        for w, (k, n) in choices.items():
            for b in tuning.workloads[w].bands:
                b.draft_len, b.max_matching_ngram_size, b.speculate = k, n if k else None, k > 0
        tuning.max_draft_len = max(k for k, _ in choices.values())
    elif mode in ("draft-target", "eagle3"):
        t, dr = fake_ckpt(d / "ck_t", LLAMA), fake_ckpt(d / "ck_d", DRAFT)
        prof = chain_profile({w: 0.7 for w in choices}, num_samples=2, T=32, max_k=8, target=str(t), draft=str(dr))
        (d / "profile.json").write_text(dump_json(prof))
        tuning = run_tune(d / "profile.json", "h100", t, dr, cfg)
        for w, ks in choices.items():
            ks = ks if isinstance(ks, (list, tuple)) else [ks] * len(bands)
            for b, k in zip(sorted(tuning.workloads[w].bands, key=lambda b: b.concurrency), ks):
                b.draft_len, b.speculate = k, k > 0
        tuning.max_draft_len = max(b.draft_len for w in tuning.workloads.values() for b in w.bands)
        tuning.mode = mode
    else:
        e = fake_ckpt(d / "ck_e", EAGLE)
        prof = eagle_profile({w: (0.6, 0.05) for w in choices}, num_samples=2, T=32, depth=4, top_k=10, target=str(e))
        (d / "profile.json").write_text(dump_json(prof))
        tuning = run_tune(d / "profile.json", "h100", e, None, cfg.model_copy(update={"max_profiles": max_profiles}))
        from trtspec.tuning.tuning_schema import ServedProfile

        trees = []
        for tree in choices.values():
            if tree not in trees:
                trees.append(tree)
        profiles = []
        for b in sorted(bands):
            for i, tree in enumerate(trees):
                members = sorted(w for w, t in choices.items() if t == tree)
                profiles.append(ServedProfile(name=f"c{b}-p{i}", concurrency=b, workloads=members,
                                              eagle_choices=tree, num_nodes=len(tree), mean_throughput_loss=0.0))
        tuning.profiles = profiles
        for w, tree in choices.items():
            for band in tuning.workloads[w].bands:
                band.eagle_choices, band.profile = tree, f"c{band.concurrency}-p{trees.index(tree)}"
        tuning.max_draft_len = max(len(t) for t in trees)
    path.write_text(dump_json(tuning))
    return path


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def cpu_repository(d: Path, mode: str, ckpt: Path, choices: dict, bands=(1, 16)) -> tuple[Path, Path]:
    """A cpu-flavor repository under d/repo serving `ckpt` with the routes of tuning_file(mode,
    choices, bands); returns (repository, tuning.json)."""
    from trtspec.triton_repo.repo import RepoRequest, make_repository

    tuning = tuning_file(d / "t" / "tuning.json", mode, choices, bands=bands)
    make_repository(RepoRequest(tuning=tuning, flavor="cpu", out=d / "repo", ckpt=ckpt))
    return d / "repo", tuning


def serve_this_trtspec(repo: Path) -> Path:
    """Link the trtspec under test into each model version directory of `repo`, so that a live
    server runs it: the python backend's stub runs Python isolated (PYTHONPATH is ignored) and finds
    trtspec through the venv's editable install, another checkout's in a git worktree; the version
    directory is on the stub's sys.path, searched before that install's finder."""
    import trtspec

    src = Path(trtspec.__file__).resolve().parent
    for version in repo.glob("*/1"):
        (version / "trtspec").symlink_to(src, target_is_directory=True)
    return repo


def smollm2_pair_and_short_prompts(smollm2_hf: Path, d: Path, draft_layers: int, per_set: int):
    """SmolLM2 with a `draft_layers`-layer truncated draft, as a pair, loaded; and the `per_set`
    shortest rendered prompts of mt-bench and humaneval as (id, ids) (on a CPU the prefill dominates
    otherwise). The setup of the SmolLM2 profile-vs-runtime tests."""
    from trtspec.checkpoints.derive import truncate_layers
    from trtspec.checkpoints.pair import convert_pair
    from trtspec.runtime.generate import load_models
    from trtspec.workloads import load_workload, render

    draft = truncate_layers(smollm2_hf, d / "draft_hf", draft_layers)
    convert_pair(smollm2_hf, draft, d / "pair", dtype="float32")
    models = load_models(d / "pair")
    prompts = []
    for w in ("mt-bench", "humaneval"):
        rendered = sorted(((f"{w}:{s.id}", render(s, models.tokenizer)) for s in load_workload(w).samples),
                          key=lambda p: (len(p[1]), p[0]))
        prompts += rendered[:per_set]
    return models, prompts


def choice_pair(d: Path) -> tuple[Path, dict[str, list[str]]]:
    """A pair where the best drafter differs by workload (tests of the drafter choice): a 12-layer
    target (hidden 256) whose layers write nothing into the residual stream, so its next token is a
    function of the current one (a bigram model: even 0.001 of the layers' output flips near-ties
    of the random logits with the context), and its first layer as the draft: always right, and
    cheap (about 0.45 of a target step under the cpu cost preset). Two prompt sets: `chat` (short
    prompts, whose answers the n-gram pool has not seen until the bigram chain cycles) and `edit`
    (each prompt quoting the target's own continuation of its start, then that start again: the
    answer repeats the quote, so n-gram drafts are right, and free). Returns the pair directory and
    {workload: prompt texts}."""
    from trtspec.checkpoints.derive import truncate_layers
    from trtspec.checkpoints.pair import convert_pair
    from trtspec.runtime.generate import generate_batch, load_models

    big = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=12, num_attention_heads=4,
               num_key_value_heads=1)
    _scaled(make_hf_model("llama", d / "hf", **big), 0.0).save_pretrained(d / "hf")
    save_tiny_tokenizer(d / "hf")
    truncate_layers(d / "hf", d / "draft_hf", 1)
    save_tiny_tokenizer(d / "draft_hf")
    pair = convert_pair(d / "hf", d / "draft_hf", d / "choice_pair", dtype="float32")
    starts = [[5 + 37 * i + j for j in range(4)] for i in range(6)]
    conts = [r.output_ids for r in generate_batch(load_models(pair), starts, max_new_tokens=24, mode="greedy")]
    text = lambda ids: " ".join(f"t{i}" for i in ids)
    prompts = {"chat": [text(s) for s in starts],
               "edit": [text(s + c + s) for s, c in zip(starts, conts)]}
    return pair, prompts
