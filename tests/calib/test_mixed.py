"""Mixed precision (`--exclude`, `--keep-sensitive`): linears kept in the model dtype.

Oracle: ModelOpt's own `export_tensorrt_llm_checkpoint` of the same calibrated model with the
same quantizers disabled, tensor by tensor (bit for bit, as test_quant_export.py does for the
uniform formats), and its `exclude_modules` list: every linear it excludes we exclude, and no
other. The sensitivity measurement is checked on a model with one deliberately fragile GEMM.
"""

from __future__ import annotations

import fnmatch
import json

import pytest
import torch

from calib.test_export import TINY, assert_same_tensors, prompts
from tiny_models import make_hf_model
from trtspec.upstream import trtllm
from trtspec.calib.data import token_id_set
from trtspec.calib.formats import check_format
from trtspec.calib.mixed import hf_modules, linear_units, resolve_excludes
from trtspec.calib.pipeline import KeepSensitive, calibrate_decoder, exclude_sensitive, write_quantized_decoder
from trtspec.calib.quantize import CalibOptions, quantize_hf
from trtspec.checkpoints.convert import prepare_decoder
from trtspec.checkpoints.scheme import QuantScheme
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.checkpoints.validate import validate_checkpoint
from trtspec.errors import TrtspecError

LAYERS = 3
PATTERNS = ["transformer.layers.0.mlp.proj", "*.1.attention.qkv", "transformer.layers.2.mlp.gate"]
WANT = ("transformer.layers.0.mlp.proj", "transformer.layers.1.attention.qkv",
        "transformer.layers.2.mlp.fc", "transformer.layers.2.mlp.gate")  # gate pulls in fc: one GEMM


def linears(ckpt_dir) -> list[str]:
    names = load_checkpoint(ckpt_dir).names()
    return sorted(n[: -len(".weight")] for n in names if n.endswith(".weight") and ".layers." in n
                  and n.rsplit(".", 2)[-2] in ("qkv", "dense", "fc", "gate", "proj"))


def excluded_by(ckpt_dir, names: list[str]) -> set[str]:
    patterns = json.loads((ckpt_dir / "config.json").read_text())["quantization"]["exclude_modules"]
    return {n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)}


def export_both(root, fmt: str, kv: str | None, keep: int = 0, tps=(1, 2)):
    """Calibrate a 3-layer tiny Llama with PATTERNS excluded (ModelOpt config patterns), optionally
    measure and exclude `keep` more, then write ours and ModelOpt's export at each tp."""
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    torch.set_num_threads(1)
    make_hf_model("llama", root / "hf", **TINY, num_hidden_layers=LAYERS)
    qfmt = check_format(fmt)
    d = prepare_decoder(root / "hf", "float16", 1)
    layout = QuantScheme(qfmt.quant_algo, kv, trtllm.AWQ_DEFAULT_GROUP_SIZE,
                         resolve_excludes(PATTERNS, d.plans, qfmt.quant_algo))
    cal = calibrate_decoder(root / "hf", qfmt, layout, token_id_set(prompts()),
                            hf_modules(d.plans, set(layout.exclude)))
    if keep:
        layout, _ = exclude_sensitive(d, qfmt, layout, cal, KeepSensitive(keep, 3, 16), progress=lambda m: None)
    dirs = {}
    for tp in tps:
        ours = root / f"ours_tp{tp}"
        ours.mkdir()
        write_quantized_decoder(prepare_decoder(root / "hf", "float16", tp), ours, qfmt, layout, cal)
        dirs[tp] = (ours, root / f"modelopt_tp{tp}")
    for tp in tps:
        export_tensorrt_llm_checkpoint(cal.model, "llama", torch.float16, export_dir=str(dirs[tp][1]),
                                       inference_tensor_parallel=tp)
    return layout, dirs


@pytest.fixture(scope="module", params=["fp8+kv", "int8_sq"])
def mixed(request, tmp_path_factory):
    fmt, kv = {"fp8+kv": ("fp8", "FP8"), "int8_sq": ("int8_sq", None)}[request.param]
    return export_both(tmp_path_factory.mktemp(request.param.replace("+", "_")), fmt, kv)


def test_patterns_resolve_to_exact_names_whole_gemms(mixed):
    layout, _ = mixed
    assert layout.exclude == WANT


