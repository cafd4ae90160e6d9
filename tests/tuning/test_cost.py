"""Step-time model: a hand calculation for Llama-3.1-8B FP8 on H100, monotonicity, quantization
bytes, checkpoint sizes, fitting known parameters back from synthetic measurements, and timing
the local runtime into a cost table."""

from __future__ import annotations

import json
import random

import pytest
import torch

from tiny_models import make_eagle_head, make_hf_model
from trtspec.checkpoints.spec import spec_from_trtllm
from trtspec.errors import TrtspecError
from trtspec.tuning.cost import (CostModel, ModelShape, forward_terms, forward_time, shape_from_spec,
                                 shapes_from_checkpoint)
from trtspec.tuning.gpus import gpu_preset
from trtspec.tuning.quant_bytes import quant_bytes
from trtspec.tuning.fit import CostRow, CostTable, fit_gpu, load_cost_table, save_cost_table

LLAMA_31_8B = {"architecture": "LlamaForCausalLM", "dtype": "bfloat16", "vocab_size": 128256, "hidden_size": 4096,
               "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_size": 128,
               "intermediate_size": 14336, "max_position_embeddings": 131072, "rotary_base": 500000.0}
FP8 = {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}
LLAMA_32_1B = {**LLAMA_31_8B, "hidden_size": 2048, "num_hidden_layers": 16, "head_size": 64,
               "intermediate_size": 8192}


def shape(cfg=LLAMA_31_8B, quant=FP8, role="target", tp=1) -> ModelShape:
    config = {**cfg, "quantization": quant, "mapping": {"tp_size": tp}}
    return shape_from_spec(spec_from_trtllm(config, "cfg"), config, role, "m", "cfg")


def test_hand_calculation_llama31_8b_fp8_h100_batch1():
    """32 layers x (qkv 4096x6144 + o 4096x4096 + mlp 3x4096x14336) = 6.98e9 weights at 1 byte (FP8),
    lm_head 128256 x 4096 at 2 bytes (bf16, excluded) = 1.05e9 bytes: 8.03 GB per step. At 80% of
    3.35 TB/s that is 3.00 ms, plus 0.3 ms fixed overhead: about 3.3 ms (~300 tok/s at batch 1)."""
    m = shape()
    assert m.linear_params == 6_979_321_856 and m.lm_head_params == 525_336_576
    assert (m.weight_bytes, m.lm_head_bytes, m.kv_bytes, m.compute_dtype) == (1.0, 2.0, 1.0, "fp8")
    hand = 8.03e9 / (3.35e12 * 0.8) + 0.3e-3
    got = forward_time(gpu_preset("h100"), m, batch=1, num_tokens=1, context=1024)
    assert got == pytest.approx(hand, rel=0.10)
    assert got == pytest.approx(3.32e-3, rel=0.01)  # golden value of the defaults


def test_bf16_batch1_matches_anchor_a1():
    """landscape.md §4.1 A1: SGLang, Llama-3.1-8B-Instruct bf16 on one H100, 158.34 tok/s without
    speculation (6.32 ms per token). The defaults were chosen to land within 10% of it."""
    bf16 = shape(quant={"quant_algo": None, "kv_cache_quant_algo": None})
    tok_s = 1 / forward_time(gpu_preset("h100"), bf16, batch=1, num_tokens=1, context=1024)
    assert tok_s == pytest.approx(158.34, rel=0.10)


def test_monotone_in_batch_tokens_context_and_hardware():
    g, m = gpu_preset("h100"), shape()
    t = lambda **kw: forward_time(g, m, **{"batch": 1, "num_tokens": 1, "context": 1024, **kw})  # noqa: E731
    for key, values in (("batch", [1, 2, 8, 32, 128, 512]), ("num_tokens", [1, 2, 8, 32, 128]),
                        ("context", [0, 512, 4096, 32768])):
        times = [t(**{key: v}) for v in values]
        assert times == sorted(times), key
    # memory-bound at batch 1: verifying 8 tokens costs about the same as 1; compute-bound at 4096 tokens
    assert t(num_tokens=8) < 1.01 * t(num_tokens=1)
    assert t(batch=64, num_tokens=64) / t(batch=64, num_tokens=32) > 1.8
    assert forward_time(gpu_preset("h200"), m, 1, 1, 1024) < t()  # more bandwidth
    bf16 = shape(quant={"quant_algo": None, "kv_cache_quant_algo": None})
    assert forward_time(g, bf16, 1, 1, 1024) > 1.7 * t()  # twice the weight bytes (lm_head and overhead equal)
    assert forward_time(g, bf16, 64, 64, 1024) > 1.8 * t(batch=64, num_tokens=64)  # half the FP8 peak
    tp2 = shape(tp=2)  # half the bytes per GPU, plus 2 all-reduces per layer
    assert forward_time(g, tp2, 1, 1, 1024) == pytest.approx(
        g.forward_overhead_s + (t() - g.forward_overhead_s) / 2 + 2 * 32 * g.allreduce_latency_s)


