"""Devices of the runtime: the layer placement plan over several devices, a model placed over two
devices computing exactly what one device computes (on two "cpu" devices the same code path runs:
stage boundaries move activations and geometry), and device / dtype errors naming the field."""

from __future__ import annotations

import pytest
import torch

from tiny_models import llama_ckpt
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.errors import TrtspecError
from trtspec.options import from_cli
from trtspec.runtime.device import compute_dtype, resolve
from trtspec.runtime.generate import generate_batch, load_models
from trtspec.runtime.model import Decoder
from trtspec.runtime.options import GenerateOptions
from trtspec.runtime.placement import plan_layers
from trtspec.tuning.options import MeasureConfig, ProfileOptions

CPU = torch.device("cpu")


def test_plan_splits_layers_by_bytes_in_contiguous_runs():
    two = [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert plan_layers([10] * 4, two).stages == (0, 0, 1, 1)
    # the embedding counts on the first device, the head on the last: fewer layers beside them
    assert plan_layers([10] * 8, two, first_extra=40).stages == (0, 0, 1, 1, 1, 1, 1, 1)
    assert plan_layers([10] * 8, two, last_extra=40).stages == (0, 0, 0, 0, 0, 0, 1, 1)
    uneven = plan_layers([1, 1, 1, 30, 1, 1], [torch.device("cuda", i) for i in range(3)])
    assert list(uneven.stages) == sorted(uneven.stages) and uneven.stages[-1] == 2
    assert plan_layers([10] * 3, [CPU]).stages == (0, 0, 0)
    assert plan_layers([10, 10, 20], two).layers == (two[0], two[0], two[1])


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return llama_ckpt(tmp_path_factory.mktemp("placement"))


def test_a_model_placed_over_two_devices_computes_what_one_device_does(ckpt, device):
    one = Decoder(load_checkpoint(ckpt), device=device)
    two = Decoder(load_checkpoint(ckpt), device=[device, device])
    assert set(two.placement.stages) == {0, 1}  # both stages hold layers: a boundary is crossed
    prompt = torch.randint(3, 1001, (2, 9), generator=torch.Generator().manual_seed(0))
    a, ha = one.forward(prompt, one.new_cache(2, 16))
    b, hb = two.forward(prompt, two.new_cache(2, 16))
    assert torch.equal(a, b) and torch.equal(ha, hb)
    prompts = [p[:n] for p, n in zip(prompt.tolist(), (9, 4))]
    from trtspec.runtime.greedy import generate_greedy
    assert [r.output_ids for r in generate_greedy(one, prompts, 12)] == \
        [r.output_ids for r in generate_greedy(two, prompts, 12)]


def test_placed_draft_target_decoding_is_lossless(ckpt):
    """Speculation over a placed model (verify blocks, commits of kept paths on each layer's cache)."""
    plain = load_models(ckpt, tokenizer=False)
    placed = load_models(ckpt, ckpt, tokenizer=False, device="cpu,cpu")
    prompts = [[5, 9, 13], [7, 3, 3, 20, 11]]
    want = [r.output_ids for r in generate_batch(plain, prompts, 16, mode="greedy", ignore_eos=True)]
    got = generate_batch(placed, prompts, 16, mode="draft-target", draft_len=3, ignore_eos=True)
    assert [r.output_ids for r in got] == want
    # the target drafting for itself accepts every draft (the last step counts only what is left)
    assert all(s.accepted == 3 for r in got for s in r.stats.steps[:-1])
    assert all(r.stats.conditional_rates() == [1.0] * 3 for r in got)


def test_bad_devices_and_dtypes_name_the_field():
    for model in (GenerateOptions, ProfileOptions, MeasureConfig):
        with pytest.raises(TrtspecError, match=r"^--device: 'gpu' is not a device"):
            from_cli(model, device="gpu")
        with pytest.raises(TrtspecError, match=r"^--dtype: 'fp8' is not one of"):
            from_cli(model, dtype="fp8")
    assert ProfileOptions(device="cuda:0, cuda:1").device == "cuda:0,cuda:1"
    if not torch.cuda.is_available():
        with pytest.raises(TrtspecError, match=r"^profile\.device: 'cuda' but torch sees no CUDA device"):
            resolve("cuda", "profile.device")
    assert resolve("cpu,cpu") == [CPU, CPU]
    assert compute_dtype(None, [CPU]) == torch.float32
    assert compute_dtype(None, [torch.device("cuda", 0)]) == torch.bfloat16
    assert compute_dtype("float16", [CPU]) == torch.float16


@pytest.mark.parametrize("command", ["generate", "profile", "measure-cost"])
def test_cli_device_errors_are_one_line_naming_the_flag(ckpt, capsys, tmp_path, command):
    from cli_helpers import run_cli

    args = {"generate": ["generate", "--ckpt", ckpt, "--prompt-ids", "[5, 7]"],
            "profile": ["profile", "--ckpt", ckpt, "--workloads", "chat=mt-bench", "--out", tmp_path / "p.json"],
            "measure-cost": ["measure-cost", "--target-ckpt", ckpt, "--out", tmp_path / "cost.json"]}[command]
    code, _, err = run_cli(capsys, *args, "--device", "gpu:0")
    assert code == 2 and err.strip().splitlines() == ["error: --device: 'gpu:0' is not a device (expected cpu, cuda or "
                                                      "cuda:N, comma-separated for several)"]
    if not torch.cuda.is_available():
        code, _, err = run_cli(capsys, *args, "--device", "cuda")
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert err.startswith("error: --device: 'cuda' but torch sees no CUDA device")


@pytest.mark.slow  # torch.compile takes ~1 min here
def test_compiled_layers_compute_what_eager_layers_do(ckpt, device):
    """compile_layers (opt-in): the same logits up to fused-kernel rounding, the same greedy tokens,
    a prefill block and one-token steps of a ragged batch."""
    eager = Decoder(load_checkpoint(ckpt), device=device)
    compiled = Decoder(load_checkpoint(ckpt), device=device)
    compiled.compile_layers()
    prompt = torch.randint(3, 1001, (2, 9), generator=torch.Generator().manual_seed(0))
    a, _ = eager.forward(prompt, eager.new_cache(2, 16))
    b, _ = compiled.forward(prompt, compiled.new_cache(2, 16))
    assert (a - b).abs().max().item() < 1e-4 and a.std() > 0.1
    from trtspec.runtime.greedy import generate_greedy
    prompts = [prompt[0].tolist(), prompt[1, :4].tolist()]
    assert [r.output_ids for r in generate_greedy(eager, prompts, 12)] == \
        [r.output_ids for r in generate_greedy(compiled, prompts, 12)]