@pytest.mark.parametrize("tp", [1, 2])
def test_mixed_checkpoint_equals_modelopt_export(mixed, tp):
    layout, dirs = mixed
    ours, theirs = dirs[tp]
    assert_same_tensors(ours, theirs, tp)
    names = linears(ours)
    assert len(names) == 5 * LAYERS
    assert excluded_by(ours, names) == excluded_by(theirs, names) == set(WANT)
    q = json.loads((ours / "config.json").read_text())["quantization"]
    assert set(WANT) <= set(q["exclude_modules"]) and set(q) <= set(trtllm.QUANT_CONFIG_KEYS)
    ckpt = validate_checkpoint(ours)
    validate_checkpoint(theirs)  # the validator reads ModelOpt's mixed layout too
    for name in names:
        want = torch.float16 if name in WANT else (torch.float8_e4m3fn if q["quant_algo"] == "FP8" else torch.int8)
        assert ckpt.tensor(name + ".weight").dtype == want, name
        assert (name + ".weights_scaling_factor" in ckpt) == (name not in WANT), name
    if q["kv_cache_quant_algo"]:  # TRT-LLM quantizes the KV cache of every attention, excluded qkv or not
        assert all(f"transformer.layers.{i}.attention.kv_cache_scaling_factor" in ckpt for i in range(LAYERS))


def test_keep_sensitive_equals_modelopt_export(tmp_path):
    """The measured exclusions are applied to the ModelOpt model too: its export lists the same
    linears and holds the same tensors."""
    layout, dirs = export_both(tmp_path, "fp8", "FP8", keep=2, tps=(1,))
    ours, theirs = dirs[1]
    extra = set(layout.exclude) - set(WANT)
    assert len({n.replace(".mlp.gate", ".mlp.fc") for n in extra}) == 2
    assert_same_tensors(ours, theirs, 1)
    names = linears(ours)
    assert excluded_by(ours, names) == excluded_by(theirs, names) == set(layout.exclude)


HF_SOURCES = {"attention.qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
              "attention.dense": ("self_attn.o_proj",), "mlp.fc": ("mlp.gate_proj",), "mlp.gate": ("mlp.up_proj",),
              "mlp.proj": ("mlp.down_proj",)}


def test_keep_sensitive_after_smoothing_writes_the_hf_weights(tmp_path):
    """SmoothQuant calibrates by moving a per-input-channel scale s from the weight into the input
    (w / s, x * s): a linear measured sensitive and excluded after calibration is a plain linear in
    the checkpoint and must hold w, the HF model's weight; ModelOpt's export of the same model,
    with those quantizers disabled, holds the same tensors."""
    from safetensors.torch import load_file

    layout, dirs = export_both(tmp_path, "int8_sq", None, keep=2, tps=(1,))
    ours, theirs = dirs[1]
    kept = sorted(set(layout.exclude) - set(WANT))
    assert kept
    hf, ckpt = load_file(str(tmp_path / "hf" / "model.safetensors")), load_checkpoint(ours)
    for name in kept:
        i, kind = name.split(".")[2], name.split(".", 3)[3]
        want = torch.cat([hf[f"model.layers.{i}.{s}.weight"] for s in HF_SOURCES[kind]]).to(torch.float16)
        got = ckpt.tensor(name + ".weight")
        assert got.dtype == torch.float16 and f"{name}.prequant_scaling_factor" not in ckpt, name
        torch.testing.assert_close(got, want, rtol=2e-3, atol=1e-6, msg=name)  # w / s * s, in float16
    assert_same_tensors(ours, theirs, 1)


# ---- the measurement finds a fragile GEMM -----------------------------------------------------------

@pytest.fixture(scope="module")
def fragile(tmp_path_factory):
    """A tiny model whose layer-1 down_proj has one weight 10^6 x its largest, on an input channel
    that is always 0 (up_proj's row 0 is zeroed): the float model is unchanged, but per-tensor FP8
    flushes every other weight of that GEMM to zero, so it dominates the quantization error."""
    from safetensors.torch import load_file, save_file

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("fragile")
    make_hf_model("llama", root / "hf", **TINY, num_hidden_layers=LAYERS)
    f = root / "hf" / "model.safetensors"
    t = load_file(str(f))
    t["model.layers.1.mlp.up_proj.weight"][0] = 0
    w = t["model.layers.1.mlp.down_proj.weight"]
    w[0, 0] = 1e6 * w.abs().max()  # bfloat16 holds it (float16 would overflow)
    save_file(t, str(f), metadata={"format": "pt"})
    return root