@pytest.mark.parametrize("quant, weight, lm_head, kv, compute", [
    ({}, 2.0, 2.0, 2.0, "bf16"),
    ({"quant_algo": "FP8"}, 1.0, 2.0, 2.0, "fp8"),
    ({"quant_algo": "FP8", "exclude_modules": ["*router"]}, 1.0, 1.0, 2.0, "fp8"),  # explicit list w/o lm_head
    ({"quant_algo": "W8A8_SQ_PER_CHANNEL", "kv_cache_quant_algo": "INT8"}, 1.0, 2.0, 1.0, "int8"),
    ({"quant_algo": "W8A16"}, 1.0, 2.0, 2.0, "bf16"),
    ({"quant_algo": "W4A16_AWQ", "group_size": 128}, 0.5 + 2 / 128, 2.0, 2.0, "bf16"),
    ({"quant_algo": "W4A16"}, 0.5, 2.0, 2.0, "bf16"),  # per-channel scales: no groups
    ({"quant_algo": "W4A16_GPTQ", "group_size": 64, "has_zero_point": True}, 0.5 + 2 * 2 / 64, 2.0, 2.0, "bf16"),
    ({"quant_algo": "W8A16_GPTQ", "group_size": 128}, 1 + 2 / 128, 2.0, 2.0, "bf16"),
    ({"quant_algo": "W4A8_AWQ", "kv_cache_quant_algo": "FP8"}, 0.5 + 2 / 128, 2.0, 1.0, "fp8"),
])
def test_quantization_bytes(quant, weight, lm_head, kv, compute):
    q = quant_bytes(quant, "bfloat16", "lm_head", "cfg")
    assert (q["weight_bytes"], q["lm_head_bytes"], q["kv_bytes"], q["compute_dtype"]) == (weight, lm_head, kv, compute)


def test_unsupported_quantization_is_a_clear_error():
    with pytest.raises(TrtspecError, match="cfg: quantization.quant_algo 'NVFP4'"):
        quant_bytes({"quant_algo": "NVFP4"}, "float16", "lm_head", "cfg")
    with pytest.raises(TrtspecError, match="kv_cache_quant_algo"):
        quant_bytes({"kv_cache_quant_algo": "NVFP4"}, "float16", "lm_head", "cfg")


def test_shapes_from_checkpoints(tmp_path):
    from trtspec.checkpoints.convert import convert_hf
    from trtspec.checkpoints.eagle import convert_eagle

    make_hf_model("llama", tmp_path / "hf")
    make_eagle_head(tmp_path / "hf", tmp_path / "head")
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float16", tp=2)
    convert_eagle(tmp_path / "hf", tmp_path / "head", tmp_path / "eagle", dtype="bfloat16")
    t = shapes_from_checkpoint(tmp_path / "ckpt")["target"]
    assert (t.num_layers, t.hidden_size, t.vocab_size, t.tp) == (2, 64, 1001, 2)
    assert (t.weight_bytes, t.compute_dtype) == (2.0, "fp16")
    s = shapes_from_checkpoint(tmp_path / "eagle")
    assert s["eagle"].role == "eagle" and s["eagle"].num_layers == 1 and s["eagle"].extra_linear_params == 2 * 64 * 64
    assert s["target"].compute_dtype == "bf16"


def synthetic_table(gpu, shapes, noise=0.0, seed=0) -> CostTable:
    rng = random.Random(seed)
    rows = []
    for role, m in shapes.items():
        for b in (1, 8, 64, 256):
            for n in (1, 4, 16, 64):
                for c in (256, 4096):
                    s = forward_time(gpu, m, b, n, c) * (1 + noise * rng.uniform(-1, 1))
                    rows.append(CostRow(role=role, batch=b, num_tokens=n, context=c, seconds=s))
    return CostTable(gpu="h100", rows=rows)


