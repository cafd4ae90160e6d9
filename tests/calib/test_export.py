"""The quantized exporter against an oracle we did not write: ModelOpt's own
`export_tensorrt_llm_checkpoint` on the same calibrated model, tensor by tensor, at tp 1 and 2.

Each tiny Llama is calibrated once per module (one `mtq.quantize` per format); our exporter runs
first, ModelOpt's second (its export mutates the model: it re-smooths fused q/k/v weights in place).

Values are compared bit for bit, FP8 ones as bytes. They are exact, not just within one FP8 step:
both exporters divide the same float32 weight by the same float32 scale and round with torch's
`.to(float8_e4m3fn)` (FP8), `round().clamp()` (INT8, INT4), and our re-smoothing of q/k/v (mean of
the smoothing factors, w * s / mean in float32, amax measured again) is ModelOpt's arithmetic. The
one name difference is by design: ModelOpt also writes legacy per-K/V scales
(`attention.{k,v}_cache_scaling_factor`) next to the merged `kv_cache_scaling_factor` TRT-LLM 1.2
reads; we write only the merged one, which must equal max(k, v) of theirs.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from tiny_models import make_eagle_head, make_hf_model
from trtspec.upstream import trtllm
from trtspec.upstream.modelopt import LEGACY_KV_SCALE_SUFFIXES
from trtspec.calib.data import token_id_set
from trtspec.calib.formats import check_format
from trtspec.calib.pipeline import calibrate_decoder, write_quantized_decoder
from trtspec.calib.quantize import CalibOptions, quantize_eagle
from trtspec.checkpoints.convert import prepare_decoder
from trtspec.checkpoints.scheme import QuantScheme
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.checkpoints.validate import validate_checkpoint

# Keys of our plain converter's config that ModelOpt writes with the same meaning.
SHARED_KEYS = (
    "architecture", "dtype", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_size", "intermediate_size", "hidden_act", "norm_epsilon",
    "position_embedding_type", "max_position_embeddings", "rotary_base", "use_parallel_embedding",
    "embedding_sharding_dim", "mapping",
)
# (family, format, KV algo, model overrides). AWQ needs in_features >= 256: ModelOpt's export also
# checks a *column* linear's input dim per rank against the group size (128), which TP does not split.
# Qwen2 adds a qkv bias and tied embeddings, Qwen3 q/k norms and an explicit head size.
CASES = {
    "fp8": ("llama", "fp8", None, {}),
    "fp8+kv": ("llama", "fp8", "FP8", {}),
    "int8_sq": ("llama", "int8_sq", None, {}),
    "int8_sq+int8kv": ("llama", "int8_sq", "INT8", {}),
    "w4a16_awq": ("llama", "w4a16_awq", None, dict(hidden_size=256, vocab_size=1024)),
    "qwen2-fp8+kv": ("qwen2", "fp8", "FP8", {}),
    "qwen3-int8_sq": ("qwen3", "int8_sq", None, dict(head_dim=32)),
}
TINY = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)


def prompts(n: int = 6, length: int = 32, vocab: int = 1000, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (length,), generator=g).tolist() for _ in range(n)]


def calibrated_exports(root, fmt: str, kv: str | None, tps=(1, 2), family: str = "llama", **overrides):
    """Calibrate once; write ours at each tp, then ModelOpt's. Returns {tp: (ours, theirs)}."""
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    torch.set_num_threads(1)
    model_kw = {**TINY, **overrides}
    make_hf_model(family, root / "hf", **model_kw)
    qfmt = check_format(fmt)
    layout = QuantScheme(qfmt.quant_algo, kv, trtllm.AWQ_DEFAULT_GROUP_SIZE)
    cal = calibrate_decoder(root / "hf", qfmt, layout, token_id_set(prompts(vocab=model_kw["vocab_size"])))
    dirs = {}
    for tp in tps:
        ours = root / f"ours_tp{tp}"
        ours.mkdir()
        write_quantized_decoder(prepare_decoder(root / "hf", "float16", tp), ours, qfmt, layout, cal)
        dirs[tp] = (ours, root / f"modelopt_tp{tp}")
    for tp in tps:
        export_tensorrt_llm_checkpoint(cal.model, "qwen" if family.startswith("qwen") else "llama", torch.float16,
                                       export_dir=str(dirs[tp][1]), inference_tensor_parallel=tp)
    return dirs


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    family, fmt, kv, overrides = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param.replace("+", "_"))
    return request.param, calibrated_exports(root, fmt, kv, family=family, **overrides)


