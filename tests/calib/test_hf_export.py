"""`output_format: hf`: ModelOpt's unified HF checkpoint, against ModelOpt called directly.

trtspec calibrates (pipeline.calibrate_decoder), casts and calls export_hf_checkpoint; the oracle
(tests/modelopt_direct.py) loads the same HF model, runs mtq.quantize with ModelOpt's recipe on the
same prompts, casts and exports. Every tensor must be bit-identical (FP8 compared as bytes), and
hf_quant_config.json and config.json's quantization_config equal.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import modelopt_direct
from tiny_models import make_hf_model
from trtspec.calib.hf_export import MANIFEST_KIND, quantize_hf_unified, quantize_pair_unified
from trtspec.calib.options import QuantizeOptions
from trtspec.calib.quantize import CalibOptions, quantize
from trtspec.checkpoints.options import ConvertOptions
from trtspec.errors import TrtspecError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def prompts(n: int = 4, length: int = 24, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 1000, (length,), generator=g).tolist() for _ in range(n)]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.float8_e4m3fn:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return torch.equal(a, b)


# (family, format, KV, model overrides): AWQ packs 128-channel groups, so h >= 128 (cpu-stack.md §2).
CASES = {"llama-fp8+kv": ("llama", "fp8", "fp8", {}), "qwen3-fp8": ("qwen3", "fp8", None, {}),
         "qwen2-fp8+kv": ("qwen2", "fp8", "fp8", {}),
         "llama-w4a16_awq": ("llama", "w4a16_awq", None, dict(hidden_size=128, intermediate_size=256))}
RECIPES = {"fp8": "FP8_DEFAULT_CFG", "w4a16_awq": "INT4_AWQ_CFG"}  # ModelOpt's configs, named by ModelOpt


@pytest.mark.parametrize("case", CASES)
def test_export_is_modelopts_own(tmp_path, case):
    family, fmt, kv, overrides = CASES[case]
    make_hf_model(family, tmp_path / "hf", **overrides)
    calib = CalibOptions(prompts=prompts(), samples=4, seq_len=64)
    quantize_hf_unified(tmp_path / "hf", tmp_path / "ours", calib, fmt, kv)
    ref = modelopt_direct.calibrated(tmp_path / "hf", prompts(), kv_fp8=kv == "fp8", fmt_cfg=RECIPES[fmt])
    modelopt_direct.export(ref, tmp_path / "ref")

    ours, theirs = load_file(tmp_path / "ours/model.safetensors"), load_file(tmp_path / "ref/model.safetensors")
    assert set(ours) == set(theirs)
    assert [n for n in ours if not same(ours[n], theirs[n])] == []
    assert any(t.dtype == (torch.float8_e4m3fn if fmt == "fp8" else torch.uint8) for t in ours.values())
    assert (kv == "fp8") == any(n.endswith("k_proj.k_scale") for n in ours)
    read = lambda d, f: json.loads((tmp_path / d / f).read_text())  # noqa: E731
    assert read("ours", "hf_quant_config.json") == read("ref", "hf_quant_config.json")
    assert read("ours", "config.json")["quantization_config"] == read("ref", "config.json")["quantization_config"]


def test_manifest_and_atomic_output(tmp_path):
    make_hf_model("llama", tmp_path / "hf")
    (tmp_path / "hf" / "tokenizer.json").write_text("{}")
    out = quantize_hf_unified(tmp_path / "hf", tmp_path / "out", CalibOptions(prompts=prompts(), samples=4), "fp8")
    manifest = json.loads((out / "trtspec.json").read_text())
    assert manifest["kind"] == MANIFEST_KIND
    opts = manifest["options"]
    assert (opts["output_format"], opts["quant_algo"], opts["dtype"]) == ("hf", "FP8", "float16")
    assert opts["calibration"]["calibrated"] and opts["calibration"]["samples"] == 4
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "out"]  # no temporary sibling left


@pytest.mark.parametrize("fmt,kv,extra,field", [
    ("int8_sq", None, {}, "quantization.format: int8_sq with quantization.output_format hf"),
    ("w8a16", None, {}, "quantization.format: w8a16 with quantization.output_format hf"),
    ("fp8", "int8", {}, "quantization.kv_cache: int8 with quantization.output_format hf"),
    ("fp8", None, {"eagle": True}, "quantization.output_format: hf with an EAGLE head"),
    ("fp8", None, {"draft": True, "draft_format": "w4a16_awq"},
     "quantization.draft_format: w4a16_awq with quantization.output_format hf"),
    ("fp8", None, {"tp": 2}, "convert.tp: 2 with quantization.output_format hf"),
    ("fp8", None, {"exclude": ["*.mlp.proj"]}, "quantization.exclude: mixed precision"),
    ("fp8", None, {"keep_sensitive": 2}, "quantization.keep_sensitive: mixed precision"),  # the field given
    ("fp8", None, {"keep_sensitive": 2, "draft": True}, "quantization.keep_sensitive: mixed precision"),
])
def test_refusals_name_the_field(tmp_path, fmt, kv, extra, field):
    options = QuantizeOptions(format=fmt, kv_cache=kv, output_format="hf", exclude=extra.get("exclude", []),
                              keep_sensitive=extra.get("keep_sensitive", 0),
                              draft_format=extra.get("draft_format", "same"))
    with pytest.raises(TrtspecError) as e:
        quantize(tmp_path / "hf", tmp_path / "out", options, ConvertOptions(tp=extra.get("tp", 1)),
                 eagle_head=tmp_path / "head" if extra.get("eagle") else None,
                 draft_hf=tmp_path / "draft" if extra.get("draft") else None)
    assert str(e.value).startswith(field) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_cli_output_format_hf_with_report(tmp_path, capsys):
    from cli_helpers import run_cli
    from tiny_models import save_tiny_tokenizer

    make_hf_model("llama", tmp_path / "hf")
    save_tiny_tokenizer(tmp_path / "hf")
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "prompt": " ".join(
        f"t{w}" for w in range(5 + 7 * i, 30 + 7 * i))}) + "\n" for i in range(6)))
    code, out, err = run_cli(capsys, "quantize", "--hf", tmp_path / "hf", "--out", tmp_path / "out", "--format", "fp8",
                             "--kv-cache", "fp8", "--output-format", "hf", "--calib", f"chat={tmp_path / 'chat.jsonl'}",
                             "--calib-samples", 3, "--calib-seq-len", 32, "--report-workloads",
                             f"chat={tmp_path / 'chat.jsonl'}", "--report-samples", 2, "--report-max-new-tokens", 4)
    assert code == 0, err
    assert (tmp_path / "out" / "hf_quant_config.json").is_file()
    rep = json.loads((tmp_path / "out" / "quant_report" / "quality_report.json").read_text())
    assert rep["quantized"]["quantization"]["checkpoint_format"] == "modelopt-hf"
    assert rep["workloads"]["chat"]["held_out"] is True  # the calibration ids come from our trtspec.json
    code, _, err = run_cli(capsys, "quantize", "--hf", tmp_path / "hf", "--out", tmp_path / "o2", "--format",
                           "int8_sq", "--output-format", "hf", "--no-report")
    assert code != 0 and "--format: int8_sq with --output-format hf" in err


def test_pair_is_two_unified_checkpoints(tmp_path):
    """--draft with output_format hf: target/ and draft/, each ModelOpt's export of its own model
    calibrated on the same prompts; the runtime and the repository generator read the pair."""
    from trtspec.checkpoints.hf_unified import load_hf_unified
    from trtspec.runtime.generate import load_models

    from tiny_models import save_tiny_tokenizer

    make_hf_model("llama", tmp_path / "t")
    make_hf_model("llama", tmp_path / "d", seed=1, num_hidden_layers=1)
    for d in ("t", "d"):
        save_tiny_tokenizer(tmp_path / d)
    quantize_pair_unified(tmp_path / "t", tmp_path / "d", tmp_path / "out",
                          CalibOptions(prompts=prompts(), samples=4, seq_len=64), "fp8", "fp8")
    manifest = json.loads((tmp_path / "out" / "trtspec.json").read_text())
    assert manifest["kind"] == "modelopt-hf-pair" and [s["role"] for s in manifest["sources"]] == ["target", "draft"]
    for role, layers in (("target", 2), ("draft", 1)):
        view = load_hf_unified(tmp_path / "out" / role)
        assert (view.quant_algo, view.kv_cache_quant_algo, view.spec.num_layers) == ("FP8", "FP8", layers)
    models = load_models(tmp_path / "out", tokenizer=False)
    assert models.draft is not None and len(models.draft.layers) == 1
