"""The quantization quality report: metrics on a tiny FP8 + FP8-KV Llama against its unquantized
conversion, the identical-checkpoint control (RMSE 0, agreement 1, ΔAL 0: the metrics can tell a
quantized model from its reference), held-out prompt selection from the calibration manifest, the
JSON schema and plot, the commands; and (slow) SmolLM2 FP8 + FP8 KV on MT-Bench prompts."""

from __future__ import annotations

import json
import math

import pytest
import torch
import typer
from typer.testing import CliRunner

from tiny_models import make_hf_model, save_tiny_tokenizer
from trtspec.calib import CalibOptions, quantize_hf
from trtspec.quality.report import JSON_NAME, PNG_NAME, SCHEMA, calibration_ids, quality_report
from trtspec.quality.command import quant_report_command
from trtspec.checkpoints.convert import convert_hf
from trtspec.errors import TrtspecError

TINY = dict(hidden_size=128, intermediate_size=256, vocab_size=1001)


def write_prompts(path, n):
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": " ".join(f"t{w}" for w in range(5 + 7 * i, 30 + 7 * i))})
                            + "\n" for i in range(n)))


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("quant_report")
    make_hf_model("llama", root / "hf", **TINY)
    save_tiny_tokenizer(root / "hf")
    write_prompts(root / "chat.jsonl", 8)
    quantize_hf(root / "hf", root / "fp8", fmt="fp8", kv_cache="fp8", dtype="float16",
                calib=CalibOptions(calib=f"chat={root / 'chat.jsonl'}", samples=3, seq_len=32, seed=0))
    convert_hf(root / "hf", root / "ref", dtype="float32")
    return root


def token_prompts(n=3):
    return {"ids": [(f"s{i}", [1] + list(range(10 + 50 * i, 30 + 50 * i))) for i in range(n)]}


def test_quantized_vs_reference_metrics_and_control(ckpts, tmp_path):
    # The reference checkpoint doubles as the draft: the reference pair then accepts every draft.
    rep = quality_report(ckpts / "fp8", ckpts / "ref", [], tmp_path / "q", draft_ckpt=ckpts / "ref",
                         max_new_tokens=12, max_k=3, prompts=token_prompts())
    w = rep["workloads"]["ids"]
    assert w["positions"] == 3 * 12 and w["num_samples"] == 3
    assert 0.0 <= w["top1_agreement"] <= 1.0 and 0.0 <= w["top1_agreement_prompt"] <= 1.0
    assert w["logit_rmse"] > 0 and w["logit_max_abs"] >= w["logit_rmse"]
    for kind in ("prompt", "continuation"):
        p = w["perplexity"][kind]
        assert p["tokens"] > 0 and p["reference"] > 1 and p["quantized"] > 1
        assert math.isclose(p["ratio"], p["quantized"] / p["reference"])
    a = w["acceptance"]
    assert a["mode"] == "draft-target" and a["max_k"] == 3 and set(a["delta_by_k"]) == {"1", "2", "3"}
    # draft == target: all accepted; 11 tokens after the prefill's in steps of 4, 4 and the 3 left
    assert a["reference"]["accept_length_by_k"]["3"] == pytest.approx(11 / 3)
    assert a["delta_at_max_k"] == pytest.approx(a["quantized"]["accept_length_by_k"]["3"] - 11 / 3)

    ctl = quality_report(ckpts / "ref", ckpts / "ref", [], tmp_path / "ctl", draft_ckpt=ckpts / "ref",
                         max_new_tokens=12, max_k=3, prompts=token_prompts())
    c = ctl["workloads"]["ids"]
    assert c["logit_rmse"] == 0.0 and c["top1_agreement"] == 1.0 and c["top1_agreement_prompt"] == 1.0
    assert c["perplexity"]["prompt"]["ratio"] == 1.0
    assert all(d == 0.0 for d in c["acceptance"]["delta_by_k"].values())
    # The quantized model is distinguishable from the control on the same sequences.
    assert w["logit_rmse"] > 1e-3 and (w["top1_agreement"] < 1.0 or w["logit_rmse"] > 10 * c["logit_rmse"])


