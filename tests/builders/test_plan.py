"""Build plans, argument by argument against trtllm.md §7 (TensorRT-LLM 1.2 `trtllm-build`).

The five acceptance plans are written out as complete argument lists: any flag that appears,
disappears or changes value fails the test, so a change to a plan is always a deliberate one.
Quantized checkpoints are converted ones whose config.json `quantization` block is edited: the
plan depends only on config.json.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tiny_models import make_eagle_head, make_hf_model, save_tiny_tokenizer
from trtspec.builders import BuildOptions, build, make_plan
from trtspec.upstream import trtllm
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.pair import convert_pair

LIMITS = dict(max_batch_size=8, max_input_len=128, max_seq_len=256)

# Every flag trtllm-build 1.2 accepts that a plan may use (§7.1 core flags + PluginConfig flags).
KNOWN_FLAGS = {
    "--checkpoint_dir", "--output_dir", "--max_batch_size", "--max_input_len", "--max_seq_len", "--max_beam_width",
    "--max_num_tokens", "--kv_cache_type", "--input_timing_cache", "--output_timing_cache", "--workers",
    "--gather_context_logits", "--gather_generation_logits", "--speculative_decoding_mode", "--max_draft_len",
    "--gemm_plugin", "--gpt_attention_plugin", "--context_fmha", "--remove_input_padding", "--tokens_per_block",
    "--use_paged_context_fmha", "--use_fp8_context_fmha", "--use_fused_mlp",
}


def set_quant(ckpt: Path, **block) -> None:
    """Edit the quantization block of a converted checkpoint (and of its eagle_net_config)."""
    path = ckpt / "config.json"
    cfg = json.loads(path.read_text())
    cfg["quantization"] = {"quant_algo": None, "kv_cache_quant_algo": None, **block}
    if "eagle_net_config" in cfg:
        cfg["eagle_net_config"]["quantization"] = dict(cfg["quantization"])
    path.write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("build_ckpts")
    for fam in ("llama", "qwen2"):
        make_hf_model(fam, root / f"hf_{fam}")
        save_tiny_tokenizer(root / f"hf_{fam}")
    make_hf_model("llama", root / "hf_draft", seed=3, num_hidden_layers=1)
    save_tiny_tokenizer(root / "hf_draft")
    make_eagle_head(root / "hf_llama", root / "head")
    convert_hf(root / "hf_llama", root / "llama_bf16", dtype="bfloat16")
    convert_hf(root / "hf_llama", root / "llama_awq", dtype="float16")
    set_quant(root / "llama_awq", quant_algo="W4A16_AWQ", group_size=128, has_zero_point=False,
              pre_quant_scale=True, exclude_modules=["lm_head"])
    convert_hf(root / "hf_qwen2", root / "qwen2_sq", dtype="float16")
    set_quant(root / "qwen2_sq", quant_algo="W8A8_SQ_PER_CHANNEL", kv_cache_quant_algo="INT8",
              exclude_modules=["lm_head"])
    convert_eagle(root / "hf_llama", root / "head", root / "eagle_fp8", dtype="bfloat16")
    set_quant(root / "eagle_fp8", quant_algo="FP8", kv_cache_quant_algo="FP8",
              exclude_modules=["lm_head", "*lm_head", "eagle_nets.*.lm_head"])
    convert_pair(root / "hf_llama", root / "hf_draft", root / "pair_fp8", dtype="bfloat16")
    for role in ("target", "draft"):
        set_quant(root / "pair_fp8" / role, quant_algo="FP8", kv_cache_quant_algo="FP8", exclude_modules=["lm_head"])
    return root


def common(ckpt: Path, engine: str, paged: str, fp8_ctx: str, fused: str) -> list[str]:
    """The flags every plan passes, in plan order (§7.1)."""
    return ["trtllm-build", "--checkpoint_dir", str(ckpt), "--output_dir", f"engines/{engine}",
            "--gemm_plugin", "auto",              # model dtype for non-FP8 GEMMs; FP8 GEMMs stay on TRT kernels
            "--gpt_attention_plugin", "auto",     # needed for paged KV and speculative decoding
            "--context_fmha", "enable",
            "--remove_input_padding", "enable",
            "--use_paged_context_fmha", paged,    # default drifted off -> on (§9.15)
            "--use_fp8_context_fmha", fp8_ctx,    # default drifted off -> on (§9.15)
            "--use_fused_mlp", fused,             # forced off unless quant_algo in {None, FP8} (§7.1)
            "--tokens_per_block", "32",           # default drifted 64 -> 32 (§9.15)
            "--kv_cache_type", "paged"]


def limits(batch, inp, seq, tokens) -> list[str]:
    return ["--max_batch_size", str(batch), "--max_input_len", str(inp), "--max_seq_len", str(seq),
            "--max_num_tokens", str(tokens), "--max_beam_width", "1"]


TAIL = ["--input_timing_cache", "timing.cache", "--output_timing_cache", "timing.cache",  # not ./model.cache (§9.14)
        "--workers", "1"]


def check_flags(argv: list[str]) -> None:
    flags = [a for a in argv if a.startswith("--")]
    assert len(flags) == len(set(flags)), "a flag appears twice"
    assert set(flags) <= KNOWN_FLAGS, set(flags) - KNOWN_FLAGS


def test_bf16_llama_plain(ckpts):
    plan = make_plan(ckpts / "llama_bf16", BuildOptions(**LIMITS))
    assert plan.role == "plain" and [b.name for b in plan.builds] == ["plain"]
    b = plan.build()
    expected = (common(ckpts / "llama_bf16", "plain", paged="enable", fp8_ctx="disable", fused="enable")
                # max_num_tokens: 8192 clipped to batch x seq = 2048 as _init_max_seq_len would (§7.1)
                + limits(8, 128, 256, 2048) + TAIL)
    assert plan.argv() == expected
    check_flags(plan.argv())
    assert b.speculative_decoding_mode is None and b.engine_max_seq_len == 256
    assert plan.warnings == []


def test_fp8_fp8kv_llama_eagle(ckpts):
    plan = make_plan(ckpts / "eagle_fp8", BuildOptions(**LIMITS))
    assert plan.role == "eagle"
    b = plan.build()
    expected = (common(ckpts / "eagle_fp8", "eagle", paged="enable",  # EAGLE needs it (§4.5)
                       fp8_ctx="enable",                              # FP8 weights + FP8 KV + paged (§7.2)
                       fused="enable")
                + limits(8, 128, 256, 2048)
                + ["--speculative_decoding_mode", "eagle",
                   "--max_draft_len", "63"]                           # from the checkpoint (§4.5)
                + TAIL)
    assert plan.argv() == expected
    check_flags(plan.argv())
    assert b.num_eagle_layers == 4
    assert b.engine_max_seq_len == 256 + 63 + 4  # builder adds max_draft_len and num_eagle_layers (§4.5)
    assert "--gather_generation_logits" not in plan.argv()
    assert plan.warnings == []


def test_fp8_target_fp8_draft_pair(ckpts):
    plan = make_plan(ckpts / "pair_fp8", BuildOptions(max_draft_len=4, **LIMITS))
    assert plan.role == "pair"
    assert [b.name for b in plan.builds] == ["draft", "target"]
    draft = (common(ckpts / "pair_fp8" / "draft", "draft", paged="enable",  # KV reuse for DTM (§5.1)
                    fp8_ctx="enable", fused="enable")
             + limits(8, 128, 256 + 4, 2048)  # drafts up to K tokens past the target's longest sequence
             + TAIL)
    target = (common(ckpts / "pair_fp8" / "target", "target", paged="enable", fp8_ctx="enable", fused="enable")
              + limits(8, 128, 256, 2048)
              + ["--speculative_decoding_mode", "draft_tokens_external", "--max_draft_len", "4"]  # §5.1
              + TAIL)
    assert plan.argv("draft") == draft
    assert plan.argv("target") == target
    for b in plan.builds:
        check_flags(b.argv())
        assert b.engine_max_seq_len == 260  # consistent: the target engine gets 256 + K from the builder
    t = plan.build("target")
    assert t.max_num_tokens >= t.max_batch_size * (t.max_draft_len + 1)


def test_int8_sq_qwen2_plain(ckpts):
    plan = make_plan(ckpts / "qwen2_sq", BuildOptions(**LIMITS))
    expected = (common(ckpts / "qwen2_sq", "plain",
                       paged="disable",    # INT8 KV turns paged context FMHA off in build() (§7.2)
                       fp8_ctx="disable",  # not an FP8 weight format
                       fused="disable")    # W8A8_SQ_PER_CHANNEL: fuse_gate_mlp leaves it unfused anyway
                + limits(8, 128, 256, 2048) + TAIL)
    assert plan.argv() == expected
    check_flags(plan.argv())
    assert any("INT8 KV cache disables paged context FMHA" in w for w in plan.warnings)


def test_w4a16_awq_llama_plain(ckpts):
    plan = make_plan(ckpts / "llama_awq", BuildOptions(**LIMITS))
    expected = (common(ckpts / "llama_awq", "plain", paged="enable", fp8_ctx="disable", fused="disable")
                + limits(8, 128, 256, 2048) + TAIL)
    assert plan.argv() == expected  # the groupwise weight-only plugin is enabled by build() itself (§7.1)
    check_flags(plan.argv())


def test_defaults_and_generation_logits(ckpts):
    """No limits given: batch 64, seq min(8192, positions), input seq/2; logits only when asked."""
    plan = make_plan(ckpts / "pair_fp8", BuildOptions())
    t = plan.build("target")
    assert (t.max_batch_size, t.max_seq_len, t.max_input_len) == (64, 256, 128)
    assert t.max_draft_len == trtllm.DTM_DEFAULT_MAX_DRAFT_LEN
    assert all("--gather_generation_logits" not in b.argv() for b in plan.builds)
    plan = make_plan(ckpts / "pair_fp8", BuildOptions(draft_logits=True, **LIMITS))
    assert all("--gather_generation_logits" in b.argv() for b in plan.builds)  # both engines (§5.1)


def test_max_num_tokens_raised_for_speculation(ckpts):
    """max_num_tokens >= max_batch_size x (max_draft_len + 1), as build() would make it (§4.5)."""
    plan = make_plan(ckpts / "eagle_fp8", BuildOptions(max_batch_size=256, max_seq_len=256, max_input_len=128))
    b = plan.build()
    assert b.max_num_tokens == 256 * 64 and b.argv()[b.argv().index("--max_num_tokens") + 1] == "16384"


def test_role_selection(ckpts):
    assert make_plan(ckpts / "pair_fp8", BuildOptions(role="target", **LIMITS)).argv()[2] == str(
        ckpts / "pair_fp8" / "target")
    draft = make_plan(ckpts / "pair_fp8", BuildOptions(role="draft", **LIMITS)).build()
    assert draft.name == "draft" and draft.speculative_decoding_mode is None
    assert draft.plugins["use_paged_context_fmha"] == "enable"
    assert draft.max_seq_len == 256 + trtllm.DTM_DEFAULT_MAX_DRAFT_LEN  # same limits as a separately built target
    target = make_plan(ckpts / "llama_bf16", BuildOptions(role="target", max_draft_len=6, **LIMITS)).build()
    assert target.argv()[-10:-6] == ["--speculative_decoding_mode", "draft_tokens_external", "--max_draft_len", "6"]


def test_fp8_without_fp8_kv_keeps_fp8_context_fmha_off(ckpts, tmp_path):
    convert_hf(ckpts / "hf_llama", tmp_path / "fp8", dtype="bfloat16")
    set_quant(tmp_path / "fp8", quant_algo="FP8", exclude_modules=["lm_head"])
    b = make_plan(tmp_path / "fp8", BuildOptions(**LIMITS)).build()
    assert b.plugins["use_paged_context_fmha"] == "enable"
    assert b.plugins["use_fp8_context_fmha"] == "disable"  # build() would turn it off (§7.2)


def test_dry_run_writes_plan_and_script(ckpts, tmp_path):
    plan = make_plan(ckpts / "pair_fp8", BuildOptions(max_draft_len=4, **LIMITS))
    result = build(plan, tmp_path / "out", dry_run=True)
    assert not result.built and "H100 host with TensorRT-LLM 1.2.x" in result.message
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["build.sh", "build_plan.json"]
    data = json.loads((out / "build_plan.json").read_text())
    assert data["role"] == "pair" and data["trtllm_version"] == "1.2.x"
    assert [b["argv"] for b in data["builds"]] == [plan.argv("draft"), plan.argv("target")]
    assert data["memory"]["kv_token_capacity"] == plan.memory.kv_token_capacity
    script = (out / "build.sh").read_text()
    assert os.stat(out / "build.sh").st_mode & stat.S_IXUSR
    assert script.index("1.2.") < script.index("trtllm-build \\")  # version check before any build
    assert 'cd "$(dirname "$0")"' in script and "mkdir -p engines/draft" in script
    assert script.index("engines/draft") < script.index("engines/target")
