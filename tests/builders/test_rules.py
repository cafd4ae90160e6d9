"""Every combination TensorRT-LLM 1.2 rejects or silently degrades is refused before building,
with one line that says what is wrong and what to do instead."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import save_file

from tiny_models import make_eagle_head, make_hf_model, save_tiny_tokenizer
from trtspec.builders import BuildOptions, make_plan
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.pair import convert_pair
from trtspec.errors import TrtspecError

LIMITS = dict(max_batch_size=8, max_input_len=128, max_seq_len=256)


def edit_config(ckpt: Path, **changes) -> Path:
    path = ckpt / "config.json"
    cfg = json.loads(path.read_text())
    for key, value in changes.items():
        if key == "quantization":
            cfg["quantization"] = {"quant_algo": None, "kv_cache_quant_algo": None, **value}
            if "eagle_net_config" in cfg:
                cfg["eagle_net_config"]["quantization"] = dict(cfg["quantization"])
        else:
            cfg[key] = value
    path.write_text(json.dumps(cfg))
    return ckpt


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("rules")
    for fam in ("llama", "qwen3"):
        make_hf_model(fam, root / f"hf_{fam}")
        save_tiny_tokenizer(root / f"hf_{fam}")
    make_hf_model("llama", root / "hf_draft", seed=3, num_hidden_layers=1)
    save_tiny_tokenizer(root / "hf_draft")
    make_eagle_head(root / "hf_llama", root / "head")
    convert_hf(root / "hf_llama", root / "llama", dtype="bfloat16")
    convert_hf(root / "hf_qwen3", root / "qwen3", dtype="bfloat16")
    convert_eagle(root / "hf_llama", root / "head", root / "eagle", dtype="bfloat16")
    convert_pair(root / "hf_llama", root / "hf_draft", root / "pair", dtype="bfloat16")
    return root


@pytest.fixture
def copy(base, tmp_path):
    count = iter(range(1000))

    def _copy(name: str) -> Path:
        return Path(shutil.copytree(base / name, tmp_path / f"{name}{next(count)}"))
    return _copy


def refused(ckpt, match: str, **opts) -> str:
    with pytest.raises(TrtspecError, match=match) as e:
        make_plan(ckpt, BuildOptions(**{**LIMITS, **opts}))
    assert "\n" not in str(e.value)
    return str(e.value)


def test_int8_kv_with_eagle(copy):
    ckpt = edit_config(copy("eagle"), quantization={"quant_algo": "FP8", "kv_cache_quant_algo": "INT8"})
    msg = refused(ckpt, "INT8 KV cache disables paged context FMHA, which EAGLE engines need")
    assert "quantization.kv_cache_quant_algo" in msg and "FP8" in msg


def test_int8_kv_with_draft_target(copy):
    pair = copy("pair")
    edit_config(pair / "target", quantization={"kv_cache_quant_algo": "INT8"})
    refused(pair, "INT8 KV cache disables paged context FMHA, which draft-target engines need")
    edit_config(pair / "target", quantization={})
    edit_config(pair / "draft", quantization={"kv_cache_quant_algo": "INT8"})
    refused(pair, "draft/config.json: quantization.kv_cache_quant_algo is INT8")


def test_fp8_kv_without_fp8_weights_with_speculation(copy):
    ckpt = edit_config(copy("eagle"), quantization={"kv_cache_quant_algo": "FP8"})
    refused(ckpt, "FP8 KV cache with unquantized weights disables paged context FMHA.*use FP8 weights")


def test_smoothquant_with_eagle(copy):
    ckpt = edit_config(copy("eagle"), quantization={"quant_algo": "W8A8_SQ_PER_CHANNEL"})
    refused(ckpt, "SmoothQuant with EAGLE is broken upstream .*3207.*FP8")


def test_eagle_on_qwen3(base):
    refused(base / "qwen3", "EAGLE on Qwen3 cannot build.*draft-target pair", role="eagle")


def test_eagle3_config_and_tensor_markers(copy, tmp_path):
    ckpt = edit_config(copy("eagle"), eagle_net_config={"architecture": "LlamaForCausalLMEagle3",
                                                        "draft_vocab_size": 32000})
    refused(ckpt, "marks an EAGLE-3 head.*PyTorch backend")
    head = tmp_path / "eagle3_hf"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"],
                                                  "draft_vocab_size": 32000}))
    refused(head, "EAGLE-3 heads cannot go into TensorRT engines")
    ckpt2 = copy("llama")
    import torch
    save_file({"d2t": torch.zeros(4, dtype=torch.int64)}, str(ckpt2 / "rank0.safetensors"))
    refused(ckpt2, "tensor 'd2t' marks an EAGLE-3 head")


def test_beam_search_with_speculation(base):
    refused(base / "eagle", "build.max_beam_width: speculative decoding needs beam width 1, got 2", max_beam_width=2)
    refused(base / "pair", "build.max_beam_width: .*got 4", max_beam_width=4)
    assert make_plan(base / "llama", BuildOptions(max_beam_width=4, **LIMITS)).build().max_beam_width == 4


def test_context_logits_with_draft_length(base):
    refused(base / "pair", "build.gather_context_logits: not with a draft length.*build.draft_logits", gather_context_logits=True)
    refused(base / "eagle", "Gather context logits is not support", gather_context_logits=True)
    plain = make_plan(base / "llama", BuildOptions(gather_context_logits=True, **LIMITS)).argv()
    assert "--gather_context_logits" in plain


def test_pp_with_eagle(copy):
    ckpt = edit_config(copy("eagle"), mapping={"world_size": 2, "tp_size": 1, "pp_size": 2})
    refused(ckpt, "mapping.pp_size=2, but EAGLE engines need pp_size 1.*--tp")


def test_eagle_batch_limit(base):
    refused(base / "eagle", r"build.max_batch_size: EAGLE engines allow at most 512 \(builder.py asserts it\), got 513", max_batch_size=513)
    assert make_plan(base / "eagle", BuildOptions(max_batch_size=512, max_seq_len=256)).build().max_batch_size == 512


def test_eagle_draft_limit_and_mismatch(copy, base):
    refused(edit_config(copy("eagle"), max_draft_len=300), r"max_draft_len is 300; EAGLE engines need 1\.\.256")
    refused(base / "eagle", "build.max_draft_len: 10 differs from the checkpoint's max_draft_len 63", max_draft_len=10)


def test_eagle_draft_len_absent_or_null(copy):
    """EagleConfig defaults an absent max_draft_len to 63 (models/eagle/config.py); a null is no length."""
    ckpt = copy("eagle")
    cfg = json.loads((ckpt / "config.json").read_text())
    del cfg["max_draft_len"]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    plan = make_plan(ckpt, BuildOptions(**LIMITS))
    assert plan.build().max_draft_len == 63 and "--max_draft_len" in plan.argv()
    null = r"config.json: max_draft_len: expected an integer \(EagleConfig passes a null on"
    refused(edit_config(ckpt, max_draft_len=None), null)
    from trtspec.checkpoints.trtllm_ckpt import load_checkpoint  # what generate, profile and tune read through

    with pytest.raises(TrtspecError, match=null):
        load_checkpoint(ckpt)


def test_max_num_tokens_below_tokens_per_block_with_speculation(base):
    """check_max_num_tokens raises any max_num_tokens below tokens_per_block, speculative builds too."""
    refused(base / "pair", r"build.max_num_tokens: 16 is below tokens_per_block \(32\).*use at least 32",
            max_batch_size=1, max_num_tokens=16)
    plan = make_plan(base / "pair", BuildOptions(**{**LIMITS, "max_batch_size": 1, "max_num_tokens": 32}))
    assert {b.max_num_tokens for b in plan.builds} == {32}


def test_max_input_len_above_the_default_max_seq_len(base):
    """_init_max_seq_len clips max_input_len to max_seq_len, the default one too (256 positions here)."""
    refused(base / "llama", r"build.max_input_len: 1000 exceeds the default max_seq_len .* 256",
            max_seq_len=None, max_input_len=1000)


def test_max_num_tokens_bounds(base):
    refused(base / "eagle", r"build.max_num_tokens: 256 is below max_batch_size x \(max_draft_len \+ 1\) = 8 x \(63 \+ 1\) "
                            "= 512.*use at least 512", max_num_tokens=256)
    refused(base / "pair", r"below .* = 8 x \(8 \+ 1\) = 72", max_num_tokens=64)
    refused(base / "llama", "build.max_num_tokens: 4096 exceeds max_batch_size x max_seq_len = 2048.*clip",
            max_num_tokens=4096)
    refused(base / "llama", r"below tokens_per_block \(32\)", max_num_tokens=16)


def test_limits_and_flags(base):
    refused(base / "llama", "build.max_input_len: 512 exceeds build.max_seq_len 256", max_input_len=512)
    refused(base / "llama", "build.gpu: 'a100' is not one of h100, h200", gpu="a100")
    refused(base / "llama", "build.max_batch_size: expected a positive integer", max_batch_size=0)
    refused(base / "llama", "build.max_draft_len: applies to speculative builds", max_draft_len=4)
    refused(base / "llama", "build.draft_logits: applies to draft-target builds", draft_logits=True)
    refused(base / "eagle", "build.draft_logits: applies to draft-target engines; EAGLE accepts inside", draft_logits=True)
    refused(base / "llama", "build.role: 'medusa' is not one of", role="medusa")


def test_roles_that_do_not_fit_the_checkpoint(base):
    refused(base / "eagle", "builds only as build.role eagle", role="plain")
    refused(base / "eagle", "cannot be the target of a draft-target pair", role="target")
    refused(base / "llama", "build.role eagle needs an EagleForCausalLM checkpoint", role="eagle")
    refused(base / "pair", "pair directory .* cannot be built with build.role eagle", role="eagle")


def test_not_a_checkpoint(base, tmp_path):
    refused(base / "hf_llama", "Hugging Face model directory.*trtspec convert")
    refused(tmp_path / "nope", "checkpoint directory not found")


def test_modelopt_unified_hf_checkpoint(copy):
    """An HF directory with hf_quant_config.json is the PyTorch backend's format: route it there,
    not to `trtspec convert --hf`."""
    ckpt = copy("hf_llama")
    (ckpt / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    msg = refused(ckpt, "ModelOpt unified HF checkpoint .*--flavor llmapi")
    assert "trtspec convert" not in msg


def test_malformed_mapping_and_eagle_blocks_are_refused_by_field(copy):
    """A config.json whose mapping or eagle_net_config is not an object, or whose pp_size is not an
    integer, gets an error naming the field, not an AttributeError."""
    refused(edit_config(copy("eagle"), mapping=[1]), r"mapping: expected a JSON object, got a JSON list")
    refused(edit_config(copy("eagle"), mapping={"pp_size": "two"}), r"mapping.pp_size: expected")
    refused(edit_config(copy("eagle"), eagle_net_config="x"), r"without an 'eagle_net_config' object")


def test_quant_formats_outside_the_h100_set(copy):
    refused(edit_config(copy("llama"), quantization={"quant_algo": "NVFP4"}), "NVFP4, which needs a Blackwell GPU")
    refused(edit_config(copy("llama"), quantization={"quant_algo": "W4A8_QSERVE_PER_GROUP"}),
            "'W4A8_QSERVE_PER_GROUP'; H100 plans accept none or one of FP8")


def test_warnings_for_unverified_combinations(copy):
    ckpt = edit_config(copy("eagle"), quantization={"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"})
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["eagle_net_config"]["quantization"] = {"quant_algo": None, "kv_cache_quant_algo": "FP8"}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    plan = make_plan(ckpt, BuildOptions(**LIMITS))
    assert any("non-FP8 EAGLE head" in w for w in plan.warnings)
    assert not any("eagle_nets.N.lm_head" in w for w in plan.warnings)  # no explicit list: defaults apply
    edit_config(ckpt, quantization={"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]})
    plan = make_plan(ckpt, BuildOptions(**LIMITS))
    assert any("does not match eagle_nets.N.lm_head" in w for w in plan.warnings)
    awq = edit_config(copy("llama"), quantization={"quant_algo": "W4A16_AWQ", "kv_cache_quant_algo": "FP8"})
    plan = make_plan(awq, BuildOptions(**LIMITS))
    assert plan.build().plugins["use_paged_context_fmha"] == "disable"
    assert any("FP8 KV without FP8 weights" in n for n in plan.build().notes)
    plan = make_plan(awq, BuildOptions(max_seq_len=4096, max_input_len=128))
    assert any("exceeds the model's 256 positions" in w for w in plan.warnings)


def test_draft_target_outside_the_dtm_support_matrix_warns(copy):
    """The draft-target README supports FP16/BF16/FP8 draft and target: an INT8 SmoothQuant pair (no KV
    quantization, so it builds) is planned, with a warning per engine; FP8 and unquantized are not."""
    pair = copy("pair")
    for role in ("target", "draft"):
        edit_config(pair / role, quantization={"quant_algo": "W8A8_SQ_PER_CHANNEL", "exclude_modules": ["lm_head"]})
    plan = make_plan(pair, BuildOptions(**LIMITS))
    for role in ("target", "draft"):
        assert any(w.startswith(f"{role}: W8A8_SQ_PER_CHANNEL weights in a draft-target pair") for w in plan.warnings)
    edit_config(pair / "draft", quantization={"quant_algo": "W4A16_AWQ", "group_size": 128, "pre_quant_scale": True,
                                              "exclude_modules": ["lm_head"]})
    plan = make_plan(pair, BuildOptions(role="draft", **LIMITS))
    assert [w for w in plan.warnings if "support matrix" in w] == [
        "draft: W4A16_AWQ weights in a draft-target pair are outside the draft-target README's support matrix "
        "(FP16/BF16/FP8); validate acceptance on the GPU before serving"]
    for role in ("target", "draft"):
        edit_config(pair / role, quantization={"quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                                               "exclude_modules": ["lm_head"]})
    assert not any("support matrix" in w for w in make_plan(pair, BuildOptions(**LIMITS)).warnings)
    assert not any("support matrix" in w for w in make_plan(copy("pair"), BuildOptions(**LIMITS)).warnings)
