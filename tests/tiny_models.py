"""Tiny random HF models of every supported family, saved as ordinary HF directories."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def hf_config(family: str, **overrides):
    import transformers as tf

    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=1001, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=False)
    if family == "llama":
        common.update(rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32})
        cls, arch = tf.LlamaConfig, "LlamaForCausalLM"
    elif family == "mistral":
        common.update(sliding_window=None)
        cls, arch = tf.MistralConfig, "MistralForCausalLM"
    elif family == "qwen2":
        common.update(tie_word_embeddings=True)
        cls, arch = tf.Qwen2Config, "Qwen2ForCausalLM"
    elif family == "qwen3":
        common.update(head_dim=24)
        cls, arch = tf.Qwen3Config, "Qwen3ForCausalLM"
    else:
        raise ValueError(family)
    common.update(overrides)
    return cls(architectures=[arch], **common)


def make_hf_model(family: str, out: Path, seed: int = 0, dtype=torch.float32, **overrides):
    """Build and save a random model; returns the transformers model (eval, fp32)."""
    import transformers as tf

    torch.manual_seed(seed)
    cfg = hf_config(family, **overrides)
    model = tf.AutoModelForCausalLM.from_config(cfg).eval()
    # Random init gives nearly flat logits; scale up so greedy decoding is not decided by ties.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    model.to(dtype).save_pretrained(out, safe_serialization=True)
    return model


def hf_greedy(model, prompt: torch.Tensor, n: int) -> list[int]:
    """transformers' greedy continuation of `prompt` [1, T]: n tokens, never stopped early (the oracle
    the runtime's greedy tokens are compared with)."""
    model.generation_config.eos_token_id = None  # never stop early: compare all n tokens
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = model.generate(prompt, do_sample=False, max_new_tokens=n, attention_mask=torch.ones_like(prompt))
    return out[0, prompt.shape[1]:].tolist()


def make_eagle_head(base_dir: Path, out: Path, seed: int = 1, num_layers: int = 1, with_fc_bias: bool = True,
                    with_embed: bool = True, fmt: str = "safetensors", extra: dict | None = None) -> dict:
    """A random SafeAILab-style EAGLE-1 head for the HF model in `base_dir`: `embed_tokens`, `fc`
    (2H -> H), `layers.{j}` of a Llama decoder (no input_layernorm in layer 0), plus a config.json.
    Returns the tensors written."""
    import json

    from safetensors.torch import save_file

    base = json.loads((Path(base_dir) / "config.json").read_text())
    H, I, V = base["hidden_size"], base["intermediate_size"], base["vocab_size"]
    nh, nkv = base["num_attention_heads"], base.get("num_key_value_heads", base["num_attention_heads"])
    hd = base.get("head_dim") or H // nh
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=0.2):
        return (torch.randn(*shape, generator=g) * scale).contiguous()

    t = {"fc.weight": rnd(H, 2 * H)}
    if with_fc_bias:
        t["fc.bias"] = rnd(H)
    if with_embed:
        t["embed_tokens.weight"] = rnd(V, H, scale=1.0)
    for j in range(num_layers):
        p = f"layers.{j}."
        t[p + "self_attn.q_proj.weight"] = rnd(nh * hd, H)
        t[p + "self_attn.k_proj.weight"] = rnd(nkv * hd, H)
        t[p + "self_attn.v_proj.weight"] = rnd(nkv * hd, H)
        t[p + "self_attn.o_proj.weight"] = rnd(H, nh * hd)
        t[p + "mlp.gate_proj.weight"] = rnd(I, H)
        t[p + "mlp.up_proj.weight"] = rnd(I, H)
        t[p + "mlp.down_proj.weight"] = rnd(H, I)
        t[p + "post_attention_layernorm.weight"] = 1.0 + rnd(H, scale=0.05)
        if j > 0:
            t[p + "input_layernorm.weight"] = 1.0 + rnd(H, scale=0.05)
    t.update(extra or {})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {k: base[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                "num_key_value_heads", "vocab_size", "rms_norm_eps", "max_position_embeddings",
                                "rope_theta", "hidden_act") if k in base}
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=num_layers)
    (out / "config.json").write_text(json.dumps(cfg))
    if fmt == "safetensors":
        save_file(t, str(out / "model.safetensors"))
    else:
        torch.save(t, out / "pytorch_model.bin")
    return t