def shapes3():
    e = shape(LLAMA_31_8B, {"quant_algo": None}, role="eagle").model_copy(
        update={"num_layers": 1, "extra_linear_params": 2 * 4096 * 4096})
    return {"target": shape(), "draft": shape(LLAMA_32_1B, role="draft"), "eagle": e}


TRUE = dict(bandwidth_efficiency=0.72, compute_efficiency=0.55, forward_overhead_s=4.2e-4, eagle_level_overhead_s=6e-5)


def test_fit_recovers_known_parameters():
    truth = gpu_preset("h100").model_copy(update=TRUE)
    table = synthetic_table(truth, shapes3())
    fitted, report = fit_gpu(table, shapes3())  # starts from the preset's defaults
    for k, v in TRUE.items():
        assert getattr(fitted, k) == pytest.approx(v, rel=1e-6), k
    assert report.rms_relative_error < 1e-9 and sorted(report.fitted) == sorted(TRUE)
    assert report.forwards == report.num_rows and 0 < report.memory_bound_forwards < report.forwards  # a row: a forward


def test_fit_with_noise_and_roundtrip(tmp_path):
    truth = gpu_preset("h100").model_copy(update=TRUE)
    save_cost_table(synthetic_table(truth, shapes3(), noise=0.03, seed=1), tmp_path / "t.json")
    fitted, report = fit_gpu(load_cost_table(tmp_path / "t.json"), shapes3())
    for k, v in TRUE.items():
        assert getattr(fitted, k) == pytest.approx(v, rel=0.08), k
    assert report.rms_relative_error < 0.03 and report.max_relative_error < 0.06


def test_fit_keeps_what_no_row_informs():
    truth = gpu_preset("h100").model_copy(update=TRUE)
    rows = [r for r in synthetic_table(truth, {"target": shape()}).rows if r.batch == 1]  # all memory-bound
    fitted, report = fit_gpu(CostTable(gpu="h100", rows=rows), {"target": shape()})
    assert "compute_efficiency" in report.kept and "eagle_level_overhead_s" in report.kept
    assert fitted.compute_efficiency == gpu_preset("h100").compute_efficiency
    assert fitted.bandwidth_efficiency == pytest.approx(0.72, rel=1e-6)


def test_cost_table_errors(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schema": "trtspec.cost-table/1", "rows": [
        {"role": "verifier", "batch": 1, "num_tokens": 1, "context": 0, "seconds": 0.1}]}))
    with pytest.raises(TrtspecError, match=r"t.json: field 'rows.0.role'"):
        load_cost_table(p)
    table = CostTable(rows=[CostRow(role="draft", batch=1, num_tokens=1, context=0, seconds=0.1)])
    with pytest.raises(TrtspecError, match="no draft checkpoint"):
        fit_gpu(table, {"target": shape()})


def test_step_times_compose():
    cm = CostModel(gpu=gpu_preset("h100"), target=shape(), draft=shape(LLAMA_32_1B, role="draft"))
    base = cm.baseline_step(4, 1000)
    k4 = cm.draft_target_step(4, 4, 1000)
    assert base.draft_s == 0 and cm.draft_target_step(4, 0, 1000) == base
    assert k4.draft_s == pytest.approx(4 * forward_time(cm.gpu, cm.draft, 4, 1, 1000))
    assert k4.target_s == pytest.approx(forward_time(cm.gpu, cm.target, 4, 5, 1000))
    with pytest.raises(TrtspecError, match="eagle network"):
        cm.eagle_step(1, [1, 2], 4, 100)


def test_measure_runtime_then_fit(tmp_path):
    from trtspec.checkpoints.convert import convert_hf
    from trtspec.tuning.measure import MeasureConfig, measure_runtime

    make_hf_model("llama", tmp_path / "hf")
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float32")
    n = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        table = measure_runtime(tmp_path / "ckpt", tmp_path / "ckpt",
                                MeasureConfig(batches=[1, 2], num_tokens=[1, 4], context=8, repeats=1, warmup=0))
    finally:
        torch.set_num_threads(n)
    assert len(table.rows) == 8 and table.roles() == {"target", "draft"} and table.gpu == "cpu"
    assert all(r.seconds > 0 for r in table.rows)
    shapes = {"target": shapes_from_checkpoint(tmp_path / "ckpt")["target"],
              "draft": shapes_from_checkpoint(tmp_path / "ckpt", "draft")["draft"]}
    gpu, report = fit_gpu(table, shapes)
    assert report.num_rows == 8 and report.rms_relative_error < 10


