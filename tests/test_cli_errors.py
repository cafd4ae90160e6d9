"""Bad input on the command line: never a traceback, never a half-written output.

Usage errors are Typer's own messages (exit 2); a TrtspecError is exactly one `error:` line naming
the file, field or flag (exit 2); an unexpected exception is one line naming the file that holds
its traceback (exit 1), or the traceback itself with --debug / TRTSPEC_DEBUG=1.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from cli_helpers import run_cli
from tiny_models import make_hf_model, save_tiny_tokenizer
from trtspec.checkpoints.stage import convert


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny Llama HF directory, its plain checkpoint and a draft-target pair (itself as draft)."""
    root = tmp_path_factory.mktemp("models")
    make_hf_model("llama", root / "hf")
    save_tiny_tokenizer(root / "hf")
    convert(root / "hf", root / "ckpt")
    convert(root / "hf", root / "pair", draft_hf=root / "hf")
    (root / "prompts.txt").write_text("hello\n")
    return root


def copy_of(models: Path, name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(models / name, tmp_path / name))


def edit_json(path: Path, fn) -> None:
    """Apply `fn` to the parsed config; an edit that returns a list replaces the whole config with it."""
    cfg = json.loads(path.read_text())
    result = fn(cfg)
    path.write_text(json.dumps(result if isinstance(result, list) else cfg))


def setting(**changes):
    """A config edit: set (or, with None, delete) top-level fields."""
    def fn(cfg):
        for k, v in changes.items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
    return fn


def edit_tensor(name: str, value: float):
    def fn(hf: Path):
        tensors = load_file(hf / "model.safetensors")
        tensors[name].view(-1)[3] = value
        save_file(tensors, str(hf / "model.safetensors"))
    return fn


def retype_tensor(name: str, dtype: torch.dtype):
    def fn(hf: Path):
        tensors = load_file(hf / "model.safetensors")
        tensors[name] = tensors[name].to(dtype)
        save_file(tensors, str(hf / "model.safetensors"))
    return fn


def assert_one_error(code: int, out: str, err: str, expected: str, outputs: list[Path], want_code: int = 2):
    assert code == want_code, (out, err)
    assert "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert expected in lines[0], lines[0]
    for o in outputs:
        assert not o.exists(), f"{o} left behind"
        assert not list(o.parent.glob(f".{o.name}.tmp-*")), "temporary sibling left behind"


# --- usage errors: Typer's messages, exit 2 ------------------------------------------------------

USAGE = [
    (["convert", "--hf", "HF", "--out", "OUT", "--tp", "abc"], "'--tp'"),
    (["convert", "--hf", "HF"], "Missing option '--out'"),
    (["convert", "--hf", "HF", "--out", "OUT", "--bogus"], "No such option: --bogus"),
    (["nosuch"], "No such command 'nosuch'"),
    ([], "[OPTIONS] COMMAND [ARGS]..."),
    (["generate", "--ckpt", "CKPT", "--prompt", "hi", "--max-new-tokens", "many"], "'--max-new-tokens'"),
    (["profile", "--ckpt", "PAIR", "--out", "OUT"], "Missing option '--workloads'"),
    (["quantize", "--hf", "HF", "--out", "OUT"], "Missing option '--format'"),
]


def fill(args: list[str], models: Path, out: Path) -> list[str]:
    return [{"HF": str(models / "hf"), "CKPT": str(models / "ckpt"), "PAIR": str(models / "pair"),
             "OUT": str(out)}.get(a, a) for a in args]


@pytest.mark.parametrize("args,expected", USAGE, ids=[" ".join(a[:3]) or "bare" for a, _ in USAGE])
def test_usage_errors(capsys, models, tmp_path, args, expected):
    code, out, err = run_cli(capsys, *fill(args, models, tmp_path / "out"))
    assert code == 2 and "Traceback" not in out + err
    assert expected in " ".join((out + err).split()) or expected in out + err, out + err
    assert not (tmp_path / "out").exists()


