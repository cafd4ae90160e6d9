"""The runtime on quantized TRT-LLM checkpoints against ModelOpt's fake-quant model, the oracle we
did not write.

One tiny random Llama (hidden 128, so INT4-AWQ's group of 128 fits) is calibrated with ModelOpt
per format (FP8, FP8 + FP8 KV, INT8 SmoothQuant, INT8 SmoothQuant + INT8 KV, INT4-AWQ) and exported
with `export_tensorrt_llm_checkpoint`, the same format `trtspec quantize` writes. ModelOpt's export
forces float16 for a float32 model ("not fully compatible with TensorRT-LLM"), so the embeddings,
norms and lm_head of the model are rounded to float16 beforehand: that export is then lossless for
them, and every difference left is quantization numerics. The linear weights stay float32, so
weights never sit exactly on a rounding tie, where ModelOpt's fake quant (w * (448 / amax)) and its
own export (w / (amax / 448)) can round differently.

The export rewrites the model in place (q/k/v and gate/up share one amax, SmoothQuant/AWQ scales
are averaged and the weights resmoothed), so the oracle is the fake-quant model *after* export.

What TRT-LLM runs differs from the fake-quant model in the precision of a few parameters, and the
runtime emulates TRT-LLM (runtime/quant.py). `as_trtllm_uses_them` gives the oracle those precisions:
FP8 scales cast to the model dtype (FP8Linear), smoothing / pre-quant scales as the checkpoint stores
them (float16), AWQ scales cast to float16 at build, the weights of linears kept unquantized
(mixed precision) as stored (float16), one KV scale per attention = max(k, v) and, for
FP8, at least 1.0 (ModelOpt's export clamps it). With those, runtime and oracle compute the same
quantized values; what is left is float32 arithmetic order (ModelOpt multiplies by 448 / amax where
TensorRT divides by the scale), which moves a value across a rounding boundary only when it is within
an ulp of it. Each such flip changes one activation by one FP8/INT8 step; measured, a handful of them
move a logit by < 4e-3 and the mean by < 2e-5 (often exactly 0). Hence MAX_DIFF = 2e-2 and
MEAN_DIFF = 2e-4. A numerics error is far above both: the unaligned oracle (scales in float32, as
ModelOpt fake-quantizes) is 0.16-0.57 away (mean 0.02-0.08), and dropping the KV quantization moves
the logits by more than 0.1 (see the controls below).

The format pieces checked without this oracle, and the checkpoints `trtspec quantize` writes, are
in test_quant_formats.py.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from runtime.test_batch_invariant import all_accepted
from runtime.test_quant_formats import _with_config
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.errors import TrtspecError
from trtspec.runtime.draft_target import generate_draft_target
from trtspec.runtime.greedy import generate_greedy
from trtspec.runtime.model import Decoder

FORMATS = ("fp8", "fp8_kv", "int8_sq", "int8_sq_kv", "w4a16_awq")
V = 1000
MAX_DIFF, MEAN_DIFF = 2e-2, 2e-4
HALF_ULP16 = 2.0 ** -11  # relative rounding of a float32 scale cast to float16


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=V, max_position_embeddings=256,
                      architectures=["LlamaForCausalLM"])
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(4.0)  # random init gives nearly flat logits; see tiny_models.py
            if "embed" in name or "norm" in name or "lm_head" in name:
                p.copy_(p.half().float())  # exported as float16: make that lossless
    return model


def modelopt_config(fmt: str) -> dict:
    import modelopt.torch.quantization as mtq

    base = {"fp8": mtq.FP8_DEFAULT_CFG, "int8_sq": mtq.INT8_SMOOTHQUANT_CFG,
            "w4a16_awq": mtq.INT4_AWQ_CFG}[fmt.removesuffix("_kv")]
    cfg = copy.deepcopy(base)
    if fmt == "fp8_kv":  # what ModelOpt's FP8_KV_CFG adds: the k/v bmm quantizers
        cfg["quant_cfg"] = list(cfg["quant_cfg"]) + list(mtq.FP8_KV_CFG["quant_cfg"])
    if fmt == "int8_sq_kv":
        cfg["quant_cfg"] = list(cfg["quant_cfg"]) + [
            {"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": 8, "axis": None}}]
    return cfg


def quantized_linears(model) -> list[tuple[str, torch.nn.Module]]:
    return [(n, m) for n, m in model.named_modules()
            if hasattr(m, "weight_quantizer") and hasattr(m, "input_quantizer") and ".layers." in n]


@torch.no_grad()
def as_trtllm_uses_them(model, fmt: str):
    """A copy of the fake-quant model whose scales have the precision TRT-LLM uses (module docstring).
    The quantized codes stay the oracle's own; only the scales they are multiplied by change."""
    model = copy.deepcopy(model)
    half = (lambda t: t.half().float())
    for _, lin in quantized_linears(model):
        iq, wq = lin.input_quantizer, lin.weight_quantizer
        if not wq.is_enabled:  # kept in the model dtype (mixed precision): the checkpoint's float16 weight
            lin.weight.copy_(half(lin.weight))
            continue
        if fmt.startswith("fp8"):  # FP8Linear: cast(activation/weights_scaling_factor, model dtype)
            iq.amax = half(iq.amax.float() / 448) * 448
            s = wq.amax.float() / 448
            lin.weight.copy_(wq(lin.weight) * half(s) / s)
            wq.disable()
        if getattr(iq, "_pre_quant_scale", None) is not None:  # prequant_scaling_factor is stored in float16
            iq.pre_quant_scale = half(iq.pre_quant_scale)
        if fmt == "w4a16_awq":  # build casts weights_scaling_factor to the model dtype
            s = (wq.amax.float() / 7).reshape(lin.weight.shape[0], -1)
            lin.weight.copy_(wq(lin.weight) * (half(s) / s).repeat_interleave(128, dim=1))
            wq.disable()
    for layer in model.model.layers:  # one kv_cache_scaling_factor: max(k, v), FP8 clamped to >= 1
        a = layer.self_attn
        if a.k_bmm_quantizer.is_enabled:
            bound = 448.0 if fmt.startswith("fp8") else 127.0
            s = torch.maximum(a.k_bmm_quantizer.amax, a.v_bmm_quantizer.amax).float() / bound
            s = s.clamp(min=1.0) if fmt.startswith("fp8") else s
            a.k_bmm_quantizer.amax = s * bound
            a.v_bmm_quantizer.amax = s * bound
    return model


