"""FP8 linears run as real FP8 GEMMs (torch._scaled_mm) or as the quantize-dequantize emulation.

torch's CPU _scaled_mm multiplies in float32, so on CPU the GEMM and the emulation compute the same
quantized operands and differ only by float32 summation order: they are compared tightly here, on
one linear and on tiny FP8 checkpoints of both formats (TRT-LLM and ModelOpt unified HF). On a CUDA
GPU with FP8 tensor cores `auto` picks the GEMM; that variant runs only where one is present.
"""

from __future__ import annotations

import json

import pytest
import torch

from tiny_models import make_hf_model
from trtspec.calib.quantize import CalibOptions, quantize_hf
from trtspec.errors import TrtspecError
from trtspec.runtime import quant
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.runtime.quant import Fp8Weight, Linear, set_fp8_gemm

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CUDA_FP8 = torch.cuda.is_available() and quant.scaled_mm_capable(torch.device("cuda"))


def fp8_linear(out: int, inp: int, seed: int = 0, bias: bool = True) -> tuple[Linear, torch.Tensor]:
    """A random FP8 linear as the loaders build it, and its float weight before quantization."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, inp, generator=g) * 0.1
    ws = (w.abs().max() / quant.FP8_MAX).reshape(1)
    w8 = (w / ws).to(torch.float8_e4m3fn)
    b = torch.randn(out, generator=g) * 0.1 if bias else None
    lin = Linear(w8.float() * ws, b, act_quant="fp8", act_scale=torch.tensor([0.02]), fp8=Fp8Weight(w8, ws))
    return lin, w


def inputs(inp: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(2, 5, inp, generator=torch.Generator().manual_seed(seed))


def run(lin: Linear, x: torch.Tensor, mode: str) -> torch.Tensor:
    set_fp8_gemm([lin], mode)
    return lin(x)


@pytest.fixture
def count_scaled_mm(monkeypatch):
    calls = []
    real = torch._scaled_mm

    def counted(*args, **kwargs):
        calls.append(args[1].shape)
        return real(*args, **kwargs)
    monkeypatch.setattr(torch, "_scaled_mm", counted)
    return calls


def test_scaled_mm_equals_the_emulation_and_approximates_the_float_gemm(count_scaled_mm):
    lin, w = fp8_linear(48, 64)
    x = inputs(64)
    gemm, emulated = run(lin, x, "scaled_mm"), run(lin, x, "emulate")
    assert len(count_scaled_mm) == 1 and gemm.shape == (2, 5, 48)
    assert (gemm - emulated).abs().max().item() < 1e-5
    exact = torch.nn.functional.linear(x, w, lin.bias)
    err = (gemm - exact).abs().max().item()
    assert 1e-4 < err < 0.05 * exact.abs().max().item()  # FP8 rounding is there, and small


def test_activations_saturate_at_fp8_max():
    lin, _ = fp8_linear(16, 32, bias=False)
    x = torch.full((1, 32), 1e4)  # x / s = 5e5, far beyond 448
    want = quant.FP8_MAX * lin.act_scale * lin.weight.sum(dim=1)
    assert torch.allclose(run(lin, x, "scaled_mm")[0], want, rtol=1e-5, atol=1e-5)


def test_auto_emulates_off_cuda(count_scaled_mm):
    lin, _ = fp8_linear(48, 64)
    x = inputs(64)
    assert torch.equal(run(lin, x, "auto"), run(lin, x, "emulate"))
    assert count_scaled_mm == []


@pytest.mark.parametrize("shape", [(40, 64), (48, 24)])
def test_dims_scaled_mm_refuses_fall_back_to_the_emulation(shape, count_scaled_mm):
    lin, _ = fp8_linear(*shape)
    x = inputs(shape[1])
    assert torch.equal(run(lin, x, "scaled_mm"), run(lin, x, "emulate"))
    assert count_scaled_mm == []


def test_bfloat16_output():
    lin, _ = fp8_linear(48, 64)
    lin.weight, lin.bias = lin.weight.bfloat16(), lin.bias.bfloat16()
    x = inputs(64).bfloat16()
    gemm, emulated = run(lin, x, "scaled_mm"), run(lin, x, "emulate")
    assert gemm.dtype == torch.bfloat16
    assert (gemm.float() - emulated.float()).abs().max().item() < 2e-2  # bf16 rounding of W and y


def test_unknown_mode_is_refused_by_field_name():
    with pytest.raises(TrtspecError, match="fp8_gemm: 'fast' is not one of auto, scaled_mm, emulate"):
        set_fp8_gemm([], "fast")


@pytest.fixture(scope="module")
def fp8_checkpoints(tmp_path_factory):
    """A tiny Llama whose MLP (intermediate 72) does not fit _scaled_mm and whose attention does,
    quantized to FP8 in both checkpoint formats."""
    from trtspec.calib.hf_export import quantize_hf_unified

    d = tmp_path_factory.mktemp("fp8_gemm")
    make_hf_model("llama", d / "hf", intermediate_size=72)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 1001, (24,), generator=g).tolist() for _ in range(4)]
    quantize_hf(d / "hf", d / "trtllm", fmt="fp8", calib=CalibOptions(prompts=prompts))
    quantize_hf_unified(d / "hf", d / "unified", CalibOptions(prompts=prompts, samples=4, seq_len=64), "fp8", None)
    return d


@pytest.mark.parametrize("fmt", ["trtllm", "unified"])
def test_fp8_checkpoint_decodes_alike_with_either_gemm(fp8_checkpoints, fmt, count_scaled_mm):
    prompts = [[5, 9, 13, 200, 7], [400, 3, 3, 12]]
    runs = {}
    for mode in ("emulate", "scaled_mm"):
        models = load_models(fp8_checkpoints / fmt, tokenizer=False, fp8_gemm=mode)
        assert all(lin.fp8 is not None for lin in models.linears())
        out = generate_batch(models, prompts, 12, ignore_eos=True)
        logits, _ = models.target.forward(torch.tensor([prompts[0]]), models.target.new_cache(1, 16))
        runs[mode] = ([r.output_ids for r in out], logits)
    assert runs["scaled_mm"][0] == runs["emulate"][0]
    assert (runs["scaled_mm"][1] - runs["emulate"][1]).abs().max().item() < 1e-4
    shapes = {tuple(s) for s in count_scaled_mm}
    assert shapes == {(64, 128), (64, 64)}  # qkv and o_proj (as W^T); the 72-wide MLP fell back


@pytest.mark.skipif(not CUDA_FP8, reason="needs a CUDA GPU with FP8 tensor cores (compute capability >= 8.9)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_auto_runs_fp8_gemms_on_cuda(dtype, count_scaled_mm):
    lin, _ = fp8_linear(256, 512)
    lin.weight, lin.bias, lin.act_scale = lin.weight.to("cuda", dtype), lin.bias.to("cuda", dtype), lin.act_scale.cuda()
    x = inputs(512).to("cuda", dtype)
    gemm, emulated = run(lin, x, "auto"), run(lin, x, "emulate")
    assert len(count_scaled_mm) == 1 and gemm.dtype == dtype and gemm.is_cuda
    tol = 1e-3 if dtype == torch.float32 else 5e-2
    assert (gemm.float() - emulated.float()).abs().max().item() < tol


def test_generate_flag_reaches_the_linears(fp8_checkpoints, capsys, count_scaled_mm):
    from cli_helpers import run_cli

    outs = {}
    for mode in ("emulate", "scaled_mm"):
        code, out, err = run_cli(capsys, "generate", "--ckpt", fp8_checkpoints / "trtllm", "--prompt-ids", "[5, 9, 13]",
                                 "--max-new-tokens", 4, "--ignore-eos", "--fp8-gemm", mode, "--json")
        assert code == 0, err
        outs[mode] = json.loads(out)["output_ids"]
        assert bool(count_scaled_mm) == (mode == "scaled_mm")
    assert outs["emulate"] == outs["scaled_mm"]


@pytest.mark.parametrize("command", ["generate", "profile"])
def test_a_bad_mode_is_refused_by_flag(command, capsys):
    from cli_helpers import run_cli

    args = ["--ckpt", "x", "--prompt-ids", "[1]"] if command == "generate" else \
        ["--ckpt", "x", "--workloads", "chat=mt-bench", "--out", "p.json"]
    code, out, err = run_cli(capsys, command, *args, "--fp8-gemm", "fast")
    assert code != 0 and "--fp8-gemm: Input should be 'auto', 'scaled_mm' or 'emulate'" in out + err


@pytest.mark.skipif(not CUDA_FP8, reason="needs a CUDA GPU with FP8 tensor cores (compute capability >= 8.9)")
@pytest.mark.parametrize("fmt", ["trtllm", "unified"])
def test_auto_decodes_fp8_checkpoints_with_fp8_gemms_on_cuda(fp8_checkpoints, fmt, count_scaled_mm):
    """The runtime on the GPU (load_models(device=...), the runtime's device option) in float32: auto
    picks the FP8 GEMMs, and they agree with the emulation on the same device."""
    prompt, runs = [5, 9, 13, 200, 7], {}
    for mode in ("emulate", "auto"):
        models = load_models(fp8_checkpoints / fmt, tokenizer=False, device="cuda", fp8_gemm=mode)
        logits, _ = models.target.forward(torch.tensor([prompt]), models.target.new_cache(1, 16))
        runs[mode] = logits.float().cpu()
        assert bool(count_scaled_mm) == (mode == "auto")
    assert (runs["auto"] - runs["emulate"]).abs().max().item() < 1e-3