def test_additive_mode_sums_memory_and_compute_and_fits():
    """The cpu preset adds memory and compute time (a CPU forward slows with every extra token);
    a GPU overlaps them. The two modes differ, and a fit in additive mode recovers its truth."""
    m = shape()
    gpu = gpu_preset("h100")
    added = gpu.model_copy(update={"memory_compute_overlap": False})
    for b, n in ((1, 1), (64, 16), (256, 64)):
        overlap, summed = forward_time(gpu, m, b, n, 1024), forward_time(added, m, b, n, 1024)
        assert summed > overlap
    truth = added.model_copy(update=TRUE)
    fitted, report = fit_gpu(synthetic_table(truth, shapes3()), shapes3(), base=added)
    for k, v in TRUE.items():
        assert getattr(fitted, k) == pytest.approx(v, rel=1e-4), k
    assert report.rms_relative_error < 1e-6
    assert gpu_preset("cpu").memory_compute_overlap is False


def mistral_7b_v01(tmp_path) -> ModelShape:
    """Mistral-7B-v0.1's shape as transformers' MistralConfig defaults describe it (its 4096 window
    included), read the way trtspec reads an HF checkpoint."""
    import transformers as tf

    from trtspec.checkpoints.spec import spec_from_hf

    tf.MistralConfig(architectures=["MistralForCausalLM"]).to_json_file(tmp_path / "config.json")
    return shape_from_spec(spec_from_hf(tmp_path), {"dtype": "bfloat16"}, "target", "mistral", "cfg")


def test_a_sliding_window_caps_the_attention_cost(tmp_path):
    """Each query reads at most W cached positions: below W the window changes nothing, past it the
    step time stays flat while full attention keeps growing with the context."""
    g, windowed = gpu_preset("h100"), mistral_7b_v01(tmp_path)
    assert windowed.attention_window == 4096
    full = windowed.model_copy(update={"attention_window": None})
    t = lambda m, ctx: forward_time(g, m, batch=64, num_tokens=5, context=ctx)  # noqa: E731
    for ctx in (0, 1024, 4095, 4096):
        assert t(windowed, ctx) == t(full, ctx)
    past = [8192, 16384, 32768]
    assert [t(windowed, c) for c in past] == [t(windowed, 4096)] * 3
    assert t(full, 4096) < t(full, 8192) < t(full, 16384) < t(full, 32768)
    step = lambda m, ctx: CostModel(gpu=g, target=m, draft=m.model_copy(update={"role": "draft"})  # noqa: E731
                                    ).draft_target_step(64, 4, ctx).total_s
    assert step(windowed, 32768) == step(windowed, 4096) < step(full, 32768)


def test_the_window_reaches_the_shape_from_a_converted_checkpoint(tmp_path):
    from trtspec.checkpoints.convert import convert_hf

    make_hf_model("mistral", tmp_path / "hf", sliding_window=6)
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float16")
    assert shapes_from_checkpoint(tmp_path / "ckpt")["target"].attention_window == 6
    make_hf_model("llama", tmp_path / "llama")
    convert_hf(tmp_path / "llama", tmp_path / "llama_ckpt", dtype="float16")
    assert shapes_from_checkpoint(tmp_path / "llama_ckpt")["target"].attention_window is None


def test_a_table_timed_on_one_device_fits_a_tp_deployment():
    """measure-cost times the whole network on one device (TP ranks merged): the fit sizes those rows
    at the table's tp (1), so a tp=2 deployment is priced as two ranks, not as the single GPU it was
    timed on (sized at tp=2, the rows halved the efficiencies and the prediction was 1.4-1.7x slow)."""
    truth = gpu_preset("h100").model_copy(update=TRUE)
    table = synthetic_table(truth, {"target": shape()})
    assert table.tp == 1
    fitted, _ = fit_gpu(table, {"target": shape(tp=2)})
    assert fitted.bandwidth_efficiency == pytest.approx(TRUE["bandwidth_efficiency"], rel=1e-6)
    for b, n in ((1, 1), (64, 8)):
        assert forward_time(fitted, shape(tp=2), b, n, 600) == pytest.approx(
            forward_time(truth, shape(tp=2), b, n, 600), rel=1e-6)