@dataclass
class Calibrated:
    fmt: str
    model: torch.nn.Module  # ModelOpt's fake-quant model, after export
    ckpt: Path
    fp32: torch.nn.Module  # the same model, unquantized
    prompts: torch.Tensor  # [3, 24]
    cache: dict = field(default_factory=dict)

    def logits(self, model) -> torch.Tensor:
        with torch.no_grad():
            return model(self.prompts).logits

    def ours(self, dec: Decoder | None = None) -> torch.Tensor:
        dec = dec or self.decoder()
        out, _ = dec.forward(self.prompts, dec.new_cache(*self.prompts.shape))
        return out[..., :V]  # AWQ export pads the vocabulary to a multiple of 64 (zero rows)

    def decoder(self) -> Decoder:
        return Decoder(load_checkpoint(self.ckpt))

    def oracle(self) -> torch.Tensor:
        if "oracle" not in self.cache:
            self.cache["oracle"] = self.logits(as_trtllm_uses_them(self.model, self.fmt))
        return self.cache["oracle"]


@pytest.fixture(scope="module")
def base_model():
    return tiny_llama()


@pytest.fixture(scope="module", params=FORMATS)
def calibrated(request, base_model, tmp_path_factory) -> Calibrated:
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    torch.set_num_threads(1)
    fmt = request.param
    g = torch.Generator().manual_seed(1)
    calib = [torch.randint(0, V, (2, 32), generator=g) for _ in range(4)]
    model = mtq.quantize(copy.deepcopy(base_model), modelopt_config(fmt), lambda m: [m(b) for b in calib])
    out = tmp_path_factory.mktemp(fmt) / "ckpt"
    export_tensorrt_llm_checkpoint(model, "llama", torch.float16, export_dir=str(out), inference_tensor_parallel=1)
    return Calibrated(fmt, model, out, base_model, torch.randint(0, V, (3, 24), generator=g))