def assert_same_tensors(ours, theirs, tp: int) -> None:
    for r in range(tp):
        a = safe_open(ours / f"rank{r}.safetensors", "pt")
        b = safe_open(theirs / f"rank{r}.safetensors", "pt")
        legacy = {n for n in b.keys() if n.endswith(LEGACY_KV_SCALE_SUFFIXES)}
        assert sorted(a.keys()) == sorted(set(b.keys()) - legacy), f"rank{r} tensor names"
        for name in a.keys():
            x, y = a.get_tensor(name), b.get_tensor(name)
            assert (x.dtype, x.shape) == (y.dtype, y.shape), f"rank{r} {name}"
            if x.dtype == torch.float8_e4m3fn:
                x, y = x.view(torch.uint8), y.view(torch.uint8)
            assert torch.equal(x, y), f"rank{r} {name} differs"
        for name in legacy:
            if name.endswith("k_cache_scaling_factor"):
                merged = name.replace("k_cache_scaling_factor", "kv_cache_scaling_factor")
                k, v = b.get_tensor(name), b.get_tensor(name.replace("k_cache", "v_cache"))
                assert torch.equal(a.get_tensor(merged), torch.maximum(k, v)), merged


@pytest.mark.parametrize("tp", [1, 2])
def test_tensors_equal_modelopt_export(case, tp):
    name, dirs = case
    ours, theirs = dirs[tp]
    assert_same_tensors(ours, theirs, tp)
    ours_cfg = json.loads((ours / "config.json").read_text())
    theirs_cfg = json.loads((theirs / "config.json").read_text())
    for key in SHARED_KEYS:
        assert ours_cfg[key] == theirs_cfg[key], key
    q, tq = ours_cfg["quantization"], theirs_cfg["quantization"]
    assert set(q) <= set(trtllm.QUANT_CONFIG_KEYS)  # QuantConfig(**q) must not raise
    for key in set(tq) - {"exclude_modules"}:
        assert q[key] == tq[key], key
    # ModelOpt writes ["lm_head"], which replaces TRT-LLM's defaults; ours restates them.
    assert set(q["exclude_modules"]) >= {"lm_head", "*lm_head", "*vocab_embedding"} | set(tq["exclude_modules"])
    validate_checkpoint(ours)
    validate_checkpoint(theirs)  # the self-check reads ModelOpt's quantized layout too


def test_tp_split_merges_back(case):
    """The reader's merge (shard_for + merge) undoes the writer's split for every quantized tensor."""
    _, dirs = case
    one, two = load_checkpoint(dirs[1][0]), load_checkpoint(dirs[2][0])
    assert sorted(one.names()) == sorted(two.names())
    for name in one.names():
        a, b = one.tensor(name), two.tensor(name)
        if a.dtype == torch.float8_e4m3fn:
            a, b = a.view(torch.uint8), b.view(torch.uint8)
        assert torch.equal(a, b), name