@pytest.mark.parametrize("rows", [1, 5])
def test_a_table_of_one_shape_is_refused_naming_the_field(rows):
    """One row (or one shape timed again and again) cannot tell the overhead from the bandwidth:
    least squares' minimum-norm answer was a 1e5 bandwidth efficiency, reported as fitted."""
    row = CostRow(role="target", batch=1, num_tokens=1, context=32, seconds=4e-3)
    with pytest.raises(TrtspecError, match=rf"^cost table: field 'rows': {rows} rows determine only 1 of "
                                           r"forward_overhead_s, bandwidth_efficiency"):
        fit_gpu(CostTable(gpu="h100", rows=[row] * rows), {"target": shape()})


def test_kv_heads_fewer_than_ranks_are_replicated_not_split():
    """Upstream sizes a rank's KV heads as ceil(num_kv_heads / tp) (engine Attention and the PyTorch
    KVCacheManager): 4 KV heads over 8 ranks leave each rank a copy of one, so the KV bytes a rank
    reads per cached token stay at one head's from tp=4 on, and each rank holds that head's k/v
    projection besides its 1/8 share of the weights. Query heads split evenly: attention FLOPs /tp."""
    gqa4 = {**LLAMA_31_8B, "num_key_value_heads": 4}
    kv_bytes = lambda tp: 32 * 2 * -(-4 // tp) * 128 * 1.0  # noqa: E731  layers x K,V x heads x head_size x FP8

    def per_token_kv(m, b=16, ctx=4096):  # the bytes one more cached token adds to a forward
        return (forward_terms(m, b, 1, ctx)[0] - forward_terms(m, b, 1, 0)[0]) / (b * ctx)
    tps = (1, 2, 4, 8)
    assert [per_token_kv(shape(gqa4, tp=tp)) for tp in tps] == pytest.approx([kv_bytes(tp) for tp in tps])
    assert shape(gqa4, tp=8).kv_bytes_per_token == kv_bytes(8)  # per rank, as builders.memory sizes the KV pool
    assert kv_bytes(8) == kv_bytes(4) == kv_bytes(1) / 4 == 8192  # one head per rank at tp=8, not half of one
    one, eight = shape(gqa4), shape(gqa4, tp=8)
    copies = 32 * 2 * 4096 * 128 * (1 - 4 / 8)  # layers x k,v x H x head_size x the head beyond the 1/8 share
    assert eight.rank_linear_params == pytest.approx(one.linear_params / 8 + copies, rel=1e-12)
    weights = lambda m: forward_terms(m, 1, 1, 0)[0] - m.kv_bytes_per_token  # noqa: E731  (less the new token's KV)
    assert weights(eight) == pytest.approx(weights(one) / 8 + copies * 1.0, rel=1e-12)
    attn = lambda m: forward_terms(m, 1, 1, 8192)[1] - forward_terms(m, 1, 1, 0)[1]  # noqa: E731
    assert attn(eight) == pytest.approx(attn(one) / 8, rel=1e-9)
    assert shape(tp=8).rank_linear_params == shape().linear_params / 8  # 8 KV heads over 8: no copies


@pytest.mark.parametrize("cfg, tp, field", [(LLAMA_31_8B, 3, "num_attention_heads=32 is not divisible by tp=3"),
                                            ({**LLAMA_31_8B, "num_attention_heads": 48, "num_key_value_heads": 6,
                                              "head_size": 128}, 4, "num_key_value_heads=6 and tp=4")])
def test_a_tp_that_does_not_split_the_heads_is_refused(cfg, tp, field):
    """Upstream asserts that tp divides the attention heads (and its converters that the KV heads
    and tp divide one another); a rank of a fractional head has no step time to predict."""
    with pytest.raises(TrtspecError, match=f"^cost model, network 'm' \\(target\\): {field}"):
        shape(cfg, tp=tp)
    table = synthetic_table(gpu_preset("h100").model_copy(update=TRUE), {"target": shape()})
    with pytest.raises(TrtspecError, match="num_attention_heads=32 is not divisible by tp=3"):
        fit_gpu(table.model_copy(update={"tp": 3}), {"target": shape()})