def test_logits_match_fake_quant(calibrated):
    c = calibrated
    ours, oracle, raw, fp32 = c.ours(), c.oracle(), c.logits(c.model), c.logits(c.fp32)
    d = (ours - oracle).abs()
    assert oracle.std() > 0.5 and (raw - fp32).abs().max() > 0.2  # logits with signal; quantization visible
    assert d.max() < MAX_DIFF and d.mean() < MEAN_DIFF, (d.max().item(), d.mean().item())
    # top-1 agrees wherever the oracle's top-2 margin exceeds the tolerance (ties are not a test)
    top2 = oracle.topk(2, dim=-1).values
    decided = (top2[..., 0] - top2[..., 1]) > 2 * d.max()
    assert decided.float().mean() > 0.8
    assert torch.equal(ours.argmax(-1)[decided], oracle.argmax(-1)[decided])


@torch.no_grad()
def test_dequantized_weights_match_fake_quant_weights(calibrated):
    """W = codes x scale equals ModelOpt's quantizer(weight); FP8 and AWQ scales are used at float16
    precision by TRT-LLM (relative change <= 2^-11), SmoothQuant's are float32 (ulps only)."""
    c = calibrated
    dec = c.decoder()
    rtol = 1e-6 if c.fmt.startswith("int8_sq") else HALF_ULP16 * 1.01
    for i, layer in enumerate(c.model.model.layers):
        a, m, w = layer.self_attn, layer.mlp, dec.layers[i]
        for mods, lin in (([a.q_proj, a.k_proj, a.v_proj], w.qkv), ([a.o_proj], w.dense),
                          ([m.gate_proj], w.fc), ([m.up_proj], w.gate), ([m.down_proj], w.proj)):
            want = torch.cat([mod.weight_quantizer(mod.weight) for mod in mods])
            assert not torch.equal(want, torch.cat([mod.weight for mod in mods]))  # it did quantize
            assert ((lin.weight - want).abs() <= rtol * want.abs() + 1e-7).all()


def test_checkpoint_reader_returns_stored_tensors(calibrated):
    """At tp=1 `tensor(name)` is the rank file's tensor: quantized payloads keep their dtype."""
    ckpt = load_checkpoint(calibrated.ckpt)
    stored = load_file(str(calibrated.ckpt / "rank0.safetensors"))
    for name, t in stored.items():
        got = ckpt.tensor(name)
        assert got.dtype == t.dtype and got.shape == t.shape, name
        assert torch.equal(got.view(torch.uint8), t.view(torch.uint8)), name
    payload = {"fp8": torch.float8_e4m3fn, "int8_sq": torch.int8, "w4a16_awq": torch.int8}
    assert stored["transformer.layers.1.mlp.proj.weight"].dtype == payload[calibrated.fmt.removesuffix("_kv")]


@pytest.mark.parametrize("calibrated", ["fp8_kv", "int8_sq_kv"], indirect=True)
def test_kv_cache_quantization_is_applied(calibrated):
    """Control for the logits test: without the KV quantization the runtime leaves the oracle's
    tolerance; the oracle without its k/v quantizers matches that runtime instead."""
    c = calibrated
    dec = c.decoder()
    assert [w.kv.kind for w in dec.layers] == ["FP8" if c.fmt == "fp8_kv" else "INT8"] * 2
    for w in dec.layers:
        w.kv = None
    without = c.ours(dec)
    assert (without - c.oracle()).abs().max() > 0.1
    oracle = as_trtllm_uses_them(c.model, c.fmt)
    for layer in oracle.model.layers:
        layer.self_attn.k_bmm_quantizer.disable()
        layer.self_attn.v_bmm_quantizer.disable()
    d = (without - c.logits(oracle)).abs()
    assert d.max() < MAX_DIFF and d.mean() < MEAN_DIFF


