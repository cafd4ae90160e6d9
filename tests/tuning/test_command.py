"""`trtspec tune` end to end on synthetic profiles: a valid tuning.json, PNG plots and the summary
table, for draft-target and EAGLE (grouped), with the analytic and a measured (fitted) cost model.

The checkpoints are config-only stand-ins with Llama-3.1-8B / Llama-3.2-1B sizes and FP8
quantization (the cost model reads only config.json), so the predictions are realistic.
"""

from __future__ import annotations

import json

import pytest
import torch
import typer
from safetensors.torch import save_file
from typer.testing import CliRunner

from trtspec.errors import TrtspecError
from trtspec.tuning.command import measure_cost_command, tune_command
from trtspec.tuning.cost import forward_time, shapes_from_checkpoint
from trtspec.tuning.gpus import gpu_preset
from trtspec.tuning.fit import CostRow, CostTable, save_cost_table
from trtspec.tuning.schema import dump_json
from trtspec.tuning.tuning_schema import Tuning, load_tuning
from trtspec.tuning.synthetic import chain_profile, eagle_profile, ngram_profile

LLAMA = {"architecture": "LlamaForCausalLM", "dtype": "bfloat16", "vocab_size": 128256, "hidden_size": 4096,
         "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_size": 128,
         "intermediate_size": 14336, "max_position_embeddings": 131072, "rotary_base": 500000.0,
         "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
         "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
DRAFT = {**LLAMA, "hidden_size": 2048, "num_hidden_layers": 16, "head_size": 64, "intermediate_size": 8192}
EAGLE = {**LLAMA, "architecture": "EagleForCausalLM", "num_eagle_layers": 4, "max_draft_len": 63,
         "max_non_leaves_per_layer": 10,
         "eagle_net_config": {**{k: LLAMA[k] for k in LLAMA if k != "quantization"}, "num_hidden_layers": 1,
                              "quantization": {"quant_algo": None, "kv_cache_quant_algo": None}}}


def fake_ckpt(path, config):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file({"placeholder": torch.zeros(1)}, str(path / "rank0.safetensors"))
    return path


@pytest.fixture
def app():
    a = typer.Typer()
    a.command("tune")(tune_command)
    a.command("measure-cost")(measure_cost_command)
    return a


def run(app, args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.output


def check_pngs(plot_dir, names):
    for n in names:
        data = (plot_dir / f"{n}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_tune_draft_target_end_to_end(tmp_path, app):
    target, draft = fake_ckpt(tmp_path / "t", LLAMA), fake_ckpt(tmp_path / "d", DRAFT)
    prof = chain_profile({"chat": 0.55, "code": 0.85, "junk": 0.0}, num_samples=4, T=96, max_k=8,
                         target=str(target), draft=str(draft))
    (tmp_path / "profile.json").write_text(dump_json(prof))
    out = run(app, ["tune", "--profile", tmp_path / "profile.json", "--cost", "h100",
                    "--concurrency-bands", "64,1,8", "--out", tmp_path / "res" / "tuning.json"])
    tuning = load_tuning(tmp_path / "res" / "tuning.json")
    assert tuning.schema_id == "trtspec.tuning/1" and tuning.mode == "draft-target"
    assert tuning.concurrency_bands == [1, 8, 64] and tuning.cost.source == "analytic"
    assert tuning.cost.target.num_layers == 32 and tuning.cost.draft.num_layers == 16
    assert [b.draft_len for b in tuning.workloads["junk"].bands] == [0, 0, 0]
    assert tuning.workloads["code"].bands[0].draft_len >= 3 and tuning.workloads["code"].bands[0].speedup > 1.3
    assert tuning.max_draft_len == max(b.draft_len for w in tuning.workloads.values() for b in w.bands)
    assert tuning.profile["sha256"] and tuning.eagle is None and tuning.profiles is None
    check_pngs(tmp_path / "res" / "tuning_plots", ["chat", "code", "junk"])
    assert "speedup" in out and "code" in out and "wrote" in out
    data = json.loads((tmp_path / "res" / "tuning.json").read_text())
    data["workloads"]["chat"]["bands"][0].pop("speedup")
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(TrtspecError, match=r"bad.json: field 'workloads.chat.bands.0.speedup': Field required"):
        load_tuning(tmp_path / "bad.json")


def test_tune_eagle_grouped_with_a_measured_cost_table(tmp_path, app):
    eagle = fake_ckpt(tmp_path / "eagle", EAGLE)
    prof = eagle_profile({"chat": (0.55, 0.1), "code": (0.8, 0.03), "math": (0.7, 0.05)}, num_samples=4,
                         T=96, depth=4, top_k=10, target=str(eagle))
    (tmp_path / "profile.json").write_text(dump_json(prof))
    shapes = shapes_from_checkpoint(eagle)
    truth = gpu_preset("h100").model_copy(update={"bandwidth_efficiency": 0.7, "forward_overhead_s": 5e-4})
    rows = [CostRow(role=r, batch=b, num_tokens=n, context=512, seconds=forward_time(truth, shapes[r], b, n, 512))
            for r in ("target", "eagle") for b in (1, 16, 128) for n in (1, 8, 32)]
    save_cost_table(CostTable(gpu="h100", rows=rows), tmp_path / "cost.json")
    run(app, ["tune", "--profile", tmp_path / "profile.json", "--cost", tmp_path / "cost.json",
              "--eagle-node-budget", 30, "--max-profiles", 2, "--concurrency-bands", "1,16",
              "--out", tmp_path / "tuning.json", "--plots", tmp_path / "plots"])
    tuning = Tuning.model_validate_json((tmp_path / "tuning.json").read_text())
    assert tuning.cost.source == "measured" and tuning.cost.fit.rms_relative_error < 1e-6
    assert tuning.cost.gpu.bandwidth_efficiency == pytest.approx(0.7, rel=1e-6)
    assert tuning.eagle.num_eagle_layers == 4 and tuning.eagle.node_budget == 30
    for b in (1, 16):
        profiles = [p for p in tuning.profiles if p.concurrency == b]
        assert 1 <= len(profiles) <= 2
        assert sorted(m for p in profiles for m in p.workloads) == ["chat", "code", "math"]
    for w in tuning.workloads.values():
        for band in w.bands:
            if band.eagle_choices:
                assert max(map(len, band.eagle_choices)) == 4 and len(band.eagle_choices) <= 30
    check_pngs(tmp_path / "plots", ["chat", "code", "math"])


def test_speculate_only_if_clear_serves_off_where_the_gain_is_inside_the_al_noise(tmp_path, app):
    """`--speculate-only-if-clear`: chat's small n-gram gain, profiled on 3 prompts x 16 tokens, is
    inside its AL noise, so it is held back and served off, saying why; edit's clear gain is served
    as before; without the flag chat speculates. EAGLE trees refuse it, naming the flag."""
    target = fake_ckpt(tmp_path / "t", LLAMA)
    prof = ngram_profile({"chat": 0.05, "edit": 0.9}, [2], num_samples=3, T=16, max_k=4, target=str(target))
    (tmp_path / "profile.json").write_text(dump_json(prof))
    base = ["tune", "--profile", tmp_path / "profile.json", "--cost", "h100", "--concurrency-bands", "1,64",
            "--no-plots"]
    run(app, base + ["--out", tmp_path / "plain.json"])
    plain = load_tuning(tmp_path / "plain.json")
    out = run(app, base + ["--speculate-only-if-clear", "--out", tmp_path / "clear.json"])
    clear = load_tuning(tmp_path / "clear.json")
    for b, p in zip(clear.workloads["chat"].bands, plain.workloads["chat"].bands):
        assert p.speculate and p.draft_len >= 1  # the plain argmax speculates
        assert (b.speculate, b.draft_len, b.acceptance_length, b.speedup) == (False, 0, 1.0, 1.0)
        assert b.held_off.draft_len == p.draft_len and b.held_off.speedup == p.speedup and b.sweep == p.sweep
    assert clear.workloads["edit"].bands == plain.workloads["edit"].bands
    assert "chat c=1: served off: ngram K=" in out and "not distinguishable from off (tune.speculate_only_if_clear)" in out
    eagle = fake_ckpt(tmp_path / "eagle", EAGLE)
    (tmp_path / "e.json").write_text(dump_json(eagle_profile({"chat": (0.5, 0.1)}, num_samples=2, T=32, depth=4,
                                                              target=str(eagle))))
    with pytest.raises(TrtspecError, match="--speculate-only-if-clear: not for EAGLE trees"):
        run(app, ["tune", "--profile", tmp_path / "e.json", "--speculate-only-if-clear", "--no-plots",
                  "--out", tmp_path / "e_out.json"])


def test_tune_errors(tmp_path, app):
    eagle = fake_ckpt(tmp_path / "eagle", EAGLE)
    prof = eagle_profile({"chat": (0.5, 0.1)}, num_samples=2, T=32, depth=4, target="not/a/dir")
    (tmp_path / "p.json").write_text(dump_json(prof))
    base = ["tune", "--profile", tmp_path / "p.json", "--out", tmp_path / "t.json", "--no-plots"]
    with pytest.raises(TrtspecError, match="--target-ckpt: needed"):
        run(app, base)
    with pytest.raises(TrtspecError, match=r"--eagle-node-budget: 64 is outside \[1, max_draft_len=63\]"):
        run(app, base + ["--target-ckpt", eagle, "--eagle-node-budget", 64])
    with pytest.raises(TrtspecError, match="--concurrency-bands"):
        run(app, base + ["--target-ckpt", eagle, "--concurrency-bands", "1,x"])
    with pytest.raises(TrtspecError, match="--cost: 'a100'"):
        run(app, base + ["--target-ckpt", eagle, "--cost", "a100"])
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(TrtspecError, match="--plots: .* is not a directory of PNG files"):
        run(app, base[:-1] + ["--target-ckpt", eagle, "--plots", tmp_path / "busy"])
    plain = fake_ckpt(tmp_path / "plain", LLAMA)
    with pytest.raises(TrtspecError, match="not an EagleForCausalLM checkpoint"):
        run(app, base + ["--target-ckpt", plain])
    assert not (tmp_path / "t.json").exists()


def test_measure_cost_command(tmp_path, app):
    from tiny_models import make_hf_model
    from trtspec.checkpoints.convert import convert_hf

    make_hf_model("llama", tmp_path / "hf")
    convert_hf(tmp_path / "hf", tmp_path / "ckpt", dtype="float32")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run(app, ["measure-cost", "--target-ckpt", tmp_path / "ckpt", "--batches", "1,2", "--num-tokens", "1,3",
                  "--context", 8, "--repeats", 1, "--out", tmp_path / "cost.json"])
    finally:
        torch.set_num_threads(n)
    table = json.loads((tmp_path / "cost.json").read_text())
    assert table["schema"] == "trtspec.cost-table/1" and len(table["rows"]) == 4


def test_profile_measure_tune_on_real_tiny_checkpoints(tmp_path, app):
    """The whole stage on the runtime: the profiler's samples -> profile.json (build_profile) ->
    a cost table timed here -> tune with the fitted model. Checks the formats fit together."""
    import copy

    from tiny_models import make_hf_model
    from trtspec.checkpoints.convert import convert_hf
    from trtspec.runtime.generate import load_models
    from trtspec.tuning.measure import MeasureConfig, measure_runtime
    from trtspec.tuning.profile import profile_prompts
    from trtspec.tuning.schema import build_profile

    base = make_hf_model("llama", tmp_path / "hf")
    with torch.no_grad():  # near-bigram target and a bigram draft: partial acceptance
        for name, p in base.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(0.1)
    base.save_pretrained(tmp_path / "hf")
    draft = copy.deepcopy(base)
    with torch.no_grad():
        for name, p in draft.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.zero_()
    draft.save_pretrained(tmp_path / "bigram")
    convert_hf(tmp_path / "hf", tmp_path / "target", dtype="float32")
    convert_hf(tmp_path / "bigram", tmp_path / "draft", dtype="float32")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        models = load_models(tmp_path / "target", tmp_path / "draft")
        g = torch.Generator().manual_seed(3)
        prompts = {w: [(f"{w}{i}", torch.randint(3, 1001, (6,), generator=g).tolist()) for i in range(2)]
                   for w in ("a", "b")}
        samples = {w: [{"id": sp.id, "prompt_len": sp.prompt_len, "match_lengths": sp.match_lengths}
                       for sp in profile_prompts(models, ps, 24, 4, ignore_eos=True)] for w, ps in prompts.items()}
        table = measure_runtime(tmp_path / "target", tmp_path / "draft",
                                MeasureConfig(batches=[1, 4], num_tokens=[1, 5], context=24, repeats=2))
    finally:
        torch.set_num_threads(n)
    prof = build_profile("draft-target", 4, None, {"target": str(tmp_path / "target"),
                                                    "draft": str(tmp_path / "draft"), "max_new_tokens": 24,
                                                    "dtype": "float32", "trtspec_version": "0.1.0"}, samples)
    assert 1.2 < prof.workloads["a"].mean_accept_length < 5
    (tmp_path / "profile.json").write_text(dump_json(prof))
    save_cost_table(table, tmp_path / "cost.json")
    run(app, ["tune", "--profile", tmp_path / "profile.json", "--cost", tmp_path / "cost.json",
              "--concurrency-bands", "1,4", "--out", tmp_path / "tuning.json", "--no-plots"])
    tuning = Tuning.model_validate_json((tmp_path / "tuning.json").read_text())
    assert tuning.cost.source == "measured" and tuning.cost.fit.num_rows == 8
    assert tuning.cost.gpu.name.startswith("CPU")
    assert set(tuning.workloads) == {"a", "b"} and not (tmp_path / "tuning_plots").exists()
