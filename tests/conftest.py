"""Shared fixtures. The SmolLM2 ones build the embedded default model once per machine (about a
minute, cached under $TRTSPEC_CACHE or ~/.cache/trtspec) and are used by `@pytest.mark.slow` tests."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the model hub


@pytest.fixture(scope="session")
def smollm2_hf():
    """HF directory of SmolLM2-135M-Instruct (fp32, tokenizer fixed), built from the packaged GGUF."""
    from trtspec.checkpoints.default_model import smollm2_dir

    return smollm2_dir()


@pytest.fixture(scope="session")
def smollm2_draft_hf(smollm2_hf, tmp_path_factory):
    """A same-tokenizer draft: the first 6 of SmolLM2's 30 layers plus its norm and tied LM head."""
    from trtspec.checkpoints.derive import truncate_layers

    return truncate_layers(smollm2_hf, tmp_path_factory.mktemp("smollm2_draft") / "draft", 6)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Reference decoding in a test process that also runs a server competes for the cores: one
    intra-op thread (several are ~10x slower on a busy 2-core box). Use with
    `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


CUDA_PENDING = pytest.mark.skipif("not __import__('torch').cuda.is_available()",
                                  reason="no CUDA device here: the GPU check is pending")


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=CUDA_PENDING)])
def device(request):
    """The runtime's device for tests that compare it with an oracle (transformers, ModelOpt):
    every such test runs on the CPU, and on CUDA where a GPU is present (skipped otherwise), the
    same code path (trtspec/runtime/device.py)."""
    return request.param