def test_json_schema_and_plot(ckpts, tmp_path):
    out = tmp_path / "r"
    rep = quality_report(ckpts / "fp8", ckpts / "ref", [], out, max_new_tokens=6, prompts=token_prompts(2))
    data = json.loads((out / JSON_NAME).read_text())
    assert data == json.loads(json.dumps(rep))
    assert data["schema"] == SCHEMA == "trtspec.quant-report/1"
    assert {"trtspec_version", "created", "quantized", "reference", "options", "definitions", "workloads",
            "summary"} <= set(data)
    assert data["quantized"]["quantization"]["quant_algo"] == "FP8"
    assert data["quantized"]["quantization"]["kv_cache_quant_algo"] == "FP8"
    assert data["workloads"]["ids"]["acceptance"] is None  # no draft
    assert data["summary"]["min_top1_agreement"] == data["workloads"]["ids"]["top1_agreement"]
    png = (out / PNG_NAME).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left


def test_held_out_prompts_exclude_calibration_ids(ckpts, tmp_path):
    from trtspec.workloads import load_workloads

    used = calibration_ids(ckpts / "fp8")
    src = str((ckpts / "chat.jsonl").resolve())
    assert len(used[src]) == 3
    wls = load_workloads(f"chat={ckpts / 'chat.jsonl'}")
    rep = quality_report(ckpts / "fp8", ckpts / "ref", wls, None, max_new_tokens=4)
    w = rep["workloads"]["chat"]
    assert w["held_out"] is True and w["excluded_calibration_samples"] == 3 and w["num_samples"] == 5
    assert not set(w["sample_ids"]) & used[src]
    rep = quality_report(ckpts / "fp8", ckpts / "ref", wls, None, max_new_tokens=4, samples=2, seed=1)
    assert rep["workloads"]["chat"]["num_samples"] == 2


def test_errors(ckpts, tmp_path):
    with pytest.raises(TrtspecError, match="^ref_ckpt: .*missing: not a checkpoint directory"):
        quality_report(ckpts / "fp8", tmp_path / "missing", [], None, prompts=token_prompts(1))
    with pytest.raises(TrtspecError, match="^max_new_tokens: expected a positive integer, got 0"):
        quality_report(ckpts / "fp8", ckpts / "ref", [], None, max_new_tokens=0, prompts=token_prompts(1))
    with pytest.raises(TrtspecError, match="^samples: expected a positive integer or None"):
        quality_report(ckpts / "fp8", ckpts / "ref", [], None, samples=0, prompts=token_prompts(1))


def run(cmd_name, fn, *args):
    app = typer.Typer()
    app.command(cmd_name)(fn)
    app.command("noop")(lambda: None)
    return CliRunner().invoke(app, [cmd_name, *map(str, args)])


def test_quant_report_command(ckpts, tmp_path):
    out = tmp_path / "cli"
    r = run("quant-report", quant_report_command, "--ckpt", ckpts / "fp8", "--ref", ckpts / "ref",
            "--workloads", f"chat={ckpts / 'chat.jsonl'}", "--samples", 2, "--max-new-tokens", 4, "--out", out)
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert "top-1" in r.output and (out / JSON_NAME).is_file() and (out / PNG_NAME).is_file()
    r = run("quant-report", quant_report_command, "--ckpt", ckpts / "fp8", "--ref", ckpts / "ref",
            "--samples", 0, "--out", out)
    assert isinstance(r.exception, TrtspecError)


def test_quantize_writes_the_report_and_no_report_skips_it(ckpts, tmp_path):
    from trtspec.quality.quantize_command import quantize_command

    common = ("--hf", ckpts / "hf", "--format", "fp8", "--kv-cache", "fp8", "--calib", f"chat={ckpts / 'chat.jsonl'}",
              "--calib-samples", 3, "--calib-seq-len", 32)
    r = run("quantize", quantize_command, *common, "--out", tmp_path / "a", "--report-workloads",
            f"chat={ckpts / 'chat.jsonl'}", "--report-samples", 2, "--report-max-new-tokens", 4)
    assert r.exit_code == 0, r.output + repr(r.exception)
    data = json.loads((tmp_path / "a" / "quant_report" / JSON_NAME).read_text())
    assert data["schema"] == SCHEMA and data["workloads"]["chat"]["held_out"] is True
    assert data["workloads"]["chat"]["num_samples"] == 2
    r = run("quantize", quantize_command, *common, "--out", tmp_path / "b", "--no-report")
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert not (tmp_path / "b" / "quant_report").exists()


