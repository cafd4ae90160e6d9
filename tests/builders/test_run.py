"""The runner against a fake `trtllm-build` on PATH (tests/fake_trtllm_build.py): exact arguments,
streamed output, clean failure on a non-zero exit and on a timeout (process group killed, nothing
left at the output path), the engine manifest, build.sh, and the Typer command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fake_trtllm_build import install_fake
from tiny_models import make_eagle_head, make_hf_model, save_tiny_tokenizer
from trtspec.builders import BuildOptions, build, make_plan
from trtspec.builders.command import build_command
from trtspec.builders.manifest import read_engine, spec_mode_name
from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.eagle import convert_eagle
from trtspec.checkpoints.pair import convert_pair
from trtspec.errors import TrtspecError

LIMITS = dict(max_batch_size=8, max_input_len=128, max_seq_len=256)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("runner")
    make_hf_model("llama", root / "hf", num_key_value_heads=4)
    save_tiny_tokenizer(root / "hf")
    make_hf_model("llama", root / "hf_draft", seed=3, num_hidden_layers=1)
    save_tiny_tokenizer(root / "hf_draft")
    make_eagle_head(root / "hf", root / "head")
    convert_hf(root / "hf", root / "plain", dtype="bfloat16")
    convert_hf(root / "hf", root / "plain_tp2", dtype="bfloat16", tp=2)
    convert_eagle(root / "hf", root / "head", root / "eagle", dtype="bfloat16")
    convert_pair(root / "hf", root / "hf_draft", root / "pair", dtype="bfloat16")
    return root


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake trtllm-build first on PATH; returns the file its invocations are recorded in."""
    install_fake(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_TRTLLM_RECORD", str(record))
    return record


def calls(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def leftovers(out: Path) -> list[str]:
    return [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp-")]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_runner_passes_exactly_the_plan(ckpts, fake, tmp_path):
    plan = make_plan(ckpts / "plain_tp2", BuildOptions(**LIMITS))
    lines = []
    out = tmp_path / "out"
    result = build(plan, out, on_line=lambda name, line: lines.append((name, line)))
    assert result.built
    [call] = calls(fake)
    assert call["argv"] == plan.argv()[1:]
    assert Path(call["cwd"]).parent == out.parent and Path(call["cwd"]).name.startswith(".out.tmp-")
    assert ("plain", "[TensorRT-LLM] Engine for rank 1 serialized") in lines
    assert sorted(p.name for p in (out / "engines" / "plain").iterdir()) == ["config.json", "rank0.engine",
                                                                           "rank1.engine"]
    assert (out / "timing.cache").is_file()  # inside the output directory, not ./model.cache
    assert "Total time of building all engines" in (out / "logs" / "plain.log").read_text()
    manifest = json.loads((out / "engine_manifest.json").read_text())
    m = manifest["engines"]["plain"]
    assert manifest["plan"] == "build_plan.json"
    assert m["engine_dir"] == "engines/plain" and m["trtllm_version"] == "1.2.0"
    assert (m["tp_size"], m["world_size"], m["rank_files"]) == (2, 2, ["rank0.engine", "rank1.engine"])
    assert (m["max_batch_size"], m["max_input_len"], m["max_seq_len"], m["max_num_tokens"]) == (8, 128, 256, 2048)
    assert m["speculative_decoding_mode"] is None and m["drift"] == []
    assert "--workers" in call["argv"] and call["argv"][call["argv"].index("--workers") + 1] == "2"
    assert leftovers(out) == []


def test_output_is_streamed_while_the_build_runs(ckpts, fake, tmp_path, monkeypatch):
    handshake = tmp_path / "saw-first-line"
    monkeypatch.setenv("FAKE_TRTLLM_HANDSHAKE", str(handshake))

    def on_line(name, line):  # the fake waits for this file before it goes on
        if "version" in line:
            handshake.touch()

    result = build(make_plan(ckpts / "plain", BuildOptions(**LIMITS)), tmp_path / "out", on_line=on_line,
                   timeout=60)
    assert result.built and handshake.exists()


def test_eagle_and_pair_manifests(ckpts, fake, tmp_path):
    eagle = make_plan(ckpts / "eagle", BuildOptions(**LIMITS))
    result = build(eagle, tmp_path / "eagle_out", on_line=lambda *a: None)
    [m] = result.manifests
    assert (m.speculative_decoding_mode, m.max_draft_len, m.num_eagle_layers) == ("eagle", 63, 4)
    assert m.max_seq_len == eagle.build().engine_max_seq_len == 256 + 63 + 4
    assert m.use_paged_context_fmha is True and m.drift == []

    pair = make_plan(ckpts / "pair", BuildOptions(max_draft_len=4, draft_logits=True, **LIMITS))
    result = build(pair, tmp_path / "pair_out", on_line=lambda *a: None)
    assert [c["argv"] for c in calls(fake)][-2:] == [pair.argv("draft")[1:], pair.argv("target")[1:]]
    by_name = {m.name: m for m in result.manifests}
    assert by_name["target"].speculative_decoding_mode == "draft_tokens_external"
    assert by_name["target"].max_draft_len == 4 and by_name["draft"].speculative_decoding_mode is None
    assert by_name["target"].max_seq_len == by_name["draft"].max_seq_len == 260
    assert all(m.gather_generation_logits and m.drift == [] for m in result.manifests)
    saved = json.loads((tmp_path / "pair_out" / "engine_manifest.json").read_text())
    assert set(saved["engines"]) == {"draft", "target"}


def test_nonzero_exit_fails_cleanly(ckpts, fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TRTLLM_EXIT", "3")
    out = tmp_path / "out"
    with pytest.raises(TrtspecError, match=r"trtllm-build for the plain engine exited with status 3 \(last output: "
                                           r"'\[TensorRT-LLM\]\[ERROR\] Engine building failed.*nothing was written"):
        build(make_plan(ckpts / "plain", BuildOptions(**LIMITS)), out, on_line=lambda *a: None)
    assert not out.exists() and leftovers(out) == []


def test_timeout_kills_the_process_group(ckpts, fake, tmp_path, monkeypatch):
    child_pid = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_TRTLLM_SLEEP", "60")
    monkeypatch.setenv("FAKE_TRTLLM_CHILD_PID", str(child_pid))
    out = tmp_path / "out"
    start = time.monotonic()
    with pytest.raises(TrtspecError, match="timed out after 2 s; its process group was killed and nothing was written"):
        build(make_plan(ckpts / "plain", BuildOptions(**LIMITS)), out, timeout=2, kill_grace=0.5,
              on_line=lambda *a: None)
    assert time.monotonic() - start < 20
    pid = int(child_pid.read_text())
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), "the fake's child process survived the timeout"
    assert not out.exists() and leftovers(out) == []


def test_without_trtllm_build_only_the_plan_is_written(ckpts, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "out"
    result = build(make_plan(ckpts / "plain", BuildOptions(**LIMITS)), out)
    assert not result.built
    assert "(trtllm-build is not on PATH); engines need an H100 host with TensorRT-LLM 1.2.x" in result.message
    assert sorted(p.name for p in out.iterdir()) == ["build.sh", "build_plan.json"]


def test_dry_run_does_not_call_trtllm_build(ckpts, fake, tmp_path):
    result = build(make_plan(ckpts / "plain", BuildOptions(**LIMITS)), tmp_path / "out", dry_run=True)
    assert not result.built and calls(fake) == [] and "--dry-run" in result.message


def test_manifest_reports_builder_drift(ckpts, fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TRTLLM_VERSION", "1.3.0rc1")
    result = build(make_plan(ckpts / "plain", BuildOptions(**LIMITS)), tmp_path / "out", on_line=lambda *a: None)
    assert result.manifests[0].drift == ["built by TensorRT-LLM 1.3.0rc1, the plan is for 1.2.x"]
    assert "the builder changed planned settings" in result.message


def test_read_engine_checks_the_documented_layout(tmp_path):
    eng = tmp_path / "eng"
    eng.mkdir()
    (eng / "config.json").write_text(json.dumps({"version": "1.2.0", "pretrained_config": {}}))
    with pytest.raises(TrtspecError, match="missing field 'build_config'"):
        read_engine(eng, "plain")
    (eng / "config.json").write_text(json.dumps({
        "version": "1.2.0", "build_config": {},
        "pretrained_config": {"mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1}}}))
    (eng / "rank0.engine").write_bytes(b"x")
    with pytest.raises(TrtspecError, match="missing rank1.engine"):
        read_engine(eng, "plain")
    assert [spec_mode_name(v) for v in (None, 1, 2, 32, "EAGLE", "SpeculativeDecodingMode.DRAFT_TOKENS_EXTERNAL")] == [
        None, None, "draft_tokens_external", "eagle", "eagle", "draft_tokens_external"]


def _shim(bin_dir: Path, version: str | None) -> None:
    """A `python3` that answers build.sh's TensorRT-LLM version probe (stdin is the probe script)."""
    body = f'cat >/dev/null\necho "{version}"\n' if version else "cat >/dev/null\nexit 1\n"
    (bin_dir / "python3").write_text("#!/bin/sh\n" + body)
    (bin_dir / "python3").chmod(0o755)


@pytest.mark.parametrize("version, code, text", [
    ("1.2.0", 0, "TensorRT-LLM 1.2.0"),
    ("1.3.0", 3, "found TensorRT-LLM 1.3.0, but this plan is for 1.2.x"),
    (None, 3, "TensorRT-LLM is not importable here"),
])
def test_build_sh_checks_the_version_then_runs_the_plan(ckpts, fake, tmp_path, version, code, text):
    plan = make_plan(ckpts / "pair", BuildOptions(max_draft_len=4, **LIMITS))
    out = tmp_path / "out"
    build(plan, out, dry_run=True)
    _shim(tmp_path / "bin", version)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    proc = subprocess.run(["bash", str(out / "build.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == code, proc.stderr
    assert text in proc.stdout + proc.stderr
    if code == 0:
        assert [c["argv"] for c in calls(fake)] == [plan.argv("draft")[1:], plan.argv("target")[1:]]
        assert all(Path(c["cwd"]) == out for c in calls(fake))
        assert (out / "engines" / "target" / "config.json").is_file()
    else:
        assert calls(fake) == []


def test_build_command(ckpts, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    app = typer.Typer()
    app.command("build")(build_command)
    app.command("other")(lambda: None)  # two commands: "build" stays a subcommand
    runner = CliRunner()
    res = runner.invoke(app, ["build", "--ckpt", str(ckpts / "pair"), "--out", str(tmp_path / "out"),
                              "--max-batch-size", "8", "--max-seq-len", "256", "--max-draft-len", "4",
                              "--draft-logits"])
    assert res.exit_code == 0, res.output
    assert "plan: pair" in res.output and "target: LlamaForCausalLM" in res.output
    assert "KV tokens" in res.output and "engines need an H100 host with TensorRT-LLM 1.2.x" in res.output
    data = json.loads((tmp_path / "out" / "build_plan.json").read_text())
    assert all("--gather_generation_logits" in b["argv"] for b in data["builds"])
    res = runner.invoke(app, ["build", "--ckpt", str(ckpts / "eagle"), "--out", str(tmp_path / "o2"),
                              "--max-batch-size", "1024"])
    assert isinstance(res.exception, TrtspecError) and "EAGLE engines allow at most 512" in str(res.exception)
    assert not (tmp_path / "o2").exists()


def test_cli_main_prints_one_line_errors(ckpts, tmp_path):
    """Through a `main()` like trtspec.cli.main: TrtspecError -> one line on stderr, exit 2."""
    code = (
        "import sys, typer\n"
        "from trtspec.builders.command import build_command\n"
        "from trtspec.errors import TrtspecError\n"
        "app = typer.Typer(); app.command('build')(build_command); app.command('x')(lambda: None)\n"
        "try:\n    app(standalone_mode=False)\n"
        "except TrtspecError as e:\n    print(f'error: {e}', file=sys.stderr); sys.exit(2)\n")
    proc = subprocess.run([sys.executable, "-c", code, "build", "--ckpt", str(ckpts / "pair"), "--out",
                           str(tmp_path / "o"), "--max-beam-width", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "speculative decoding needs beam width 1" in proc.stderr