def test_layout_per_format(case):
    """Dtypes and shapes of §3 (tp 1), for one linear of each kind."""
    name, dirs = case
    if name.startswith("qwen"):
        pytest.skip("one layout check per format (on the Llama cases)")
    f = safe_open(dirs[1][0] / "rank0.safetensors", "pt")
    H = 256 if name == "w4a16_awq" else 128
    t = {k: f.get_tensor(k) for k in f.keys()}
    qkv, proj = "transformer.layers.0.attention.qkv.", "transformer.layers.0.mlp.proj."
    assert t["lm_head.weight"].dtype == t["transformer.vocab_embedding.weight"].dtype == torch.float16
    if name.startswith("fp8"):
        assert t[qkv + "weight"].dtype == torch.float8_e4m3fn
        assert t[qkv + "weights_scaling_factor"].shape == t[qkv + "activation_scaling_factor"].shape == (1,)
        fc, gate = "transformer.layers.0.mlp.fc.", "transformer.layers.0.mlp.gate."  # one GEMM at build time
        assert torch.equal(t[fc + "weights_scaling_factor"], t[gate + "weights_scaling_factor"])
    elif name.startswith("int8_sq"):
        assert t[qkv + "weight"].dtype == torch.int8
        assert t[qkv + "weights_scaling_factor"].shape == (t[qkv + "weight"].shape[0],)
        assert t[proj + "prequant_scaling_factor"].dtype == torch.float16
        assert t[proj + "prequant_scaling_factor"].shape == (256,)
    else:
        qkv_out = (4 + 2 * 2) * (H // 4)  # 4 heads, 2 kv heads
        assert t[qkv + "weight"].dtype == torch.int8 and t[qkv + "weight"].shape == (qkv_out // 2, H)  # int4 pairs
        assert t[qkv + "weights_scaling_factor"].dtype == torch.float32  # what ModelOpt ships
        assert t[qkv + "weights_scaling_factor"].shape == (qkv_out, H // 128)
        assert t[proj + "weights_scaling_factor"].shape == (H, 256 // 128)
    kv = "transformer.layers.0.attention.kv_cache_scaling_factor"
    assert (kv in t) == ("kv" in name)
    if name == "fp8+kv":
        assert t[kv].dtype == torch.float32 and t[kv].shape == (1,) and t[kv].item() >= 1.0  # ModelOpt's floor


def test_fp8_duplicated_kv_heads_equal_modelopt(tmp_path):
    """One kv head at tp 2: k/v rows are duplicated per rank, scales replicate."""
    dirs = calibrated_exports(tmp_path, "fp8", "FP8", tps=(2,), num_key_value_heads=1)
    assert_same_tensors(*dirs[2], 2)


# ---- EAGLE -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def eagle_fp8(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("eagle")
    make_hf_model("llama", root / "hf", **TINY)
    make_eagle_head(root / "hf", root / "head", num_layers=2, with_fc_bias=False)
    quantize_eagle(root / "hf", root / "head", root / "ckpt", "fp8", "fp8", CalibOptions(prompts=prompts()),
                   dtype="float16", tp=2, num_eagle_layers=3)
    return root


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_eagle_calibration_matches_cpu(eagle_fp8):
    """The EAGLE head calibrated on CUDA (its positions, features and ids on the device) writes the
    CPU run's weights bit for bit and its activation scales up to float summation order."""
    root = eagle_fp8
    quantize_eagle(root / "hf", root / "head", root / "ckpt_cuda", "fp8", "fp8",
                   CalibOptions(prompts=prompts(), device="cuda"), dtype="float16", tp=2, num_eagle_layers=3)
    from safetensors.torch import load_file

    for rank in (0, 1):
        cpu, gpu = (load_file(root / d / f"rank{rank}.safetensors") for d in ("ckpt", "ckpt_cuda"))
        assert cpu.keys() == gpu.keys()
        for k in cpu:
            if k.endswith(".weight") or k.endswith("weights_scaling_factor"):
                assert torch.equal(cpu[k].view(torch.uint8), gpu[k].view(torch.uint8)), k
            elif k.endswith("scaling_factor"):
                assert torch.allclose(cpu[k].float(), gpu[k].float(), rtol=1e-3), k


def test_eagle_fp8_head_is_quantized_with_kv_scales(eagle_fp8):
    ckpt = validate_checkpoint(eagle_fp8 / "ckpt")
    cfg = ckpt.config
    assert cfg["quantization"]["quant_algo"] == "FP8" and cfg["quantization"]["kv_cache_quant_algo"] == "FP8"
    assert cfg["eagle_net_config"]["quantization"] == cfg["quantization"]
    assert {"lm_head", "*lm_head", "eagle_nets.*.lm_head"} <= set(cfg["quantization"]["exclude_modules"])
    linears = ["drafter.fc"] + [f"drafter.layers.{j}.{m}" for j in range(2)
                                for m in ("attention.qkv", "attention.dense", "mlp.fc", "mlp.gate", "mlp.proj")]
    for i in range(3):
        p = f"eagle_nets.{i}."
        for lin in linears:
            assert ckpt.tensor(p + lin + ".weight").dtype == torch.float8_e4m3fn, p + lin
            for s in ("weights_scaling_factor", "activation_scaling_factor"):
                scale = ckpt.tensor(p + lin + "." + s)
                assert scale.dtype == torch.float32 and scale.shape == (1,) and scale.item() > 0
                assert torch.equal(scale, ckpt.tensor("eagle_nets.0." + lin + "." + s))  # identical clones
        for j in range(2):
            kv = ckpt.tensor(f"{p}drafter.layers.{j}.attention.kv_cache_scaling_factor")
            assert kv.dtype == torch.float32 and kv.shape == (1,)
        assert ckpt.tensor(p + "lm_head.weight").dtype == torch.float16
        assert ckpt.tensor(p + "drafter.vocab_embedding.weight").dtype == torch.float16
    assert ckpt.tensor("lm_head.weight").dtype == torch.float16


def test_eagle_fc_calibrated_on_base_features(eagle_fp8):
    """The head's fc input scale is max |cat(embed(x[1:]), base_hidden[:-1])| / 448 over the prompts."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    ckpt = load_checkpoint(eagle_fp8 / "ckpt")
    base = AutoModelForCausalLM.from_pretrained(str(eagle_fp8 / "hf"), dtype=torch.float32).eval()
    embed = load_file(str(eagle_fp8 / "head" / "model.safetensors"))["embed_tokens.weight"]
    amax = torch.tensor(0.0)
    with torch.no_grad():
        for ids in prompts():
            x = torch.tensor([ids])
            hidden = base.model(input_ids=x).last_hidden_state[0]
            amax = torch.maximum(amax, torch.cat([embed[x[0, 1:]], hidden[:-1]], dim=-1).abs().max())
    scale = ckpt.tensor("eagle_nets.0.drafter.fc.activation_scaling_factor")
    torch.testing.assert_close(scale, (amax / 448).reshape(1), rtol=1e-6, atol=0)
    manifest = json.loads((eagle_fp8 / "ckpt" / "trtspec.json").read_text())
    assert manifest["options"]["zero_fc_bias"] and manifest["options"]["calibration"]["calibrated"]


# ---- draft-target pairs ------------------------------------------------------------------------

@pytest.mark.parametrize("draft_format, draft_algo", [("same", "FP8"), ("int8_sq", "W8A8_SQ_PER_CHANNEL"),
                                                      ("none", None)])
def test_pair_quantized_independently(tmp_path, draft_format, draft_algo):
    from tiny_models import save_tiny_tokenizer
    from trtspec.calib.quantize import quantize_pair

    torch.set_num_threads(1)
    for name, seed, layers in (("target", 0, 2), ("draft", 1, 1)):
        make_hf_model("llama", tmp_path / name, seed=seed, **{**TINY, "vocab_size": 1001, "num_hidden_layers": layers})
        save_tiny_tokenizer(tmp_path / name)
    quantize_pair(tmp_path / "target", tmp_path / "draft", tmp_path / "pair", "fp8", "fp8", draft_format,
                  CalibOptions(prompts=prompts()), dtype="float16", tp=2)
    target = validate_checkpoint(tmp_path / "pair" / "target")
    draft = validate_checkpoint(tmp_path / "pair" / "draft")
    assert (target.quant_algo, target.kv_cache_quant_algo) == ("FP8", "FP8")
    assert (draft.quant_algo, draft.kv_cache_quant_algo) == (draft_algo, "FP8" if draft_algo else None)
    manifest = json.loads((tmp_path / "pair" / "trtspec.json").read_text())
    assert manifest["kind"] == "draft-target-pair"
    assert manifest["options"]["draft_format"] == ("fp8" if draft_format == "same" else draft_format)
    if draft_algo:  # both calibrated on the same prompts
        ids = [json.loads((tmp_path / "pair" / m / "trtspec.json").read_text())["options"]["calibration"]["sources"]
               for m in ("target", "draft")]
        assert ids[0] == ids[1]