@pytest.fixture(scope="module")
def smollm2_report(smollm2_hf, tmp_path_factory):
    """SmolLM2 FP8 + FP8 KV (calibrated on 16 MT-Bench turns of <= 128 tokens) against its float32
    conversion, on 4 held-out MT-Bench prompts x 32 reference tokens."""
    from trtspec.workloads import load_workloads

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("smollm2_quant_report")
    quantize_hf(smollm2_hf, root / "fp8", fmt="fp8", kv_cache="fp8", dtype="bfloat16",
                calib=CalibOptions(calib="chat=mt-bench", samples=16, seq_len=128, seed=0))
    convert_hf(smollm2_hf, root / "ref", dtype="float32")
    rep = quality_report(root / "fp8", root / "ref", load_workloads("chat=mt-bench"), root / "rep",
                         max_new_tokens=32, samples=4, seed=0)
    return root, rep


@pytest.mark.slow
def test_smollm2_fp8_fp8kv_report(smollm2_report):
    root, rep = smollm2_report
    w = rep["workloads"]["chat"]
    assert w["held_out"] and w["excluded_calibration_samples"] >= 8 and w["positions"] >= 4 * 8
    assert (root / "rep" / PNG_NAME).is_file() and (root / "rep" / JSON_NAME).is_file()
    # Sanity bounds (far from a broken model: a random or mis-scaled one agrees on ~0%).
    assert w["top1_agreement"] >= 0.8 and w["perplexity"]["prompt"]["ratio"] < 1.5, w


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="issue 4 item 4 acceptance not met: FP8 + FP8 KV SmolLM2-135M agrees "
                                       "on 88.2% of 254 held-out MT-Bench positions (bench_quantize.py), and at "
                                       "most 91.3% with the 2-20 most sensitive of its 120 GEMMs kept in bf16 "
                                       "(--keep-sensitive); see the docstring")
def test_smollm2_fp8_fp8kv_top1_agreement_on_mt_bench(smollm2_report):
    """Acceptance of issue 4 item 4: >= 95% top-1 agreement with the unquantized model on MT-Bench.

    Measured on 8 held-out MT-Bench prompts x 32 reference tokens (254 positions; one position is
    0.4 points, the binomial standard error near 90% is ~1.9 points), runtime numerics, calibration
    64 MT-Bench + HumanEval prompts x <= 256 tokens:
      all GEMMs FP8 + FP8 KV (the default recipe)              88.2%
      FP8 GEMMs, KV cache in bf16                              89.0%
      all 120 GEMMs in bf16, FP8 KV cache only                 96.1%
      --keep-sensitive N (leave-one-out KL on 8 x 64 calibration tokens), N GEMMs in bf16:
        N = 2, 4, 6, 8, 10, 12, 16, 20, 24:  90.2 89.4 86.6 90.2 89.4 90.6 91.3 90.9 90.6%
        N = 30, 45, 60 (25-50% of the GEMMs):  93.3 90.6 89.8%
    Every FP8 tensor carries ~2.6% relative error (3 mantissa bits; the KV cache's too, whether or
    not the scale is floored at 1.0), no small set of GEMMs carries the loss (only ~16 GEMMs have a
    leave-one-out score above the measurement noise), and 95% is out of reach short of leaving most
    GEMMs unquantized. bf16/fp16 without FP8 agree on 100%."""
    assert smollm2_report[1]["workloads"]["chat"]["top1_agreement"] >= 0.95


