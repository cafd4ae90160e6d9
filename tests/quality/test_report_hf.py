"""The quality report on a ModelOpt unified HF FP8 checkpoint (output_format hf): the same
metrics against the unquantized conversion, the quantization recorded with the checkpoint format
and the numerics the runtime ran, the identical-checkpoint control, and the acceptance of a draft
pair whose target is the HF checkpoint."""

from __future__ import annotations

import pytest
import torch

from tiny_models import make_hf_model
from trtspec.calib.hf_export import quantize_hf_unified
from trtspec.calib.quantize import CalibOptions
from trtspec.checkpoints.convert import convert_hf
from trtspec.quality.report import quality_report
from trtspec.runtime.hf_weights import NUMERICS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_report")
    make_hf_model("llama", root / "hf")
    g = torch.Generator().manual_seed(0)
    calib = [torch.randint(3, 1000, (24,), generator=g).tolist() for _ in range(4)]
    quantize_hf_unified(root / "hf", root / "fp8", CalibOptions(prompts=calib, samples=4), "fp8", "fp8")
    convert_hf(root / "hf", root / "ref", dtype="float32")
    return root


def token_prompts(n=3):
    return {"ids": [(f"s{i}", [1] + list(range(10 + 50 * i, 30 + 50 * i))) for i in range(n)]}


def test_report_on_hf_checkpoint(ckpts, tmp_path):
    rep = quality_report(ckpts / "fp8", ckpts / "ref", [], tmp_path / "q", draft_ckpt=ckpts / "ref",
                         max_new_tokens=6, prompts=token_prompts(), max_k=2)
    q = rep["quantized"]["quantization"]
    assert (q["quant_algo"], q["kv_cache_quant_algo"], q["checkpoint_format"]) == ("FP8", "FP8", "modelopt-hf")
    assert q["runtime_numerics"] == NUMERICS
    w = rep["workloads"]["ids"]
    assert 0 < w["logit_rmse"] < 1 and 0 < w["top1_agreement"] <= 1
    assert w["acceptance"] is not None and set(w["acceptance"]["delta_by_k"]) == {"1", "2"}
    ctl = quality_report(ckpts / "fp8", ckpts / "fp8", [], None, max_new_tokens=6, prompts=token_prompts())
    assert ctl["workloads"]["ids"]["logit_rmse"] == 0 and ctl["workloads"]["ids"]["top1_agreement"] == 1