def test_keep_sensitive_ranks_the_fragile_gemm_first(fragile):
    out = quantize_hf(fragile / "hf", fragile / "ckpt", "fp8", "fp8", CalibOptions(prompts=prompts()),
                      dtype="bfloat16", keep_sensitive=KeepSensitive(1, 4, 24))
    manifest = json.loads((out / "trtspec.json").read_text())["options"]["mixed_precision"]
    sens = manifest["sensitivity"]
    ranked = list(sens["scores"])
    assert ranked[0] == "transformer.layers.1.mlp.proj" and list(sens["kept"]) == ranked[:1]
    assert sens["scores"][ranked[0]] > 20 * max(abs(sens["scores"][u]) for u in ranked[1:])
    assert sens["scores"][ranked[0]] <= sens["baseline_kl"] + 1e-9  # a reduction of KL, never more than all of it
    assert len(ranked) == 4 * LAYERS and sens["prompts"] == 4 and sens["tokens"] == 4 * 24
    assert manifest["excluded_linears"] == ["transformer.layers.1.mlp.proj"]
    assert (manifest["excluded_gemms"], manifest["total_gemms"]) == (1, 4 * LAYERS)
    cfg = json.loads((out / "config.json").read_text())["quantization"]
    assert "transformer.layers.1.mlp.proj" in cfg["exclude_modules"]
    assert load_checkpoint(out).tensor("transformer.layers.1.mlp.proj.weight").dtype == torch.bfloat16


def test_identical_models_score_zero(fragile, tmp_path):
    """Control: with the float checkpoint on both sides every score and the baseline are 0."""
    from trtspec.calib.sensitivity import measure
    from trtspec.checkpoints.convert import convert_hf
    from trtspec.runtime.model import Decoder

    convert_hf(fragile / "hf", tmp_path / "ref", dtype="float32")
    dec = Decoder(load_checkpoint(tmp_path / "ref"))
    units = list(linear_units(prepare_decoder(fragile / "hf", "float32", 1).plans))
    sens = measure(dec, dec, units, prompts(2, 12), torch.float32)
    assert sens.baseline_kl == 0.0 and sens.baseline_top1 == 1.0
    assert all(v == 0.0 for v in sens.scores.values())


# ---- refusals ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_mixed")
    make_hf_model("llama", root / "hf", **TINY, num_hidden_layers=2)
    return root / "hf"


@pytest.mark.parametrize("kw, match", [
    (dict(exclude=["*.mlp.nothing"]), r"^quantization.exclude: '\*.mlp.nothing' matches no quantizable linear"),
    (dict(exclude=["lm_head"]), "^quantization.exclude: 'lm_head' matches no quantizable linear"),
    # every GEMM excluded: ModelOpt's mtq.quantize would raise a RuntimeError of its own after loading the model
    (dict(kv_cache="fp8", exclude=["transformer.layers.0.*", "*.1.*"]),
     r"^quantization.exclude: .* exclude every quantizable linear \(8 GEMMs\); nothing would be quantized"),
    (dict(fmt="int8_sq", exclude=["*"]), r"^quantization.exclude: \['\*'\] exclude every quantizable linear"),
    (dict(fmt="w8a16", exclude=["*.mlp.proj"]), "^quantization.exclude: .*W8A16 weights are quantized by trtllm-build"),
    (dict(fmt="w8a16", kv_cache="fp8", keep_sensitive=KeepSensitive(2)),
     "^quantization.keep_sensitive: .*calibrated weight"),
    (dict(keep_sensitive=KeepSensitive(-1)), "^quantization.keep_sensitive: expected an integer >= 0, got -1"),
    (dict(keep_sensitive=KeepSensitive(2, 0)), "^quantization.sensitivity_samples: expected an integer >= 1, got 0"),
    # keeping every GEMM still quantized would write an FP8 checkpoint of plain linears, after the whole measurement
    (dict(keep_sensitive=KeepSensitive(8)), r"^quantization.keep_sensitive: 8 would keep every one of the 8 GEMMs"),
    (dict(kv_cache="fp8", exclude=["transformer.layers.0.*"], keep_sensitive=KeepSensitive(5)),
     r"^quantization.keep_sensitive: 5 would keep every one of the 4 GEMMs still quantized"),
])
def test_bad_requests_are_refused_before_work(tiny_hf, tmp_path, kw, match):
    args = dict(fmt="fp8", kv_cache=None, calib=CalibOptions(prompts=prompts()), dtype="float16")
    with pytest.raises(TrtspecError, match=match):
        quantize_hf(tiny_hf, tmp_path / "out", **{**args, **kw})
    assert not (tmp_path / "out").exists()


