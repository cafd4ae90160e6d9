"""The runtime on ModelOpt unified HF FP8 checkpoints, against ModelOpt's own fake-quant model.

The oracle is the model ModelOpt calibrated (tests/modelopt_direct.py, mtq.quantize with its FP8
recipe), its forward with fake quantization (quantize-dequantize of weights, inputs and K/V):

- `exact`: the fake-quant model with what the deployment runs put into it: the checkpoint
  dtype's rounding (float16; RoPE frequencies are no checkpoint tensor and stay float32), the
  weights as the PyTorch backend loads them, and for an FP8 KV cache the backend's KV scale 1.0
  (its K/V amax set to 448). Then only the arithmetic differs: logits agree to ATOL and greedy
  tokens are identical. The weights come from the runtime loader (fused q/k/v and gate/up
  requantized to the larger scale, as the backend does); that step is checked on its own by
  test_fused_requantization against the checkpoint.
- `raw`: the calibrated model before export, as is. The deployment differs from it by design: the
  export quantizes a float16 weight (rounding twice), ModelOpt 0.47 keeps separate q/k/v and
  gate/up weight scales which the backend requantizes to the larger one, and the backend casts K/V
  to FP8 unscaled; on these tiny models (weights scaled x4, logits up to ~3) that moves logits by up
  to RAW_RTOL of their range.
"""

from __future__ import annotations

import pytest
import torch

import modelopt_direct
from tiny_models import make_hf_model
from trtspec.calib.hf_export import quantize_hf_unified
from trtspec.calib.quantize import CalibOptions
from trtspec.checkpoints.hf_unified import load_hf_unified
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.runtime.model import Decoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ATOL = 1e-5  # exact: float32 summation order only (logits up to ~3; measured <= 1.5e-6)
RAW_RTOL = 0.2  # raw: max |diff| / max |logit|, measured 0.069-0.129 on these models


def prompts(n: int, length: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 1000, (length,), generator=g).tolist() for _ in range(n)]


def calibrated(hf, kv):
    return modelopt_direct.calibrated(hf, prompts(4, 24, 0), kv_fp8=kv == "fp8")


as_deployed = modelopt_direct.as_deployed


@pytest.fixture(scope="module", params=[("llama", None), ("llama", "fp8"), ("qwen2", "fp8"), ("qwen2", None)], ids=str)
def case(request, tmp_path_factory):
    family, kv = request.param
    root = tmp_path_factory.mktemp(f"hf-{family}-{kv}")
    make_hf_model(family, root / "hf")
    quantize_hf_unified(root / "hf", root / "out", CalibOptions(prompts=prompts(4, 24, 0), samples=4, seq_len=64),
                        "fp8", kv)
    return root, kv


def runtime_logits(dec: Decoder, ids: list[int]) -> torch.Tensor:
    logits, _ = dec.forward(torch.tensor([ids]), dec.new_cache(1, 64))
    return logits[0]


def test_logits_match_fake_quant_as_deployed(case):
    root, kv = case
    dec = Decoder(load_hf_unified(root / "out"))
    ref = as_deployed(calibrated(root / "hf", kv), dec, kv)
    diffs = []
    for ids in prompts(3, 16, 1):
        with torch.no_grad():
            want = ref(torch.tensor([ids])).logits[0]
        diffs.append((runtime_logits(dec, ids) - want).abs().amax(dim=-1))
    assert torch.cat(diffs).max().item() < ATOL


def test_greedy_tokens_match_fake_quant_as_deployed(case):
    root, kv = case
    ref = as_deployed(calibrated(root / "hf", kv), Decoder(load_hf_unified(root / "out")), kv)
    starts = prompts(3, 8, 2)
    got = [r.output_ids for r in generate_batch(load_models(root / "out", tokenizer=False), starts, 10,
                                                mode="greedy", ignore_eos=True)]
    for seq, out in zip(starts, got):
        seq = list(seq)
        with torch.no_grad():
            for _ in range(10):
                seq.append(int(ref(torch.tensor([seq])).logits[0, -1].argmax()))
        assert list(out) == seq[8:]


def test_logits_near_calibrated_model_before_export(case):
    root, kv = case
    ref, dec = calibrated(root / "hf", kv), Decoder(load_hf_unified(root / "out"))
    for ids in prompts(3, 16, 1):
        with torch.no_grad():
            want = ref(torch.tensor([ids])).logits[0]
        rel = (runtime_logits(dec, ids) - want).abs().max().item() / want.abs().max().item()
        assert rel < RAW_RTOL


def test_fused_requantization(case):
    """q/k/v (and gate/up) share the larger weight scale; the part that owns it keeps its FP8
    codes, the others are requantized onto the coarser grid: within half a step of their value."""
    root, _ = case
    ckpt = load_hf_unified(root / "out")
    lw, spec = Decoder(ckpt).layers[0], ckpt.spec
    q, k = spec.num_heads * spec.head_size, spec.num_kv_heads * spec.head_size
    names = [f"model.layers.0.self_attn.{n}" for n in ("q_proj", "k_proj", "v_proj")]
    scales = [ckpt.tensor(n + ".weight_scale").float() for n in names]
    top = max(scales)
    assert len(set(s.item() for s in scales)) > 1  # ModelOpt 0.47 keeps them apart: the case is exercised
    for n, s, w in zip(names, scales, lw.qkv.weight.split([q, k, k])):
        own = ckpt.tensor(n + ".weight").view(torch.float8_e4m3fn).float() * s
        codes = w / top
        assert torch.equal(codes.to(torch.float8_e4m3fn).float(), codes)  # on the FP8 grid of the larger scale
        if s == top:
            assert torch.equal(w, own)
        else:
            step = (codes.abs().clamp(min=2 ** -6) * 2 ** -3) * top  # e4m3: 3 mantissa bits
            assert ((w - own).abs() <= step / 2 + 1e-7).all()
    assert lw.qkv.act_scale.item() == max(ckpt.tensor(n + ".input_scale").item() for n in names)


def test_draft_target_on_hf_target_is_lossless(case, tmp_path):
    """Speculation with the unified HF FP8 checkpoint as the target (a float32 conversion of the same
    model drafts): batch-invariant greedy output equals the target's plain greedy output."""
    from trtspec.checkpoints.convert import convert_hf

    root, _ = case
    convert_hf(root / "hf", tmp_path / "draft", dtype="float32")
    models = load_models(root / "out", tmp_path / "draft", tokenizer=False)
    starts = prompts(3, 8, 3)
    plain = generate_batch(models, starts, 12, mode="greedy", ignore_eos=True)
    spec = generate_batch(models, starts, 12, mode="draft-target", draft_len=3, ignore_eos=True, batch_invariant=True)
    assert [r.output_ids for r in spec] == [r.output_ids for r in plain]