def test_quantized_target_as_its_own_draft(calibrated, k=3):
    """Greedy decoding of the quantized checkpoint is self-consistent: with itself as the draft every
    token is accepted (AL = K + 1) and the output is its greedy output, although the draft runs T=1
    steps and the target verifies blocks of K + 1."""
    target, draft = calibrated.decoder(), calibrated.decoder()
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (5, 11, 1)]
    new = 25
    greedy = [r.output_ids for r in generate_greedy(target, prompts, new)]
    assert all(len(set(o)) > 3 for o in greedy)
    out = generate_draft_target(target, draft, prompts, new, k)
    assert [r.output_ids for r in out] == greedy
    for r in out:
        assert r.stats.acceptance_length == pytest.approx(all_accepted(new, k))
        assert r.stats.target_calls == 1 + math.ceil((new - 1) / (k + 1))


# --- Format pieces on the calibrated FP8 checkpoint (the others: test_quant_formats.py) -------------

@pytest.mark.parametrize("calibrated", ["fp8"], indirect=True)
def test_excluded_modules_stay_float(calibrated, tmp_path):
    """exclude_modules (fnmatch on TRT-LLM module names) keeps a linear unquantized; a quantized
    module whose weight is a float is then an error, not a silent float read."""
    dec = calibrated.decoder()
    assert dec.scheme.quantizes("transformer.layers.0.mlp.proj") and not dec.scheme.quantizes("lm_head")
    assert dec.layers[0].proj.act_quant == "fp8"
    bad = _with_config(calibrated.ckpt, tmp_path / "x", exclude_modules=["lm_head", "*.mlp.proj"])
    with pytest.raises(TrtspecError, match="'transformer.layers.0.mlp.proj.weight' is float8_e4m3fn; the runtime "
                                           "reads it as a float tensor"):
        Decoder(load_checkpoint(bad))


@pytest.mark.parametrize("calibrated", ["fp8"], indirect=True)
def test_fp8_fc_and_gate_are_requantized_to_one_scale(calibrated, tmp_path):
    """trtllm-build fuses mlp.gate and mlp.fc into one FP8 GEMM (fuse_gate_mlp): both weights are
    requantized with the larger weight scale, and the larger activation scale quantizes the input.
    ModelOpt's export already gives them one amax; here the gate's scales are made 2x / 3x larger."""
    src = calibrated.ckpt
    t = load_file(str(src / "rank0.safetensors"))
    fc, gate = "transformer.layers.0.mlp.fc.", "transformer.layers.0.mlp.gate."
    s, a = t[fc + "weights_scaling_factor"], t[fc + "activation_scaling_factor"]
    t[gate + "weight"] = (t[gate + "weight"].float() / 2).to(torch.float8_e4m3fn)
    t[gate + "weights_scaling_factor"], t[gate + "activation_scaling_factor"] = 2 * s, 3 * a
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text((src / "config.json").read_text())
    from safetensors.torch import save_file
    save_file(t, str(d / "rank0.safetensors"))

    w = Decoder(load_checkpoint(d)).layers[0]
    half = (lambda x: x.half().float())
    assert torch.equal(w.fc.act_scale, half(3 * a)) and torch.equal(w.gate.act_scale, half(3 * a))
    for lin in (w.fc, w.gate):
        codes = lin.weight / half(2 * s)
        assert torch.equal(codes.to(torch.float8_e4m3fn).float(), codes)  # on the FP8 grid of 2 s
    assert torch.equal(w.gate.weight, t[gate + "weight"].float() * half(2 * s))  # already on that grid
    before = t[fc + "weight"].float() * half(s)
    assert not torch.equal(w.fc.weight, before) and torch.allclose(w.fc.weight, before, rtol=2 ** -3, atol=1e-3)