def _edit_exclude(src, dst, exclude):
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization"]["exclude_modules"] = exclude
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_validator_refuses_gate_pairs_trtllm_would_misbuild(mixed, tmp_path):
    """fuse_gate_mlp builds one GEMM from mlp.gate + mlp.fc and looks up mlp.fc by exact name."""
    layout, dirs = mixed
    ours = dirs[1][0]
    q = json.loads((ours / "config.json").read_text())["quantization"]
    if q["quant_algo"] != "FP8":
        pytest.skip("only FP8 fuses gate and fc (fuse_gate_mlp)")
    base = [p for p in q["exclude_modules"] if ".mlp.fc" not in p and ".mlp.gate" not in p]
    wildcard = _edit_exclude(ours, tmp_path / "w", base + ["transformer.layers.2.mlp.*"])
    with pytest.raises(TrtspecError, match="matches 'transformer.layers.2.mlp.fc' only by a wildcard"):
        validate_checkpoint(wildcard)
    with pytest.raises(TrtspecError, match="excludes only one of 'transformer.layers.2.mlp.fc' and"):
        validate_checkpoint(_edit_exclude(ours, tmp_path / "g", base + ["transformer.layers.2.mlp.gate"]))
    with pytest.raises(TrtspecError, match="exclude_modules must be a list"):
        validate_checkpoint(_edit_exclude(ours, tmp_path / "s", "lm_head"))


# ---- the command and the report ---------------------------------------------------------------------

def test_command_exclude_reaches_checkpoint_manifest_and_report(tmp_path):
    from quality.test_report import run, write_prompts
    from tiny_models import save_tiny_tokenizer
    from trtspec.quality.quantize_command import quantize_command
    from trtspec.quality.render import report_table
    from trtspec.quality.report import JSON_NAME

    torch.set_num_threads(1)
    make_hf_model("llama", tmp_path / "hf", **{**TINY, "vocab_size": 1001}, num_hidden_layers=2)
    save_tiny_tokenizer(tmp_path / "hf")
    write_prompts(tmp_path / "chat.jsonl", 6)
    chat = f"chat={tmp_path / 'chat.jsonl'}"
    r = run("quantize", quantize_command, "--hf", tmp_path / "hf", "--format", "fp8", "--kv-cache", "fp8",
            "--calib", chat, "--calib-samples", 3, "--calib-seq-len", 32, "--exclude", "*.0.mlp.proj,*.1.mlp.gate",
            "--out", tmp_path / "out", "--report-workloads", chat, "--report-samples", 2, "--report-max-new-tokens", 4)
    assert r.exit_code == 0, r.output + repr(r.exception)
    want = ["transformer.layers.0.mlp.proj", "transformer.layers.1.mlp.fc", "transformer.layers.1.mlp.gate"]
    mixed = json.loads((tmp_path / "out" / "trtspec.json").read_text())["options"]["mixed_precision"]
    assert mixed["excluded_linears"] == want and mixed["exclude_patterns"] == ["*.0.mlp.proj", "*.1.mlp.gate"]
    assert (mixed["excluded_gemms"], mixed["total_gemms"], mixed["keep_sensitive"], mixed["sensitivity"]) == \
        (2, 8, 0, None)
    report = json.loads((tmp_path / "out" / "quant_report" / JSON_NAME).read_text())
    assert report["quantized"]["mixed_precision"]["excluded_linears"] == want
    assert set(want) <= set(report["quantized"]["quantization"]["exclude_modules"])
    assert "2/8 GEMMs unquantized" in report_table(report).title

    r = run("quantize", quantize_command, "--hf", tmp_path / "hf", "--draft", tmp_path / "hf", "--format", "fp8",
            "--calib", chat, "--keep-sensitive", 2, "--out", tmp_path / "pair", "--no-report")
    assert isinstance(r.exception, TrtspecError) and "plain decoder only" in str(r.exception)
