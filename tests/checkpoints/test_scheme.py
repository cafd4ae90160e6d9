"""One quantization scheme and one checkpoint view, shared by the validator, runtime, planner and Triton."""

from __future__ import annotations

import json

import pytest

from tiny_models import make_eagle_head, make_hf_model
from trtspec.builders.memory import checkpoint_weight_bytes
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.scheme import QuantScheme
from trtspec.checkpoints.trtllm_ckpt import checkpoint_from_config, load_checkpoint
from trtspec.errors import TrtspecError
from trtspec.runtime.quant import scheme_of
from trtspec.tuning.quant_bytes import quant_bytes
from trtspec.upstream import trtllm


def test_null_exclude_modules_means_trtllm_defaults():
    s = QuantScheme.from_block({"quant_algo": "FP8", "exclude_modules": None}, "cfg")
    assert s.exclude == trtllm.DEFAULT_EXCLUDE_MODULES
    assert s.is_excluded("lm_head") and s.is_excluded("eagle_nets.3.lm_head")
    assert s.is_excluded("transformer.vocab_embedding")
    assert s.quantizes("transformer.layers.0.mlp.fc") and not s.quantizes("lm_head")


def test_an_explicit_list_replaces_the_defaults():
    s = QuantScheme.from_block({"quant_algo": "FP8", "exclude_modules": ["transformer.layers.0.*"]}, "cfg")
    assert s.is_excluded("transformer.layers.0.mlp.fc") and not s.is_excluded("transformer.layers.1.mlp.fc")
    assert not s.is_excluded("lm_head")  # TRT-LLM quantizes it: the defaults no longer apply
    assert s.is_excluded("x") is False and s.quantizes("lm_head")


def test_matching_is_case_sensitive_fnmatch_on_the_full_name():
    s = QuantScheme.from_block({"quant_algo": "FP8", "exclude_modules": ["*mlp.FC", "layers.0.*"]}, "cfg")
    assert not s.is_excluded("transformer.layers.0.mlp.fc")  # neither a case-folded nor a suffix match
    assert s.is_excluded("layers.0.attention.qkv")


def test_no_weight_format_quantizes_nothing():
    s = QuantScheme.from_block({"kv_cache_quant_algo": "FP8"}, "cfg")
    assert s.quantized and not s.quantizes("transformer.layers.0.mlp.fc")
    assert not QuantScheme.from_block(None, "cfg").quantized


@pytest.mark.parametrize("block, needle", [
    (["FP8"], "cfg: field 'quantization' must be an object"),
    ({"quant_algo": 8}, "cfg: quantization.quant_algo: expected a QuantAlgo name or null"),
    ({"kv_cache_quant_algo": ["FP8"]}, "cfg: quantization.kv_cache_quant_algo:"),
    ({"exclude_modules": "lm_head"}, "cfg: quantization.exclude_modules must be a list"),
    ({"group_size": "big"}, "cfg: quantization.group_size: expected an integer"),
    ({"pre_quant_scale": "yes"}, "cfg: quantization.pre_quant_scale: expected true, false or null"),
])
def test_parse_errors_name_the_field(block, needle):
    with pytest.raises(TrtspecError) as e:
        QuantScheme.from_block(block, "cfg")
    assert needle in str(e.value)


def test_check_written_refuses_what_trtspec_does_not_write():
    QuantScheme.from_block({"quant_algo": "W8A8_SQ_PER_TENSOR_PLUGIN"}, "cfg")  # parses: the planner takes it
    with pytest.raises(TrtspecError, match="quant_algo='W8A8_SQ_PER_TENSOR_PLUGIN' is not one trtspec writes"):
        QuantScheme.from_block({"quant_algo": "W8A8_SQ_PER_TENSOR_PLUGIN"}, "cfg").check_written("cfg")
    with pytest.raises(TrtspecError, match="quantization.producer is not a TensorRT-LLM QuantConfig field"):
        QuantScheme.from_block({"producer": "x"}, "cfg").check_written("cfg")


