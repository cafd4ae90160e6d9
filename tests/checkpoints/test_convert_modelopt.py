"""Our converter against an oracle we did not write: ModelOpt's `export_tensorrt_llm_checkpoint`
on the same (unquantized) transformers model. Tensors must be bit-identical, rank by rank."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from tiny_models import FAMILIES, make_hf_model
from trtspec.checkpoints.convert import convert_hf

# Keys TRT-LLM's PretrainedConfig/LLaMAConfig/QWenConfig read that both writers emit.
SHARED_KEYS = (
    "architecture", "dtype", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_size", "intermediate_size", "hidden_act", "norm_epsilon",
    "position_embedding_type", "max_position_embeddings", "rotary_base", "use_parallel_embedding",
    "embedding_sharding_dim", "mapping", "quantization",
)


@pytest.fixture(scope="module")
def export_trtllm():
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    return export_tensorrt_llm_checkpoint


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("family", FAMILIES)
def test_tensors_and_config_equal_modelopt_export(tmp_path, export_trtllm, family, tp):
    # one kv head at tp 2 exercises kv-head duplication; vocab 1001 exercises vocab padding
    model = make_hf_model(family, tmp_path / "hf", num_key_value_heads=1 if tp == 2 else 2)
    convert_hf(tmp_path / "hf", tmp_path / "ours", dtype="float16", tp=tp)
    decoder = "qwen" if family.startswith("qwen") else "llama"
    export_trtllm(model, decoder, torch.float16, export_dir=str(tmp_path / "modelopt"),
                  inference_tensor_parallel=tp)

    for r in range(tp):
        ours = safe_open(tmp_path / "ours" / f"rank{r}.safetensors", "pt")
        theirs = safe_open(tmp_path / "modelopt" / f"rank{r}.safetensors", "pt")
        assert sorted(ours.keys()) == sorted(theirs.keys())
        for name in theirs.keys():
            a, b = ours.get_tensor(name), theirs.get_tensor(name)
            assert (a.dtype, a.shape) == (b.dtype, b.shape), name
            assert torch.equal(a, b), f"rank{r} {name} differs"

    ours_cfg = json.loads((tmp_path / "ours" / "config.json").read_text())
    theirs_cfg = json.loads((tmp_path / "modelopt" / "config.json").read_text())
    for key in SHARED_KEYS:
        assert ours_cfg[key] == theirs_cfg[key], key
    # RoPE scaling: ours is ModelOpt's dict plus the "type" key older TRT-LLM versions read.
    if theirs_cfg.get("rotary_scaling"):
        extra = {k: v for k, v in ours_cfg["rotary_scaling"].items() if k not in theirs_cfg["rotary_scaling"]}
        assert extra == {"type": theirs_cfg["rotary_scaling"]["rope_type"]}
    else:
        assert ours_cfg["rotary_scaling"] is None
    # Deliberate differences: logits in float32 (TRT-LLM's default; ModelOpt writes the model
    # dtype), and Qwen's `qwen_type`, which ModelOpt omits but QWenConfig needs to pick qwen2/qwen3.
    assert ours_cfg["logits_dtype"] == "float32"
    if family.startswith("qwen"):
        assert ours_cfg["qwen_type"] == family
    # Only the mapping keys every TRT-LLM version accepts.
    assert set(ours_cfg["mapping"]) == {"world_size", "tp_size", "pp_size"}
