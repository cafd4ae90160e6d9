"""The pipeline-parallel layer split (upstream.trtllm pp_layers / pp_stage) against the expression
TensorRT-LLM evaluates (tensorrt_llm/mapping.py MappingBase.pp_layers @b35ac1b6, 1.2.0rc2)."""

from __future__ import annotations

import pytest
import torch

from trtspec.upstream import trtllm


@pytest.mark.parametrize("num_layers, pp", [(32, 2), (31, 2), (10, 4), (3, 3), (80, 3)])
def test_pp_layers_is_upstreams_tensor_split(num_layers, pp):
    for stage in range(pp):
        upstream = torch.tensor_split(torch.arange(num_layers), pp)[stage].tolist()
        assert list(trtllm.pp_layers(num_layers, pp, stage)) == upstream


def test_the_first_stages_take_the_extra_layers():
    assert [len(trtllm.pp_layers(10, 4, s)) for s in range(4)] == [3, 3, 2, 2]
    assert trtllm.pp_layers(31, 2, 1) == range(16, 31)


def test_a_rank_is_on_stage_rank_over_tp():
    """MpiTopology.pp_rank: tp 2, pp 2 -> ranks 0, 1 on stage 0 and ranks 2, 3 on stage 1."""
    assert [trtllm.pp_stage(r, 2) for r in range(4)] == [0, 0, 1, 1]