def test_mixed_checkpoint_matches_fake_quant(base_model, tmp_path):
    """Mixed precision: ModelOpt quantizes with some linears' quantizers disabled and its export
    lists them in exclude_modules (float16 weights, no scales); the runtime runs those linears in
    float and the rest in FP8, and the FP8 KV cache everywhere.

    Compared with the KV quantizers off on both sides the logits agree as tightly as the uniform
    formats do. With them on, layer 1's K/V come from an unquantized qkv at KV scale 1.0 (the
    floor), so FP8 steps are as coarse as 0.25-0.5 there and a 1-ulp float difference between the
    two implementations (RoPE order) flips a couple of K codes, moving the logits of the few
    positions that attend to them (measured: 2 flips, 0.16 max); the rest stay within tolerance.
    Control: the same model fully quantized is far away."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    torch.set_num_threads(1)
    cfg = modelopt_config("fp8_kv")
    cfg["quant_cfg"] += [{"quantizer_name": "model.layers.0.mlp.down_proj.*", "enable": False},
                         {"quantizer_name": "model.layers.1.self_attn.[qkv]_proj.*", "enable": False}]
    g = torch.Generator().manual_seed(1)
    calib = [torch.randint(0, V, (2, 32), generator=g) for _ in range(4)]
    model = mtq.quantize(copy.deepcopy(base_model), cfg, lambda m: [m(b) for b in calib])
    export_tensorrt_llm_checkpoint(model, "llama", torch.float16, export_dir=str(tmp_path), inference_tensor_parallel=1)
    c = Calibrated("fp8_kv", model, tmp_path, base_model, torch.randint(0, V, (3, 24), generator=g))
    dec = c.decoder()
    assert dec.layers[0].proj.act_quant is None and dec.layers[1].qkv.act_quant is None
    assert dec.layers[0].dense.act_quant == dec.layers[1].proj.act_quant == "fp8"
    assert all(w.kv is not None for w in dec.layers)
    assert torch.equal(dec.layers[0].proj.weight, base_model.model.layers[0].mlp.down_proj.weight.half().float())
    oracle = c.oracle()
    close = ((c.ours(dec) - oracle).abs() < MAX_DIFF).all(dim=-1)
    assert close.float().mean() > 0.9, close
    full = mtq.quantize(copy.deepcopy(base_model), modelopt_config("fp8_kv"), lambda m: [m(b) for b in calib])
    assert (c.logits(as_trtllm_uses_them(full, "fp8_kv")) - oracle).abs().max() > 10 * MAX_DIFF

    for w in dec.layers:
        w.kv = None
    no_kv = as_trtllm_uses_them(model, "fp8_kv")
    for layer in no_kv.model.layers:
        layer.self_attn.k_bmm_quantizer.disable()
        layer.self_attn.v_bmm_quantizer.disable()
    d = (c.ours(dec) - c.logits(no_kv)).abs()
    assert d.max() < MAX_DIFF and d.mean() < MEAN_DIFF, (d.max().item(), d.mean().item())


# --- Tensor parallel: the same calibrated model exported at tp=2 runs exactly like tp=1 -------------

@pytest.mark.parametrize("calibrated", ["fp8", "fp8_kv", "int8_sq", "int8_sq_kv"], indirect=True)
def test_tp2_checkpoint_runs_like_tp1(calibrated, tmp_path):
    """Per-tensor scales are replicated, per-channel ones and SmoothQuant's smoothing of row-parallel
    inputs are split with their weights; merged back, every tensor is the tp=1 tensor, so the logits
    are bit-identical."""
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    export_tensorrt_llm_checkpoint(calibrated.model, "llama", torch.float16, export_dir=str(tmp_path),
                                   inference_tensor_parallel=2)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.tp == 2
    assert torch.equal(calibrated.ours(Decoder(ckpt)), calibrated.ours())


def test_tp2_awq_runs_like_tp1(tmp_path):
    """INT4-AWQ at tp=2 needs each rank's row-parallel input (hidden / 2) to hold whole groups of
    128: hidden 256. Packed int4 row pairs and [out, in / group] scales are split with the weight."""
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_tensorrt_llm_checkpoint
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=V, architectures=["LlamaForCausalLM"])
    g = torch.Generator().manual_seed(1)
    calib = [torch.randint(0, V, (2, 32), generator=g) for _ in range(2)]
    model = mtq.quantize(LlamaForCausalLM(cfg).eval(), mtq.INT4_AWQ_CFG, lambda m: [m(b) for b in calib])
    prompts = torch.randint(0, V, (2, 16), generator=g)
    logits = []
    for tp in (1, 2):
        export_tensorrt_llm_checkpoint(model, "llama", torch.float16, export_dir=str(tmp_path / f"tp{tp}"),
                                       inference_tensor_parallel=tp)
        dec = Decoder(load_checkpoint(tmp_path / f"tp{tp}"))
        logits.append(dec.forward(prompts, dec.new_cache(2, 16))[0][..., :V])
    assert torch.equal(logits[0], logits[1])
