"""`trtspec quantize` refuses what TRT-LLM cannot build or an H100 cannot run, before any work
starts (no model load, no calibration, no output directory); records its calibration prompts; and
leaves nothing behind when it fails half-way."""

from __future__ import annotations

import json

import pytest
import torch
import typer
from typer.testing import CliRunner

from tiny_models import make_eagle_head, make_hf_model, save_tiny_tokenizer
from trtspec.calib import pipeline
from trtspec.quality.quantize_command import quantize_command
from trtspec.calib.quantize import CalibOptions, quantize_eagle, quantize_hf, quantize_pair
from trtspec.errors import TrtspecError

TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, vocab_size=1001)
PROMPTS = [list(range(3, 40)), list(range(100, 130))]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    make_hf_model("llama", root / "hf", **TINY)
    save_tiny_tokenizer(root / "hf")
    make_hf_model("llama", root / "draft", seed=1, **{**TINY, "num_hidden_layers": 1})
    save_tiny_tokenizer(root / "draft")
    make_eagle_head(root / "hf", root / "head")
    return root


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a refused request gets as far as loading a model."""
    def boom(*a, **k):
        raise AssertionError("a refused request loaded a model")

    monkeypatch.setattr(pipeline, "load_hf", boom)
    monkeypatch.setattr("trtspec.calib.eagle_quant.load_hf", boom)


def refused(fn, *args, needle: str, **kwargs) -> str:
    with pytest.raises(TrtspecError) as e:
        fn(*args, **kwargs)
    assert needle in str(e.value), str(e.value)
    return str(e.value)


def test_int8_kv_with_eagle(models, tmp_path, no_work):
    msg = refused(quantize_eagle, models / "hf", models / "head", tmp_path / "o", "fp8", "int8",
                  CalibOptions(prompts=PROMPTS), needle="paged context FMHA")
    assert msg.startswith("quantization.kv_cache: int8 with eagle") and "use quantization.kv_cache fp8" in msg
    assert not (tmp_path / "o").exists()


def test_int8_kv_with_draft_pair(models, tmp_path, no_work):
    msg = refused(quantize_pair, models / "hf", models / "draft", tmp_path / "o", "fp8", "int8",
                  calib=CalibOptions(prompts=PROMPTS), needle="paged context FMHA")
    assert "draft-target" in msg and "use quantization.kv_cache fp8" in msg


def test_smoothquant_with_eagle(models, tmp_path, no_work):
    msg = refused(quantize_eagle, models / "hf", models / "head", tmp_path / "o", "int8_sq", None,
                  CalibOptions(prompts=PROMPTS), needle="issues/3207")
    assert msg.startswith("quantization.format: int8_sq with an EAGLE head")
    assert "use quantization.format fp8" in msg


def test_awq_group_size_must_divide_input_dim(models, tmp_path, no_work):
    refused(quantize_hf, models / "hf", tmp_path / "o", "w4a16_awq", calib=CalibOptions(prompts=PROMPTS),
            needle="group size 256 does not divide the input dim 128 of 'transformer.layers.0.attention.qkv'",
            group_size=256)


def test_awq_group_size_must_divide_per_rank_input_dim(tmp_path, no_work):
    make_hf_model("llama", tmp_path / "hf", **{**TINY, "intermediate_size": 192})
    # 192 inputs of mlp.proj are a multiple of 64, but each of 2 ranks holds 96
    refused(quantize_hf, tmp_path / "hf", tmp_path / "o", "w4a16_awq", calib=CalibOptions(prompts=PROMPTS),
            tp=2, group_size=64, needle="does not divide the input dim 192 (96 per rank at tp=2) of "
                                        "'transformer.layers.0.mlp.proj'")


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "w4a8_nvfp4_fp8"])
def test_sm100_formats(models, tmp_path, no_work, fmt):
    msg = refused(quantize_hf, models / "hf", tmp_path / "o", fmt, needle="Blackwell (SM100)")
    assert "H100" in msg and "fp8, int8_sq, w8a16, w4a16_awq" in msg


def test_nvfp4_kv_cache(models, tmp_path, no_work):
    refused(quantize_hf, models / "hf", tmp_path / "o", "fp8", "nvfp4", needle="SM100")


@pytest.mark.parametrize("fmt, needle", [("fp16", "quantization.format: unknown format 'fp16'; expected one of "
                                                   "fp8, int8_sq, w8a16, w4a16_awq"),
                                         ("int4_awq", "name for quantization.format w4a16_awq"),
                                         ("int8_wo", "name for quantization.format w8a16")])
def test_unknown_formats(models, tmp_path, no_work, fmt, needle):
    refused(quantize_hf, models / "hf", tmp_path / "o", fmt, needle=needle)


def test_float32_model_dtype(models, tmp_path, no_work):
    refused(quantize_hf, models / "hf", tmp_path / "o", "fp8", dtype="float32",
            needle="convert.dtype: float32: quantized")


def test_non_empty_output_refused_before_calibration(models, tmp_path, no_work):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "keep.txt").write_text("x")
    refused(quantize_hf, models / "hf", tmp_path / "o", "fp8", calib=CalibOptions(prompts=PROMPTS),
            needle="output directory is not empty")
    assert (tmp_path / "o" / "keep.txt").read_text() == "x"


def test_failure_half_way_leaves_nothing(models, tmp_path, monkeypatch):
    from trtspec.calib import export

    def fail(self, name):
        raise RuntimeError("disk full")

    monkeypatch.setattr(export.QuantSource, "get", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        quantize_hf(models / "hf", tmp_path / "o", "fp8", calib=CalibOptions(prompts=PROMPTS))
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary sibling


@pytest.mark.parametrize("bad", [1001, -1])
def test_calibration_ids_outside_the_vocabulary(models, tmp_path, bad):
    """A token id the embedding cannot look up is refused by field (not torch's IndexError from
    inside the calibration forward), and nothing is left behind."""
    refused(quantize_hf, models / "hf", tmp_path / "o", "fp8", calib=CalibOptions(prompts=[[3, 4], [5, bad, 6]]),
            needle=f"quantization.calib: calibration prompt #1 holds token id {bad}, outside the model's "
                   "vocabulary [0, 1001)")
    assert list(tmp_path.iterdir()) == []


def test_w8a16_needs_no_calibration(models, tmp_path, no_work):
    """Full-precision weights + quant_algo W8A16: trtllm-build quantizes them (trtllm.md §3.7)."""
    from safetensors import safe_open

    quantize_hf(models / "hf", tmp_path / "o", "w8a16")  # dtype auto: the float32 model becomes float16
    cfg = json.loads((tmp_path / "o" / "config.json").read_text())
    assert cfg["dtype"] == "float16"
    assert cfg["quantization"]["quant_algo"] == "W8A16" and "lm_head" in cfg["quantization"]["exclude_modules"]
    f = safe_open(tmp_path / "o" / "rank0.safetensors", "pt")
    assert f.get_tensor("transformer.layers.0.attention.qkv.weight").dtype == torch.float16
    manifest = json.loads((tmp_path / "o" / "trtspec.json").read_text())
    assert manifest["options"]["calibration"]["calibrated"] is False


# ---- the command, with workload files ----------------------------------------------------------

def write_prompts(path, ids, words):
    path.write_text("".join(json.dumps({"id": i, "prompt": " ".join(f"t{w}" for w in ws)}) + "\n"
                            for i, ws in zip(ids, words)))


def run_quantize(*args: str):
    app = typer.Typer()
    app.command("quantize")(quantize_command)
    app.command("noop")(lambda: None)  # two commands, so "quantize" is a subcommand as in trtspec's CLI
    return CliRunner().invoke(app, ["quantize", *map(str, args)])


def test_command_records_sources_and_sample_ids(models, tmp_path):
    torch.set_num_threads(1)
    write_prompts(tmp_path / "chat.jsonl", [f"c{i}" for i in range(6)], [range(5 + i, 40 + i) for i in range(6)])
    write_prompts(tmp_path / "code.jsonl", [f"k{i}" for i in range(4)], [range(200 + i, 230) for i in range(4)])
    calib = f"chat={tmp_path / 'chat.jsonl'},code={tmp_path / 'code.jsonl'}"
    runs = []
    for out in ("a", "b"):
        result = run_quantize("--hf", models / "hf", "--out", tmp_path / out, "--format", "fp8", "--kv-cache", "fp8",
                              "--calib", calib, "--calib-samples", 5, "--calib-seq-len", 16, "--seed", 7,
                              "--tp", 2, "--dtype", "bfloat16")
        assert result.exit_code == 0, result.output + repr(result.exception)
        runs.append(json.loads((tmp_path / out / "trtspec.json").read_text())["options"]["calibration"])
    cal = runs[0]
    assert [s["name"] for s in cal["sources"]] == ["chat", "code"]
    assert [s["num_samples"] for s in cal["sources"]] == [3, 2]  # 5 split evenly, remainder first
    assert set(cal["sources"][0]["ids"]) <= {f"c{i}" for i in range(6)}
    assert set(cal["sources"][1]["ids"]) <= {f"k{i}" for i in range(4)}
    assert all(len(s["sha256"]) == 64 for s in cal["sources"])
    assert cal["samples"] == 5 and cal["seq_len"] == 16 and cal["seed"] == 7 and cal["tokens"] <= 5 * 16
    assert runs[0]["sources"] == runs[1]["sources"]  # deterministic by seed
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["dtype"] == "bfloat16" and cfg["mapping"]["tp_size"] == 2


def test_command_errors_are_trtspec_errors(models, tmp_path):
    result = run_quantize("--hf", models / "hf", "--out", tmp_path / "o", "--format", "fp8",
                          "--eagle", models / "head", "--draft", models / "draft")
    assert isinstance(result.exception, TrtspecError) and "mutually exclusive" in str(result.exception)
