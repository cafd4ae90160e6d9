"""EAGLE-3 head layouts (trtspec/checkpoints/eagle3.py): ModelOpt's export and the SafeAILab
reference layout load to the same tensors; anything else gets one line naming what is wrong."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tiny_models import make_hf_model, modelopt_eagle3
from trtspec.checkpoints.eagle3 import load_eagle3_head
from trtspec.checkpoints.spec import spec_from_hf
from trtspec.errors import TrtspecError
from trtspec.upstream import trtllm

pytestmark = pytest.mark.usefixtures("one_torch_thread")
V, DRAFT_V = 48, 40


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    d = tmp_path_factory.mktemp("eagle3_heads")
    make_hf_model("llama", d / "hf", num_hidden_layers=8, vocab_size=V)
    modelopt_eagle3(d / "hf", d / "modelopt", draft_vocab=DRAFT_V)
    return d, spec_from_hf(d / "hf")


def variant(heads, name, tensors=None, config=None, drop=()):
    """A copy of the ModelOpt export with tensors renamed/replaced/dropped and config keys changed."""
    d, _ = heads
    out = d / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    t = load_file(d / "modelopt" / "model.safetensors")
    t = {k: v for k, v in {**t, **(tensors or {})}.items() if k not in drop}
    save_file({k: v.contiguous() for k, v in t.items()}, out / "model.safetensors")
    cfg = json.loads((d / "modelopt" / "config.json").read_text())
    for k, v in (config or {}).items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def safeailab(heads, name="safeailab"):
    """The SafeAILab EAGLE-3 layout: `midlayer.*`, a `t2d` mask, no eagle_config (TRT-LLM's default
    capture applies)."""
    t = load_file(heads[0] / "modelopt" / "model.safetensors")
    ids = torch.arange(DRAFT_V) + t["d2t"]
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[ids] = True
    renamed = {k.replace("layers.0.", "midlayer."): v for k, v in t.items() if k.startswith("layers.0.")}
    return variant(heads, name, {**renamed, "t2d": t2d}, {"eagle_config": None},
                   drop=[k for k in t if k.startswith("layers.0.")])


def test_modelopts_export_loads(heads):
    d, target = heads
    head = load_eagle3_head(d / "modelopt", target)
    assert head.layout == "modelopt"
    assert head.aux_layers == (1, 3, 4)  # eagle_config.eagle_aux_hidden_state_layer_ids
    assert head.draft_vocab == DRAFT_V and head.spec.num_layers == 1
    assert head.tensors["fc.weight"].shape == (64, 3 * 64)
    assert "midlayer.hidden_norm.weight" in head.tensors  # TensorRT-LLM's names
    ids = head.draft_to_target
    assert ids.tolist() == sorted(set(ids.tolist())) and int(ids.max()) < V


@pytest.mark.parametrize("archs", [[], "LlamaForCausalLMEagle3"])
def test_a_head_without_an_architectures_list_still_loads(heads, archs):
    """`architectures` only labels the head (null is dropped by variant, so the field is absent)."""
    d, target = heads
    for name, value in (("archs_absent", None), ("archs_odd", archs)):
        head = load_eagle3_head(variant(heads, name, config={"architectures": value}), target)
        assert head.spec.architecture == "?" and head.draft_vocab == DRAFT_V


def test_safeailab_layout_loads_to_the_same_tensors(heads):
    d, target = heads
    ours, theirs = load_eagle3_head(safeailab(heads), target), load_eagle3_head(d / "modelopt", target)
    assert ours.layout == "safeailab"
    assert ours.aux_layers == trtllm.eagle3_default_capture(8) == (1, 3, 4)
    assert ours.tensors.keys() == theirs.tensors.keys()  # t2d is not read, as in TensorRT-LLM
    assert all(torch.equal(ours.tensors[k], theirs.tensors[k]) for k in ours.tensors)


def test_a_full_vocabulary_head_may_use_the_targets_lm_head(heads):
    d, target = heads
    lm = torch.randn(V, 64)
    head = load_eagle3_head(variant(heads, "full", {"lm_head.weight": lm}, {"draft_vocab_size": V},
                                    drop=["d2t"]), target)
    assert head.draft_vocab == V and head.draft_to_target.tolist() == list(range(V))
    no_lm = load_eagle3_head(variant(heads, "no_lm", {}, {"draft_vocab_size": V}, drop=["d2t", "lm_head.weight"]), target)
    assert "lm_head.weight" not in no_lm.tensors  # the runtime then uses the target's


BROKEN = [
    ("no_d2t", {}, {}, ["d2t"], "missing tensor 'd2t'"),
    ("fc_2h", {"fc.weight": torch.zeros(64, 128)}, {}, [], "tensor 'fc.weight' has shape [64, 128], expected [64, 192]"),
    ("unknown", {"medusa_heads.0.weight": torch.zeros(2)}, {}, [], "unexpected tensor 'medusa_heads.0.weight'"),
    ("no_norm", {}, {}, ["norm.weight"], "missing tensor 'norm.weight'"),
    ("no_hidden_norm", {}, {}, ["layers.0.hidden_norm.weight"], "missing tensor 'layers.0.hidden_norm.weight'"),
    ("two_layers", {"layers.1.mlp.up_proj.weight": torch.zeros(96, 64)}, {}, [], "more than one decoder layer"),
    ("bad_d2t", {"d2t": torch.full((DRAFT_V,), 30)}, {}, [], "tensor 'd2t' maps draft ids outside"),
    ("lm_shape", {"lm_head.weight": torch.zeros(DRAFT_V + 1, 64)}, {}, [], "tensor 'lm_head.weight' has shape"),
    ("yarn", {}, {"rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048}},
     [], "field 'rope_scaling' has type 'yarn'"),
    ("aux_range", {}, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 9]}}, [],
     "field 'eagle_config.eagle_aux_hidden_state_layer_ids' is [1, 3, 9]"),
    ("aux_one", {}, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 3]}}, [],
     "expected at least 2 distinct target layers"),
    ("hidden", {}, {"hidden_size": 32}, [], "field 'hidden_size' is 32"),
    ("layers_cfg", {}, {"num_hidden_layers": 2}, [], "field 'num_hidden_layers' is 2"),
    ("switch", {}, {"eagle_config": {"eh_proj_before_attn": True}}, [], "field 'eh_proj_before_attn' is set"),
    # TensorRT-LLM reads fc.bias only with config `bias: true` (upstream.trtllm.EAGLE3_FC_BIAS_KEY)
    ("fc_bias", {"fc.bias": torch.zeros(64)}, {}, [], "field 'bias' is not true, but"),
    ("bias_cfg", {}, {"bias": True}, [], "field 'bias' is true, but"),
    # TensorRT-LLM 1.2 reads draft_vocab_size unconditionally (upstream.trtllm.EAGLE3_DRAFT_VOCAB_KEY)
    ("no_draft_vocab", {}, {"draft_vocab_size": None}, ["d2t", "lm_head.weight"], "missing field 'draft_vocab_size'"),
]


@pytest.mark.parametrize("name,tensors,config,drop,message", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_heads_get_one_line_errors(heads, name, tensors, config, drop, message):
    with pytest.raises(TrtspecError) as e:
        load_eagle3_head(variant(heads, name, tensors, config, drop), heads[1])
    assert message in str(e.value) and "\n" not in str(e.value)
    assert name in str(e.value) or "config.json" in str(e.value)  # names the file


def test_both_layouts_at_once_and_no_config_are_refused(heads):
    mixed = safeailab(heads, "mixed")
    t = load_file(mixed / "model.safetensors")
    save_file({**t, "layers.0.mlp.up_proj.weight": torch.zeros(96, 64)}, mixed / "model.safetensors")
    with pytest.raises(TrtspecError, match="both 'midlayer.\\*' and 'layers.\\*'"):
        load_eagle3_head(mixed, heads[1])
    (mixed / "config.json").unlink()
    with pytest.raises(TrtspecError, match="config.json: missing"):
        load_eagle3_head(mixed, heads[1])


def test_default_capture_needs_six_target_layers(heads, tmp_path):
    make_hf_model("llama", tmp_path / "small", num_hidden_layers=5, vocab_size=V)
    with pytest.raises(TrtspecError, match="default capture needs >= 6"):
        load_eagle3_head(safeailab(heads, "default_small"), spec_from_hf(tmp_path / "small"))


def test_an_fc_bias_declared_in_the_config_is_loaded(heads):
    d, target = heads
    head = load_eagle3_head(variant(heads, "fc_bias_ok", {"fc.bias": torch.full((64,), 0.5)}, {"bias": True}), target)
    assert torch.equal(head.tensors["fc.bias"], torch.full((64,), 0.5))


def test_a_null_draft_vocab_size_means_the_full_vocabulary(heads):
    """1.2 reads the attribute unconditionally and takes null as vocab_size (upstream.trtllm
    EAGLE3_DRAFT_VOCAB_KEY): null loads as a full-vocabulary head, only an absent key is refused."""
    d, target = heads
    out = variant(heads, "null_vocab", {}, {}, drop=["d2t", "lm_head.weight"])
    cfg = json.loads((out / "config.json").read_text())
    cfg["draft_vocab_size"] = None
    (out / "config.json").write_text(json.dumps(cfg))
    assert load_eagle3_head(out, target).draft_vocab == V
