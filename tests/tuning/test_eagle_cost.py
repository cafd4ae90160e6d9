"""The EAGLE step terms of the cost model (#16 item 4): drafter levels, TP collectives, the spec-dec
verify, EAGLE-3's fc on the first level only, the framework's host time per step; the "cpu" preset
prices every step as before; and golden numbers of scripts/bench_published_setups.py, so that its
claims (what was fitted, which published rows land within ±20%) cannot drift silently."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
import sys
from pathlib import Path

import pytest

from trtspec.errors import TrtspecError
from trtspec.tuning import gpus
from trtspec.tuning.cost import (CostModel, Forward, ModelShape, forward_parts, forward_time, parts_seconds,
                                 prefill_time)
from trtspec.tuning.gpus import gpu_preset, with_framework

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_published_setups.py"


def drafter_level_time(gpu, d: ModelShape, batch: int, num_tokens: int, context: float, first: bool = True) -> float:
    """One EAGLE drafter level as cost.eagle_forwards prices it (`first`: the level with fc)."""
    return parts_seconds(gpu, forward_parts(gpu, d, Forward(d.role, batch, num_tokens, context, level=0 if first else 1)))


def verify_time(gpu, t: ModelShape, batch: int, num_nodes: int, context: float) -> float:
    """A speculative verify of root + num_nodes tokens as cost.eagle_forwards prices it."""
    return parts_seconds(gpu, forward_parts(gpu, t, Forward(t.role, batch, num_nodes + 1, context, verify=True)))


def bench():
    """scripts/bench_published_setups.py as a module (plain arithmetic; importing it puts scripts/ on
    sys.path for its rows, scripts/published_setups.py)."""
    if "bench_published_setups" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_published_setups", SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return sys.modules["bench_published_setups"]


def setups():
    """scripts/published_setups.py, the rows the bench script checks, as the bench script imported it."""
    bench()
    return sys.modules["published_setups"]


def llama8b(role="target", tp=1, **kw) -> ModelShape:
    return ModelShape(name="llama-3.1-8b", role=role, num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                      head_size=128, intermediate_size=14336, vocab_size=128256, weight_bytes=2.0, lm_head_bytes=2.0,
                      kv_bytes=2.0, compute_dtype="bf16", tp=tp, **kw)


def eagle3(tp=1) -> ModelShape:
    H = 4096
    return llama8b("eagle", tp, extra_linear_params=3 * H * H + H * 48 * 128, fc_params=3 * H * H,
                   fc_first_level_only=True).model_copy(update={"num_layers": 1, "vocab_size": 32000})


def eagle1(tp=1) -> ModelShape:
    return llama8b("eagle", tp, extra_linear_params=2 * 4096 * 4096, fc_params=2 * 4096 * 4096).model_copy(
        update={"num_layers": 1})


def test_drafter_cost_grows_with_levels_and_tokens():
    cm = CostModel(gpu=gpu_preset("h100"), target=llama8b(), draft=eagle3())
    steps = [cm.eagle_step(1, [1] + [4] * d, 8, 512) for d in range(0, 6)]
    drafts = [s.draft_s for s in steps]
    assert drafts == sorted(drafts) and len(set(drafts)) == len(drafts)
    assert all(s.target_s == steps[0].target_s for s in steps)  # same verify
    wide = cm.eagle_step(64, [1, 8, 8], 8, 512).draft_s
    assert wide > cm.eagle_step(64, [1, 1, 1], 8, 512).draft_s


def test_a_level_is_the_heads_forward_plus_its_logits_passes():
    g, d = gpu_preset("h100"), eagle1()
    bw = g.hbm_bandwidth_gbs * 1e9 * g.bandwidth_efficiency
    logits = g.logits_passes * 4 * 8 * d.vocab_size * 4.0
    assert drafter_level_time(g, d, 4, 8, 512) == pytest.approx(forward_time(g, d, 4, 8, 512) + logits / bw)
    assert g.eagle_level_overhead_s == pytest.approx((9 + 5 + 4) * 2.5e-6)  # the counted kernels
    # EAGLE-1/2 read the full-vocab lm_head every level; EAGLE-3 its 32k draft vocabulary
    assert drafter_level_time(g, eagle1(), 1, 4, 512) > drafter_level_time(g, eagle3(), 1, 4, 512, first=False)


def test_eagle3_fc_on_the_first_level_only():
    g, d = gpu_preset("h100"), eagle3()
    bw = g.hbm_bandwidth_gbs * 1e9 * g.bandwidth_efficiency
    first, later = drafter_level_time(g, d, 1, 1, 512), drafter_level_time(g, d, 1, 1, 512, first=False)
    assert first - later == pytest.approx(d.fc_params * d.weight_bytes / bw, rel=1e-6)
    e1 = eagle1()  # EAGLE-1/2 feed [embedding, feature] through fc at every level
    assert drafter_level_time(g, e1, 1, 1, 512) == drafter_level_time(g, e1, 1, 1, 512, first=False)


def test_tp_adds_the_collectives_and_sglang_reads_the_whole_fc():
    g = gpu_preset("h100")
    d1, d8 = eagle3(), eagle3(tp=8)
    assert drafter_level_time(g, d8, 1, 1, 512) - forward_time(g, d8, 1, 1, 512) == pytest.approx(
        drafter_level_time(g, d1, 1, 1, 512) - forward_time(g, d1, 1, 1, 512) + g.allreduce_latency_s)
    assert forward_time(g, d8, 1, 1, 512) - forward_time(g, d8.model_copy(update={"tp": 1}), 1, 1, 512) < 0
    sgl = with_framework(g, "sglang")
    bw = g.hbm_bandwidth_gbs * 1e9 * g.bandwidth_efficiency
    extra = d8.fc_params * d8.weight_bytes * (1 - 1 / 8) / bw
    base = drafter_level_time(sgl.model_copy(update={"eagle_fc_replicated": False}), d8, 1, 1, 512)
    assert drafter_level_time(sgl, d8, 1, 1, 512) == pytest.approx(base + extra)
    assert drafter_level_time(sgl, d1, 1, 1, 512) == drafter_level_time(
        sgl.model_copy(update={"eagle_fc_replicated": False}), d1, 1, 1, 512)  # nothing to replicate at tp 1


def test_a_verify_costs_more_than_a_plain_forward_of_as_many_tokens():
    g, t = gpu_preset("h200"), llama8b()
    for b, nodes in ((1, 7), (4, 3), (64, 63)):
        plain = forward_time(g, t, b, nodes + 1, 2048)
        assert verify_time(g, t, b, nodes, 2048) == pytest.approx(plain + 6 * g.kernel_latency_s)
        assert verify_time(g, t, b, nodes, 2048) > plain


def test_the_framework_changes_the_step_not_the_forward():
    g = gpu_preset("h100")
    trt, sgl = (CostModel(gpu=x, target=llama8b(), draft=eagle3()) for x in (g, with_framework(g, "sglang")))
    a, b = trt.eagle_step(1, [1, 8, 8, 8, 8], 63, 512), sgl.eagle_step(1, [1, 8, 8, 8, 8], 63, 512)
    assert a.overhead_s == 0 and b.overhead_s == pytest.approx(gpus.FITTED_SGLANG_STEP_OVERHEAD_S)
    assert a.target_s == b.target_s and b.draft_s > a.draft_s  # more selection kernels per level
    assert b.total_s == pytest.approx(b.draft_s + b.target_s + b.overhead_s)
    assert forward_time(g, llama8b(), 1, 1, 512) == forward_time(with_framework(g, "sglang"), llama8b(), 1, 1, 512)
    with pytest.raises(TrtspecError, match="unknown framework 'vllm'"):
        with_framework(g, "vllm")


def test_an_eagle3_chain_is_a_chain_tree():
    cm = CostModel(gpu=gpu_preset("h100"), target=llama8b(), draft=eagle3())
    assert cm.draft_target_step(4, 3, 1000) == cm.eagle_step(4, [1, 1, 1], 3, 1000)
    assert cm.draft_target_step(4, 0, 1000) == cm.baseline_step(4, 1000)


def test_the_cpu_preset_prices_every_step_as_before():
    """cpu: no kernel latency, verify kernels, logits passes or step overhead, fc every level: an
    EAGLE step is the sum of its forwards, exactly as before these terms existed."""
    g = gpu_preset("cpu")
    assert (g.kernel_latency_s, g.tree_verify_kernels, g.logits_passes, g.eagle_step_overhead_s) == (0, 0, 0, 0)
    t, d = llama8b(), eagle3()
    cm = CostModel(gpu=g, target=t, draft=d)
    st = cm.eagle_step(2, [1, 4, 4], 7, 300)
    assert st.draft_s == sum(forward_time(g, d, 2, n, 300) for n in (1, 4, 4))
    assert st.target_s == forward_time(g, t, 2, 8, 300) and st.overhead_s == 0
    chain = cm.draft_target_step(2, 3, 300)
    assert chain.total_s == pytest.approx(3 * forward_time(g, d, 2, 1, 300) + forward_time(g, t, 2, 4, 300))


def test_every_gpu_field_is_documented():
    for name, f in gpus.GpuSpec.model_fields.items():
        if name not in ("name",):
            assert f.description and len(f.description) > 20, name


# --- scripts/bench_published_setups.py: what was fitted and what it predicts ---------------------

def test_the_preset_is_the_fit_the_script_does():
    assert bench().fit_sglang_overhead() == pytest.approx(gpus.FITTED_SGLANG_STEP_OVERHEAD_S, rel=1e-3)
    assert with_framework(gpu_preset("h200"), "sglang").eagle_step_overhead_s == gpus.FITTED_SGLANG_STEP_OVERHEAD_S


GOLDEN = {  # (row, framework): predicted / reported, as printed by the script
    ("A1", "Llama-3.1-8B + EAGLE-3, SGLang 5/8/64"): 0.897,
    ("A1", "Llama-3.1-8B + EAGLE-2, SGLang 5/8/64"): 0.991,
    ("A2", "Llama-3.3-70B fp16 TP8 + EAGLE-3, SGLang 8/8/64"): 1.196,
    ("A6", "Llama-3.3-70B bf16 TP8 + EAGLE-3 chain 3, TRT-LLM 1-model"): 1.332,
    ("PR4247", "Llama-3.1-8B + EAGLE-3, SGLang 5/8/64"): 0.987,
    ("PR11398", "Llama-3.1-8B fp16 + EAGLE-2 chain 5, SGLang (Oct 2025)"): 0.832,
}


def test_published_rows_golden_ratios():
    b = bench()
    rows = {(s.row, s.what): s for s in b.CHECKS}
    assert set(GOLDEN) == set(rows)
    for key, ratio in GOLDEN.items():
        s = rows[key]
        assert b.predict(s) / s.reported == pytest.approx(ratio, abs=0.002), key
    fitted = [b.predict(s) / s.reported for s in b.SGLANG_FIT]
    assert fitted == pytest.approx([1.0, 1.0], abs=0.02)


def test_the_script_says_what_passes_and_what_misses(capsys):
    assert bench().main() == 0
    out = capsys.readouterr().out
    assert "held-out EAGLE rows within ±20%: 5 of 6" in out
    assert "A1 EAGLE-3 pass (0.897)" in out and "A2 EAGLE-3 pass (1.196)" in out
    assert "A6 EAGLE-3 chain 3 MISS (1.332)" in out
    # the other readings of A6's number are printed beside it: only 16k-token prompts would pass
    assert "decode alone 1.70x (ratio 1.35); with 16384-token prompts (needs chunked context) 1.46x (ratio 1.16)" in out
    assert "fitted: SGLang eagle_step_overhead_s 5.450 ms <- sglang PR 4247" in out
    # TensorRT-LLM PR 4802's TP8 baseline: 42% too fast in the model, as A2's (SGLang) is 34%; an all-reduce
    # latency fitted to it alone brings A2's held-out baseline to 1.02, and the TP8 EAGLE rows to 1.32 / 1.34
    assert "PR4802        H200 Llama-3.3-70B bf16 x8  model  1240.9  reported  876.00  ratio 1.42" in out
    assert "all-reduce latency refitted to PR4802's baseline: 26.8 us (derived 10 us; not adopted): A2's held-out " \
           "baseline then 1.02 of the reported (now 1.34)" in out
    assert "over-predict alike, A2 1.32, A6 1.34" in out
    assert "PR4802 (no AL stated): the model needs AL 1.42 (of at most 4) for the reported 1.32x" in out


def test_prefill_is_the_sum_of_its_chunks():
    """A chunked context phase: each chunk a forward attending to the chunks before it (causal
    attention priced the same either way), so chunking re-reads the weights and costs a little more;
    one chunk as large as the prompt is one forward."""
    g, t = gpu_preset("h200"), setups().A6_TARGET
    whole = prefill_time(g, t, 10000)
    assert whole == pytest.approx(forward_time(g, t, 1, 10000, 0))
    assert prefill_time(g, t, 10000, 10000) == pytest.approx(whole)
    chunked = prefill_time(g, t, 10000, 3072)
    expected = sum(forward_time(g, t, 1, n, done) for done, n in ((0, 3072), (3072, 3072), (6144, 3072), (9216, 784)))
    assert chunked == pytest.approx(expected)
    assert whole < chunked < 1.1 * whole
    with pytest.raises(ValueError, match="prompt_tokens"):
        prefill_time(g, t, 0)


def test_a_counted_context_phase_dilutes_the_speedup():
    """with_context: speculation shortens the decode only, so the speedup falls toward 1 as the
    prompt grows and equals AL x base / step when the prefill is negligible."""
    b = bench()
    a6 = next(s for s in b.CHECKS if s.row == "A6")
    gpu = b.row_gpu(a6.gpu, a6.framework)
    base, step = b.decode_time(gpu, a6.target, a6.batch, a6.context), b.step_time(a6, gpu)
    decode_only = a6.al * base / step
    speedups = [b.with_context(replace(a6, prompt_tokens=n), gpu, base, step)[0] for n in (1, 4096, 16384, 65536)]
    assert speedups[0] == pytest.approx(decode_only, rel=0.01)
    assert all(x > y for x, y in zip(speedups, speedups[1:]))
    assert 1.0 < speedups[-1] < decode_only


def test_an_eagle3_head_is_sharded_like_its_target():
    """The head runs inside the target's model with its mapping (TRT-LLM's one-model EAGLE-3; SGLang
    shards all but fc), so shape_from_eagle3 takes the target checkpoint's tp: a head priced at tp 1
    under a tp 2 target read every weight on each rank and never paid the tp-only terms."""
    from types import SimpleNamespace
    from trtspec.checkpoints.spec import DecoderSpec
    from trtspec.tuning.cost import shape_from_eagle3
    spec = DecoderSpec(architecture="LlamaForCausalLM", family="llama", num_layers=1, hidden_size=512, num_heads=8,
                       num_kv_heads=2, head_size=64, intermediate_size=1024, vocab_size=4000, hidden_act="silu",
                       norm_eps=1e-5, rope_theta=5e5, rope_scaling=None, max_position_embeddings=4096,
                       attn_bias=False, qk_norm=False, tie_word_embeddings=False)
    head = SimpleNamespace(spec=spec, draft_vocab=1000, aux_layers=(1, 5, 9))
    for tp in (1, 2):
        shape = shape_from_eagle3(head, {"dtype": "bfloat16", "mapping": {"tp_size": tp, "world_size": tp}}, "h", "h")
        assert shape.tp == tp and shape.weight_bytes == 2.0 and shape.fc_params == 3 * 512 * 512