def test_held_out_excludes_the_base_set_of_a_derived_workload(tmp_path):
    """code-edit quotes HumanEval/N's stub and solution: a checkpoint calibrated on humaneval's
    HumanEval/N must not be reported on code-edit's HumanEval/N as a held-out prompt (nor the reverse)."""
    from trtspec.quality.samples import held_out_samples
    from trtspec.workloads import load_workload

    calibrated = load_workload("humaneval", seed=0, samples=160)
    (tmp_path / "trtspec.json").write_text(json.dumps({"options": {"calibration": {"sources": [
        {"source": "humaneval", "ids": calibrated.ids}]}}}))
    edit = load_workload("edit=code-edit")
    chosen, held_out, excluded = held_out_samples(edit, calibration_ids(tmp_path), 4, 0)
    assert excluded == 160 and held_out is True
    assert not {s.id for s in chosen} & set(calibrated.ids)


def test_standard_errors_are_over_prompts(ckpts, tmp_path):
    """Top-1 agreement and AL are pooled over prompts whose tokens are correlated: their standard
    errors are over prompts. Oracles: scipy's standard error of the per-prompt agreement rates
    (every prompt has the same number of positions, so the pooled rate is their mean); with the
    reference target as both pairs' draft the reference pair accepts every draft, so the paired SE
    of the AL delta is the quantized pair's own AL SE; the identical-checkpoint control has 0."""
    from scipy.stats import sem

    from trtspec.confidence import Z95
    from trtspec.quality.render import report_table

    items = token_prompts(5)
    rep = quality_report(ckpts / "fp8", ckpts / "ref", [], None, draft_ckpt=ckpts / "ref", max_new_tokens=10,
                         max_k=2, prompts=items)["workloads"]["ids"]
    rates, prompt_rates = [], []
    for item in items["ids"]:
        one = quality_report(ckpts / "fp8", ckpts / "ref", [], None, max_new_tokens=10,
                             prompts={"ids": [item]})["workloads"]["ids"]
        assert one["positions"] == 10 and one["top1_agreement_se"] is None  # one prompt: no spread
        rates.append(one["top1_agreement"])
        prompt_rates.append(one["top1_agreement_prompt"])
    assert rep["top1_agreement"] == pytest.approx(sum(rates) / len(rates)) and len(set(rates)) > 1, rates
    assert rep["top1_agreement_se"] == pytest.approx(sem(rates), abs=1e-12)
    assert rep["top1_agreement_prompt_se"] == pytest.approx(sem(prompt_rates), abs=1e-12)
    a = rep["acceptance"]
    for k in ("1", "2"):
        assert a["reference"]["accept_length_se_by_k"][k] == pytest.approx(0.0, abs=1e-12)
        assert a["delta_se_by_k"][k] == pytest.approx(a["quantized"]["accept_length_se_by_k"][k], rel=1e-9)
        assert a["delta_se_by_k"][k] > 0
    assert a["delta_se_at_max_k"] == a["delta_se_by_k"]["2"]
    ctl = quality_report(ckpts / "ref", ckpts / "ref", [], None, draft_ckpt=ckpts / "fp8", max_new_tokens=10,
                         max_k=2, prompts=items)["workloads"]["ids"]
    assert ctl["top1_agreement_se"] == 0.0 and all(v == 0.0 for v in ctl["acceptance"]["delta_se_by_k"].values())
    row = next(iter(report_table({"quantized": {"quantization": {}}, "workloads": {"ids": rep}}).columns[5].cells))
    assert row == f"{100 * rep['top1_agreement']:.1f}±{100 * Z95 * rep['top1_agreement_se']:.1f}"


def test_paired_delta_se_matches_the_standard_error_of_differences():
    """With one step per prompt each AL is a plain mean, and the paired SE of the difference of
    two means over the same prompts is scipy's standard error of the per-prompt differences."""
    from scipy.stats import sem

    from trtspec.tuning.acceptance import paired_ratio_delta_se

    ref, quant = [3.0, 2.0, 4.0, 1.0, 3.5], [2.0, 2.0, 3.0, 1.5, 2.0]
    se = paired_ratio_delta_se([(y, 1) for y in ref], [(y, 1) for y in quant])
    assert se == pytest.approx(sem([q - r for q, r in zip(quant, ref)]), rel=1e-12)
    assert paired_ratio_delta_se([(2.0, 1)], [(1.0, 1)]) is None  # one prompt: no spread