@pytest.fixture(scope="module")
def eagle_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("scheme")
    make_hf_model("llama", d / "hf")
    make_eagle_head(d / "hf", d / "head", num_layers=1)
    convert_eagle(d / "hf", d / "head", d / "ckpt", dtype="float16", tp=2, num_eagle_layers=2)
    return d / "ckpt"


def test_the_config_view_is_the_loaded_view_without_tensors(eagle_ckpt):
    loaded = load_checkpoint(eagle_ckpt)
    view = checkpoint_from_config(json.loads((eagle_ckpt / "config.json").read_text()), eagle_ckpt)
    assert (view.spec, view.eagle_spec, view.quant, view.tp, view.pp) == \
        (loaded.spec, loaded.eagle_spec, loaded.quant, loaded.tp, loaded.pp)
    assert view.ranks == [] and len(loaded.ranks) == 2 and loaded.eagle_spec.architecture == "LlamaForCausalLM"
    assert checkpoint_weight_bytes(view) == checkpoint_weight_bytes(loaded)


def test_every_stage_reads_the_same_scheme(tmp_path):
    make_hf_model("llama", tmp_path / "hf")
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float16")
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    cfg["quantization"] = {"quant_algo": "W8A16", "exclude_modules": ["transformer.layers.0.*"]}
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(cfg))
    ckpt = load_checkpoint(tmp_path / "ckpt")
    assert scheme_of(ckpt) is ckpt.quant  # the runtime checks support and keeps the parsed scheme
    # lm_head is not excluded by the explicit list: the planner counts it at 8 bits, the cost model too
    kept = {**cfg["quantization"], "exclude_modules": ["transformer.layers.0.*", "lm_head"]}
    head_kept = checkpoint_from_config({**cfg, "quantization": kept}, tmp_path / "ckpt")
    assert checkpoint_weight_bytes(head_kept) - checkpoint_weight_bytes(ckpt) == \
        ckpt.spec.vocab_size * ckpt.spec.hidden_size  # 2 bytes -> 1 byte per lm_head weight
    assert quant_bytes(cfg["quantization"], "float16", "lm_head", "cfg")["lm_head_bytes"] == 1.0
    assert quant_bytes(kept, "float16", "lm_head", "cfg")["lm_head_bytes"] == 2.0


@pytest.mark.parametrize("value", [64.9, "128", 0, -64, True, [64]])
def test_group_size_is_typed_not_truncated(tmp_path, value):
    """A non-integer group_size is one error naming the field, never int()-truncated (64.9 -> 64)
    or parsed from a string; the checkpoint view (every stage's reader) refuses it the same way."""
    with pytest.raises(TrtspecError) as e:
        QuantScheme.from_block({"quant_algo": "W4A16_AWQ", "group_size": value}, "cfg")
    assert str(e.value) == f"cfg: quantization.group_size: expected an integer >= 1 (input channels per scale), " \
                           f"got {value!r}"
    make_hf_model("llama", tmp_path / "hf")
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float16")
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    cfg["quantization"] = {"quant_algo": "W4A16_AWQ", "group_size": value}
    with pytest.raises(TrtspecError, match=r"config\.json: quantization\.group_size: expected an integer >= 1"):
        checkpoint_from_config(cfg, tmp_path / "ckpt")


@pytest.mark.parametrize("value, group", [(64, 64), (64.0, 64), (None, trtllm.AWQ_DEFAULT_GROUP_SIZE)])
def test_group_size_accepts_integers_and_defaults_when_absent(value, group):
    block = {"quant_algo": "W4A16_AWQ", **({} if value is None else {"group_size": value})}
    assert QuantScheme.from_block(block, "cfg").group_size == group
    assert QuantScheme.from_block({**block, "group_size": None}, "cfg").group_size == trtllm.AWQ_DEFAULT_GROUP_SIZE