def save_tiny_tokenizer(out: Path, vocab_size: int = 1001, rename: dict[int, str] | None = None) -> None:
    """A word-level tokenizer over tokens 't0'..'t{V-1}' (ids 0..2 are <unk>, <s>, </s>), saved
    as an HF fast tokenizer in `out`. `rename` swaps the text of some ids (to make a mismatch)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"t{i}": i for i in range(3, vocab_size)})
    for i, text in (rename or {}).items():
        vocab = {k: v for k, v in vocab.items() if v != i}
        vocab[text] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(out))


def scale_layer_outputs(model, scale: float):
    """Layers that write only `scale` of their output into the residual stream: a near-bigram model
    (next token ~ argmax lm_head . embed(token)) that a bigram draft or EAGLE head predicts often
    but not always. scale 0 gives the pure bigram model itself."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(scale)
    return model


def modelopt_eagle3(target_dir: Path, out: Path, seed: int = 2, draft_vocab: int | None = None,
                    aux_ids: list[int] | None = None, shape=None):
    """An EAGLE-3 head for the HF model in `target_dir`, built by ModelOpt (`mtsp.convert` with its
    EAGLE-3 config, one layer), given random weights (input_layernorm kept at ModelOpt's ones, see
    upstream.modelopt on its training-forward quirk) and a random reduced vocabulary (`d2t`), then
    written by ModelOpt's `export_speculative_decoding` (RoPE injection off, so the export runs the
    RoPE ModelOpt's forward uses). shape(model): a last change to the head before the export
    (bigram_eagle3). Returns the converted ModelOpt model (the oracle)."""
    import copy

    import modelopt.torch.speculative as mtsp
    import transformers as tf
    from modelopt.torch.export import export_speculative_decoding
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG

    model = tf.AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    c = model.config
    cfg = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    cfg["eagle_export_rope_scaling"] = {}
    cfg["eagle_architecture_config"].update(
        num_hidden_layers=1, intermediate_size=c.intermediate_size, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.hidden_size // c.num_attention_heads,
        draft_vocab_size=draft_vocab or c.vocab_size, torch_dtype="float32", rms_norm_eps=1e-6,
        eagle_aux_hidden_state_layer_ids=list(aux_ids or []))
    mtsp.convert(model, [("eagle", cfg)])
    g = torch.Generator().manual_seed(seed)
    em = model.eagle_module
    with torch.no_grad():
        for name, p in em.named_parameters():
            if "input_layernorm" in name:
                continue
            if p.dim() == 1:
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (3.0 / p.shape[1] ** 0.5))
        if hasattr(em, "d2t"):
            ids = torch.randperm(c.vocab_size, generator=g)[:len(em.d2t)].sort().values
            em.d2t.copy_(ids - torch.arange(len(ids)))
    if shape is not None:
        shape(model)
    export_speculative_decoding(model, export_dir=out)
    return model


def near_bigram_target(out: Path, scale: float = 0.05, **overrides):
    """A random Llama whose layers write only `scale` of their output (scale_layer_outputs) and whose
    embedding rows all have one rms (so bigram_eagle3's fc can cancel its state exactly)."""
    model = scale_layer_outputs(make_hf_model("llama", out, **overrides), scale)
    with torch.no_grad():
        e = model.model.embed_tokens.weight
        e.mul_(0.1 / e.pow(2).mean(-1, keepdim=True).sqrt())
    model.save_pretrained(out, safe_serialization=True)
    return model


def bigram_eagle3(oracle, base, self_attention: float = 1.0, copy_scale: float = 20.0) -> None:
    """Overwrite the EAGLE-3 head of `oracle` (modelopt_eagle3, before export) so that it drafts the
    bigram continuation of its input token: attention (q = k = random projections of the token
    embedding, large enough that each position attends to its own token) copies the normed
    embedding into the residual stream, the MLP writes nothing, and norm + lm_head are the target's
    ln_f + lm_head rows of the draft vocabulary. Against a near-bigram target (scale_layer_outputs)
    it is accepted often but not always. Needs num_key_value_heads == num_attention_heads."""
    em, c = oracle.eagle_module, base.config
    H, nh = c.hidden_size, c.num_attention_heads
    hd = H // nh
    g = torch.Generator().manual_seed(5)
    a = em.layers[0].self_attn
    ids = torch.arange(c.vocab_size)[:em.lm_head.weight.shape[0]]
    if hasattr(em, "d2t"):
        ids = torch.arange(len(em.d2t)) + em.d2t
    with torch.no_grad():
        qk = torch.randn(nh * hd, H, generator=g) * self_attention
        for proj, w in ((a.q_proj, qk), (a.k_proj, qk), (a.v_proj, torch.eye(H))):
            proj.weight.zero_()
            proj.weight[:, :H] = w
        # v also reads -hidden_norm(state): the state (fc output, or the previous draft position's
        # output) has rms ~copy_scale, so copy_scale * its normed self cancels it and the stream
        # holds the input token's embedding alone
        a.v_proj.weight[:, H:] = -torch.eye(H)
        a.o_proj.weight.copy_(torch.eye(H) * copy_scale)
        em.layers[0].mlp.down_proj.weight.zero_()
        rms = base.model.embed_tokens.weight.pow(2).mean(-1).sqrt().mean()  # one value (near_bigram_target)
        em.fc.weight.zero_()
        em.fc.weight[:, :H] = torch.eye(H) * (copy_scale / rms)
        em.layers[0].hidden_norm.weight.fill_(1.0)
        em.norm.weight.copy_(base.model.norm.weight)
        em.lm_head.weight.copy_(base.lm_head.weight[ids])