def test_usage_errors_without_click(models):
    """The entry point as installed, with `click` made unimportable: Typer needs none."""
    code = ("import sys; sys.modules['click'] = None; sys.argv = ['trtspec', 'convert', '--tp', 'abc'];"
            "from trtspec.cli import main; main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
    assert p.returncode == 2 and "Traceback" not in p.stderr and "'--tp'" in p.stderr, p.stderr


def test_bare_trtspec_subprocess():
    exe = Path(sys.executable).with_name("trtspec")
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert p.returncode == 2 and "Traceback" not in p.stdout + p.stderr and "convert" in p.stdout + p.stderr


# --- expected errors: one `error:` line naming the file / field / flag, exit 2 -------------------

HF_CONFIG = [
    ("rms_norm_eps", setting(rms_norm_eps="tiny"), "config.json: rms_norm_eps: expected a positive number, got 'tiny'"),
    ("max_pos_list", setting(max_position_embeddings=[256]),
     "config.json: max_position_embeddings: expected a positive integer, got [256]"),
    ("rope_scaling_str", setting(rope_scaling="llama3"), "config.json: rope_scaling: expected an object"),
    ("rope_scaling_factor", lambda c: c["rope_scaling"].pop("factor"), "missing field 'rope_scaling.factor'"),
    ("json_list", lambda c: [c], "config.json: config: expected a JSON object, got a JSON list"),
    ("hidden_float", setting(hidden_size=64.9), "config.json: hidden_size: expected a positive integer, got 64.9"),
    ("heads_not_dividing_hidden", setting(num_attention_heads=3, num_key_value_heads=1, head_dim=None),
     "config.json: hidden_size: 64 is not divisible by num_attention_heads=3"),
    ("heads_vs_weights", setting(num_attention_heads=2, num_key_value_heads=1),
     "config.json: num_attention_heads: 2 heads x head size 16 = 32 rows, but "
     "tensor 'model.layers.0.self_attn.q_proj.weight' has shape [64, 64], expected [32, 64]"),
    ("kv_heads", setting(num_key_value_heads=3), "config.json: num_key_value_heads: 3 does not divide num_attention_heads=4"),
    ("rope_theta", setting(rope_theta=-1), "config.json: rope_theta: expected a positive number, got -1"),
    ("tie_flag", setting(tie_word_embeddings="yes"), "config.json: tie_word_embeddings: expected true or false"),
    ("vocab_zero", setting(vocab_size=0), "config.json: vocab_size: expected a positive integer, got 0"),
    ("missing_layers", setting(num_hidden_layers=None), "config.json: missing field 'num_hidden_layers'"),
]


@pytest.mark.parametrize("edit,expected", [c[1:] for c in HF_CONFIG], ids=[c[0] for c in HF_CONFIG])
def test_convert_bad_hf_config(capsys, models, tmp_path, edit, expected):
    hf = copy_of(models, "hf", tmp_path)
    edit_json(hf / "config.json", edit)
    out = tmp_path / "out"
    assert_one_error(*run_cli(capsys, "convert", "--hf", hf, "--out", out), expected, [out])


WEIGHTS = [
    ("nan", edit_tensor("model.layers.1.mlp.up_proj.weight", math.nan), [],
     "tensor 'model.layers.1.mlp.up_proj.weight' has 1 non-finite value(s)"),
    ("inf", edit_tensor("model.embed_tokens.weight", math.inf), [],
     "tensor 'model.embed_tokens.weight' has 1 non-finite value(s)"),
    ("fp16_overflow", edit_tensor("model.norm.weight", 1e6), ["--dtype", "float16"],
     "tensor 'model.norm.weight' has values beyond the range of float16"),
    ("not_json", lambda hf: (hf / "config.json").write_text("{"), [], "config.json: not valid JSON"),
    ("tp_zero", lambda hf: None, ["--tp", "0"], "--tp"),
    ("dtype", lambda hf: None, ["--dtype", "int3"], "--dtype"),
    ("eagle_and_draft", lambda hf: None, ["--eagle", "x", "--draft", "y"], "--eagle and --draft"),
    ("config_not_utf8", lambda hf: (hf / "config.json").write_bytes(b"\xff\xfe{}"), [],
     "config.json: not valid JSON (not UTF-8 text)"),
    ("int_weight", retype_tensor("model.layers.1.mlp.up_proj.weight", torch.int32), [],
     "tensor 'model.layers.1.mlp.up_proj.weight' is int32, expected an unquantized float16, bfloat16 or float32"),
    ("fp8_weight", retype_tensor("model.norm.weight", torch.float8_e4m3fn), [],
     "tensor 'model.norm.weight' is float8_e4m3fn, expected an unquantized"),
    ("max_draft_len", lambda hf: None, ["--max-draft-len", "0"], "--max-draft-len: "),  # not `--eagle:`
    ("num_eagle_layers", lambda hf: None, ["--num-eagle-layers", "-1"], "--num-eagle-layers: "),
]


@pytest.mark.parametrize("edit,extra,expected", [c[1:] for c in WEIGHTS], ids=[c[0] for c in WEIGHTS])
def test_convert_bad_weights_and_flags(capsys, models, tmp_path, edit, extra, expected):
    hf = copy_of(models, "hf", tmp_path)
    edit(hf)
    out = tmp_path / "out"
    assert_one_error(*run_cli(capsys, "convert", "--hf", hf, "--out", out, *extra), expected, [out])


CKPT_CONFIG = [
    ("norm_epsilon", setting(norm_epsilon="tiny"), "config.json: norm_epsilon: expected a positive number, got 'tiny'"),
    ("tp_size", lambda c: c["mapping"].update(tp_size="two"), "config.json: mapping.tp_size: expected a positive integer"),
    ("head_size", setting(head_size=16.5), "config.json: head_size: expected a positive integer, got 16.5"),
    ("json_list", lambda c: [c], "config.json: config: expected a JSON object, got a JSON list"),
]


@pytest.mark.parametrize("edit,expected", [c[1:] for c in CKPT_CONFIG], ids=[c[0] for c in CKPT_CONFIG])
def test_generate_bad_checkpoint_config(capsys, models, tmp_path, edit, expected):
    ckpt = copy_of(models, "ckpt", tmp_path)
    edit_json(ckpt / "config.json", edit)
    assert_one_error(*run_cli(capsys, "generate", "--ckpt", ckpt, "--prompt-ids", "[1, 2]"), expected, [])


@pytest.mark.parametrize("args,expected", [
    (["--prompt-ids", "[1,"], "--prompt-ids: expected a non-empty JSON list of integers"),
    (["--prompt", "hi", "--prompt-ids", "[1]"], "give exactly one of --prompt or --prompt-ids"),
    (["--prompt-ids", "[1]", "--eagle-choices", "[[0"], "--eagle-choices: not valid JSON"),
    (["--prompt-ids", "[1]", "--eagle-choices", '{"0": [1]}'], "--eagle-choices: expected a JSON list, got "),
    (["--prompt-ids", "[1]", "--min-tokens", "-1"], "--min-tokens: "),
    (["--prompt-ids", "[1]", "--max-new-tokens", "0"], "--max-new-tokens: expected >= 1, got 0"),
    (["--prompt-ids", "[1]", "--seed", str(2 ** 64)], "--seed: "),  # TensorRT-LLM's seed is a uint64
], ids=["prompt_ids", "both_prompts", "eagle_choices", "eagle_choices_not_a_list", "min_tokens", "max_new_tokens",
        "seed_beyond_uint64"])
def test_generate_bad_flags(capsys, models, args, expected):
    assert_one_error(*run_cli(capsys, "generate", "--ckpt", models / "ckpt", *args), expected, [])


@pytest.mark.parametrize("workloads,extra,expected", [
    ("chat=mt-bnech", [], "'mt-bnech' is neither a packaged set (mt-bench, humaneval) nor an existing file"),
    ("PROMPTS_TXT", [], "prompts.txt: unknown prompt file type '.txt'"),
    ("mt-bench", ["--max-k", "0"], "--max-k"),
], ids=["misspelt_set", "txt_file", "max_k"])
def test_profile_bad_input(capsys, models, tmp_path, workloads, extra, expected):
    out = tmp_path / "p" / "profile.json"
    workloads = workloads.replace("PROMPTS_TXT", str(models / "prompts.txt"))
    code, o, err = run_cli(capsys, "profile", "--ckpt", models / "pair", "--workloads", workloads, "--out", out, *extra)
    assert_one_error(code, o, err, expected, [out])


@pytest.mark.parametrize("extra,expected", [
    (["--format", "fp9"], "--format"),
    (["--format", "fp8", "--calib", "chat=mt-bnech"], "neither a packaged set (mt-bench, humaneval)"),
], ids=["format", "misspelt_calib_set"])
def test_quantize_bad_input(capsys, models, tmp_path, extra, expected):
    out = tmp_path / "q"
    assert_one_error(*run_cli(capsys, "quantize", "--hf", models / "hf", "--out", out, *extra), expected, [out])


def test_quantize_nan_weight_is_named_before_calibration(capsys, models, tmp_path):
    hf = copy_of(models, "hf", tmp_path)
    edit_tensor("model.layers.1.mlp.up_proj.weight", math.nan)(hf)
    out = tmp_path / "q"
    assert_one_error(*run_cli(capsys, "quantize", "--hf", hf, "--out", out, "--format", "fp8", "--calib-samples", "4"),
                     "tensor 'model.layers.1.mlp.up_proj.weight' has 1 non-finite value(s)", [out])


def test_quantize_bad_hf_config(capsys, models, tmp_path):
    hf = copy_of(models, "hf", tmp_path)
    edit_json(hf / "config.json", setting(hidden_size=64.9))
    out = tmp_path / "q"
    assert_one_error(*run_cli(capsys, "quantize", "--hf", hf, "--out", out, "--format", "fp8"),
                     "hidden_size: expected a positive integer, got 64.9", [out])


# --- a file where a folder is expected, and the other way round --------------------------------

def test_a_file_given_for_a_model_directory(capsys, models, tmp_path):
    out = tmp_path / "out"
    assert_one_error(*run_cli(capsys, "convert", "--hf", models / "prompts.txt", "--out", out),
                     "prompts.txt/config.json: HF config.json not found", [out])
    assert_one_error(*run_cli(capsys, "generate", "--ckpt", models / "prompts.txt", "--prompt-ids", "[1]"),
                     "prompts.txt/config.json: TRT-LLM config.json not found", [])


def test_an_hf_directory_given_for_a_checkpoint(capsys, models):
    assert_one_error(*run_cli(capsys, "generate", "--ckpt", models / "hf", "--prompt-ids", "[1]"),
                     "this is a Hugging Face model directory, not a TensorRT-LLM checkpoint", [])


def test_a_directory_given_for_a_json_file(capsys, models, tmp_path):
    out = tmp_path / "t.json"
    assert_one_error(*run_cli(capsys, "tune", "--profile", models, "--out", out, "--no-plots"),
                     "is a directory (expected the profile)", [out])


@pytest.mark.parametrize("where,expected", [
    ("dir", "p: is a directory (expected a file path)"),
    ("under_file", "cannot write here ("),
], ids=["out_is_a_dir", "out_under_a_file"])
def test_profile_refuses_a_bad_out_before_profiling(capsys, models, tmp_path, where, expected):
    (tmp_path / "p").mkdir()
    (tmp_path / "f").write_text("")
    out = tmp_path / "p" if where == "dir" else tmp_path / "f" / "profile.json"
    code, o, err = run_cli(capsys, "profile", "--ckpt", models / "pair", "--workloads", "mt-bench", "--out", out,
                           "--samples", "1", "--max-new-tokens", "2", "--max-k", "1")
    assert_one_error(code, o, err, expected, [])
    assert "profiling" not in o and sorted(p.name for p in tmp_path.iterdir()) == ["f", "p"]


def test_measure_cost_context_beyond_the_model_positions(capsys, models, tmp_path):
    out = tmp_path / "cost.json"
    assert_one_error(*run_cli(capsys, "measure-cost", "--target-ckpt", models / "ckpt", "--context", "250",
                              "--num-tokens", "1,8", "--out", out),
                     "--context: 250 + 8 new tokens exceed", [out])


@pytest.mark.parametrize("args,expected", [
    (["--timeout", "nan"], "--timeout: "),
    (["--http-port", "0"], "--http-port: "),
    (["--drain-timeout", "0"], "--drain-timeout: "),
], ids=["timeout_nan", "port_zero", "drain_zero"])
def test_serve_bad_flags(capsys, tmp_path, args, expected):
    assert_one_error(*run_cli(capsys, "serve", tmp_path / "repo", *args), expected, [])


@pytest.mark.parametrize("args,expected", [
    (["--blocks", "3"], "--blocks: 3 interleaves speculation with the baseline"),
    (["--out", "FILE"], "FILE: output path exists and is not a directory"),
], ids=["blocks", "out_is_a_file"])
def test_perf_bad_input_before_connecting(capsys, tmp_path, args, expected):
    (tmp_path / "FILE").write_text("")
    args = [str(tmp_path / a) if a == "FILE" else a for a in args]
    code, o, err = run_cli(capsys, "perf", "--workloads", "mt-bench", "--url", "127.0.0.1:9",
                           "--connect-timeout", "0.1", *(["--out", str(tmp_path / "perf")] if "--out" not in args
                                                         else []), *args)
    assert_one_error(code, o, err, expected.replace("FILE", str(tmp_path / "FILE")), [tmp_path / "perf"])


def test_overwrite_never_deletes_an_input(capsys, models, tmp_path):
    out = tmp_path / "X"
    (out / "ckpt").mkdir(parents=True)
    (out / "tuning.json").write_text("{}")
    code, o, err = run_cli(capsys, "triton", "--tuning", out / "tuning.json", "--flavor", "pytorch", "--ckpt",
                           models / "pair", "--out", out, "--overwrite")
    assert_one_error(code, o, err, f"--tuning: {out / 'tuning.json'} is or lies inside the output directory", [])
    assert (out / "tuning.json").is_file()
    hf = copy_of(models, "hf", tmp_path)
    code, o, err = run_cli(capsys, "train-draft", "--target", hf, "--out", hf, "--overwrite")
    assert_one_error(code, o, err, f"--target: {hf} is or lies inside the output directory", [])
    assert (hf / "model.safetensors").is_file()


def test_train_draft_refuses_a_checkpoint_as_target(capsys, models, tmp_path):
    out = tmp_path / "head"
    assert_one_error(*run_cli(capsys, "train-draft", "--target", models / "ckpt", "--out", out),
                     "not a Hugging Face model directory transformers can load", [out])


@pytest.mark.parametrize("text,expected", [
    (b"name: t\ntarget: default\nprofile: {max_k: 2}\nprofile: {max_k: 3}\n",
     "not valid YAML at line 4 (key 'profile' given twice)"),
    (b"name: t\ntarget: default\nprofile:\n  max_k: 2\n  max_k: 3\n", "key 'max_k' given twice"),
    (b"\xff\xfename: t\n", "not valid YAML (not UTF-8 text)"),
], ids=["section_twice", "key_twice", "not_utf8"])
def test_recipe_duplicate_keys_and_bytes(capsys, tmp_path, text, expected):
    (tmp_path / "r.yaml").write_bytes(text)
    assert_one_error(*run_cli(capsys, "run", tmp_path / "r.yaml", "--out", tmp_path / "o", "--dry-run"),
                     expected, [tmp_path / "o"])


# --- unexpected errors: one line + the traceback's file (exit 1), or the traceback with --debug --

@pytest.fixture
def broken_convert(monkeypatch, tmp_path):
    def boom(*args, **kwargs):
        raise ZeroDivisionError("boom\nsecond line")
    monkeypatch.setattr("trtspec.checkpoints.stage.convert", boom)
    monkeypatch.setenv("TRTSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TRTSPEC_DEBUG", raising=False)


def test_internal_error_is_one_line_and_a_file(capsys, models, tmp_path, broken_convert):
    out = tmp_path / "out"
    code, o, err = run_cli(capsys, "convert", "--hf", models / "hf", "--out", out)
    assert_one_error(code, o, err, "error: internal error (ZeroDivisionError: boom second line); full traceback in ",
                     [out], want_code=1)
    path = Path(err.split("full traceback in ")[1].split(" (or run with --debug)")[0])
    assert path.parent == tmp_path / "cache" / "crash"
    text = path.read_text()
    assert text.startswith("Traceback") and "ZeroDivisionError: boom" in text and "def boom" not in err
    assert not list(path.parent.glob(".*.tmp-*"))


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback(capsys, models, tmp_path, broken_convert, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv("TRTSPEC_DEBUG", "1")
    args = ["--debug"] if how == "flag" else []
    code, o, err = run_cli(capsys, *args, "convert", "--hf", models / "hf", "--out", tmp_path / "out")
    assert code == 1 and "Traceback" in err and "ZeroDivisionError: boom" in err
    assert not (tmp_path / "cache").exists()
    monkeypatch.delenv("TRTSPEC_DEBUG", raising=False)
    code, o, err = run_cli(capsys, "convert", "--hf", models / "hf", "--out", tmp_path / "out")
    assert code == 1 and "Traceback" not in err, "--debug outlived its command"