def eagle3_dirs(d: Path, vocab: int = 48, draft_vocab: int = 40):
    """The EAGLE-3 test setup under `d`: `hf` (a near-bigram 8-layer target), `ckpt` (its TRT-LLM
    checkpoint), `head` (a random ModelOpt-built head) and `bigram_head` (one that drafts well).
    Returns the ModelOpt model of `head` (the oracle)."""
    from trtspec.checkpoints.convert import convert_hf

    base = near_bigram_target(d / "hf", num_hidden_layers=8, vocab_size=vocab, num_key_value_heads=4)
    oracle = modelopt_eagle3(d / "hf", d / "head", draft_vocab=draft_vocab)
    modelopt_eagle3(d / "hf", d / "bigram_head", seed=3, draft_vocab=draft_vocab, shape=lambda m: bigram_eagle3(m, base))
    convert_hf(d / "hf", d / "ckpt", dtype="float32")
    return oracle


def bigram_drafters(d: Path):
    """Under `d`: a near-bigram Llama target (`target`, scale 0.1), its pure bigram model as a draft
    checkpoint (`draft`) and an EAGLE-1 checkpoint (`eagle`, 4 levels) whose head drafts the bigram
    continuation (fc passes the token embedding, the layer adds nothing): drafters accepted often
    but not always. Returns the HF target model."""
    from trtspec.checkpoints.convert import convert_hf
    from trtspec.checkpoints.eagle import convert_eagle

    base = scale_layer_outputs(make_hf_model("llama", d / "hf"), 0.1)
    base.save_pretrained(d / "hf")
    scale_layer_outputs(copy.deepcopy(base), 0.0).save_pretrained(d / "bigram")
    H, I = base.config.hidden_size, base.config.intermediate_size
    head = {"embed_tokens.weight": base.model.embed_tokens.weight.detach().clone(),
            "fc.weight": torch.cat([torch.eye(H), torch.zeros(H, H)], 1),
            "fc.bias": torch.zeros(H), "layers.0.self_attn.o_proj.weight": torch.zeros(H, H),
            "layers.0.mlp.down_proj.weight": torch.zeros(H, I)}
    make_eagle_head(d / "hf", d / "head", extra=head)
    convert_hf(d / "hf", d / "target", dtype="float32")
    convert_hf(d / "bigram", d / "draft", dtype="float32")
    convert_eagle(d / "hf", d / "head", d / "eagle", dtype="float32", num_eagle_layers=4)
    return base


def llama_ckpt(d: Path, dtype: str = "float32") -> Path:
    """A tiny random Llama converted to a TRT-LLM checkpoint at d / 'ckpt' (its HF model at d / 'hf')."""
    from trtspec.checkpoints.convert import convert_hf

    make_hf_model("llama", d / "hf")
    return convert_hf(d / "hf", d / "ckpt", dtype=dtype)


def near_bigram_llama(out: Path, scale: float = 0.1) -> Path:
    """A random Llama (one KV head) whose layers write only `scale` of their output (scale_layer_outputs),
    with the tiny tokenizer, saved in `out`: the target the pipeline tests run recipes on."""
    model = make_hf_model("llama", out, num_key_value_heads=1)
    scale_layer_outputs(model, scale).save_pretrained(out)
    save_tiny_tokenizer(out)
    return out


def tiny_draft_target(root: Path, prompts: int = 20, chat_template: str | None = None,
                      low: int = 3) -> tuple[Path, Path]:
    """A near-bigram random Llama (a head can learn it quickly) with its tokenizer (and `chat_template`,
    if given) in root/target, and `prompts` seeded 6-word prompts of words t<low>.. in
    root/prompts.jsonl: the target the train-draft tests train heads for."""
    import json
    import random

    from transformers import AutoTokenizer

    target = root / "target"
    model = make_hf_model("llama", target)
    scale_layer_outputs(model, 0.3)
    model.save_pretrained(target)
    save_tiny_tokenizer(target)
    if chat_template is not None:
        tok = AutoTokenizer.from_pretrained(target)
        tok.chat_template = chat_template
        tok.save_pretrained(target)
    r = random.Random(0)
    path = root / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": " ".join(f"t{r.randrange(low, 1001)}" for _ in range(6))}) + "\n"
                            for _ in range(prompts)))
    return target, path

