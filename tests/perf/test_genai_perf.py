"""`trtspec perf --export-genai-perf`: the genai-perf 0.0.16 commands and input files that reproduce a perf
invocation. Checked here: the inputs are our prompts in sending order, one command per run with the
same max_tokens / load / request count / warm-up / workload / speculation, shell quoting of any
workload name, the strip() caveat reported. When the genai-perf venv of scripts/bench_genai_perf.py
exists, genai-perf's own parser and input generator read every exported command (no server needed)
and must produce exactly our payloads and the perf_analyzer load we ask for. The real runs against a
served SmolLM2 repository are scripts/bench_genai_perf.py."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from trtspec.errors import TrtspecError
from cli_helpers import run_cli
from trtspec.perf.genai_perf import (MANIFEST, SCRIPT, default_requests, export_for_options, export_genai_perf,
                                     read_genai_perf_stats)
from trtspec.perf.options import PerfOptions
from trtspec.upstream.triton import GENAI_PERF_VERSION

GP_PYTHON = Path.home() / ".cache" / "trtspec" / "venvs" / f"genai-perf-{GENAI_PERF_VERSION}" / "bin" / "python"
PROMPTS = {"chat": [("c1", "Write a haiku about the sea."), ("c2", "Name three colors.\n"), ("c3", "Why?")],
           "we:ird 'x' $HOME": [("w1", "def add(a, b):\n    return a + b")]}


def tokenizer_dir(tmp_path: Path) -> Path:
    from triton_fixtures import tiny_tokenizer_dir

    return tiny_tokenizer_dir(tmp_path / "tok")


def script_commands(script: Path) -> list[list[str]]:
    return [shlex.split(line)[1:] for line in script.read_text().splitlines() if line.startswith('"$GENAI_PERF"')]


def flag(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == name]


def test_export_writes_inputs_and_one_command_per_run(tmp_path):
    tok = tokenizer_dir(tmp_path)
    script = export_genai_perf(tmp_path / "gp", prompts=PROMPTS, url="127.0.0.1:8001", model="generate", tokenizer=tok,
                               max_tokens=48, concurrency=[1, 4], warmup=3, baseline=True, seed=7)
    assert script == tmp_path / "gp" / SCRIPT and script.stat().st_mode & 0o111
    man = json.loads((tmp_path / "gp" / MANIFEST).read_text())
    for name, items in PROMPTS.items():
        lines = (tmp_path / "gp" / man["inputs"][name]).read_text().splitlines()
        assert [json.loads(x) for x in lines] == [{"text": t} for _, t in items]  # sending order, exact text
    assert man["prompts_changed_by_strip"] == {"chat": ["c2"], "we:ird 'x' $HOME": []}
    assert "1 prompt(s) of workload 'chat' reach the model changed" in script.read_text()
    assert "warm-up raised from 3 to the concurrency" in script.read_text()
    # a re-run starts each run from a clean artifact directory (perf_analyzer never overwrites its export)
    lines = script.read_text().splitlines()
    assert all(lines[i - 2] == f"rm -rf {r['artifact_dir']}" for i, r in
               zip([k for k, x in enumerate(lines) if x.startswith('"$GENAI_PERF"')], man["runs"]))
    cmds = script_commands(script)
    runs = man["runs"]
    assert len(cmds) == len(runs) == 2 * 2 * 2  # workloads x concurrency x speculation on/off
    assert [r["argv"][1:] for r in runs] == cmds  # the script's quoting round-trips every argument
    seen = set()
    for r, argv in zip(runs, cmds):
        seen.add((r["workload"], r["concurrency"], r["speculation"]))
        assert argv[:2] == ["profile", "-m"] and flag(argv, "-u") == ["127.0.0.1:8001"]
        assert flag(argv, "--endpoint-type") == ["kserve"] and flag(argv, "--backend") == ["tensorrtllm"]
        assert "--streaming" in argv and flag(argv, "--tokenizer") == [str(tok.resolve())]
        assert flag(argv, "--output-tokens-mean") == ["48"] and flag(argv, "--output-tokens-stddev") == ["0"]
        assert flag(argv, "--concurrency") == [str(r["concurrency"])]
        assert flag(argv, "--request-count") == [str(default_requests(r["concurrency"], None))]
        # perf_analyzer 2.51 hangs when 0 < warm-up < concurrency: at least `concurrency` warm-up requests
        assert flag(argv, "--warmup-request-count") == [str(max(3, r["concurrency"]))]
        assert flag(argv, "--random-seed") == ["7"]
        extra = [json.loads(x) for x in flag(argv, "--extra-inputs")]
        assert extra == ([{"workload": r["workload"]}] + ([] if r["speculation"] else [{"speculation": False}]))
        assert flag(argv, "--artifact-dir") == [r["artifact_dir"]]
        assert flag(argv, "--input-file") == [man["inputs"][r["workload"]]]
    assert len(seen) == 8 and len({r["artifact_dir"] for r in runs}) == 8


def test_export_open_loop_duration_and_errors(tmp_path):
    tok = tokenizer_dir(tmp_path)
    script = export_genai_perf(tmp_path / "gp", prompts={"chat": PROMPTS["chat"]}, url="h:1", model="m", tokenizer=tok,
                               max_tokens=8, concurrency=[], request_rate=2.5, duration_s=12.5, warmup=0)
    (argv,) = script_commands(script)
    assert flag(argv, "--request-rate") == ["2.5"] and "--concurrency" not in argv
    assert flag(argv, "--measurement-interval") == ["12500"] and "--request-count" not in argv
    assert "--warmup-request-count" not in argv and "--extra-inputs" in argv
    assert argv[-3:] == ["--", "--request-distribution", "poisson"]  # perf's open loop is Poisson
    script = export_genai_perf(tmp_path / "gp2", prompts={"chat": PROMPTS["chat"]}, url="h:1", model="m",
                               tokenizer=tok, max_tokens=8, concurrency=[], request_rate=2.0)
    assert flag(script_commands(script)[0], "--request-count") == ["20"]  # 10 s of arrivals, as perf
    with pytest.raises(TrtspecError, match="not a directory"):
        export_genai_perf(tmp_path / "gp3", prompts={"chat": PROMPTS["chat"]}, url="h:1", model="m",
                          tokenizer=tmp_path / "nope", max_tokens=8, concurrency=[1])
    with pytest.raises(TrtspecError, match="at least one prompt"):
        export_genai_perf(tmp_path / "gp4", prompts={"chat": []}, url="h:1", model="m", tokenizer=tok, max_tokens=8,
                          concurrency=[1])
    assert not (tmp_path / "gp3").exists() and not (tmp_path / "gp4").exists()


def test_export_writes_the_request_rate_exactly(tmp_path):
    """The rate perf sends at, every digit of it (`:g` kept 6 significant digits: 0.123457)."""
    script = export_genai_perf(tmp_path / "gp", prompts={"chat": PROMPTS["chat"]}, url="h:1", model="m",
                               tokenizer=tokenizer_dir(tmp_path), max_tokens=8, concurrency=[], request_rate=0.1234567)
    (argv,) = script_commands(script)
    assert [float(x) for x in flag(argv, "--request-rate")] == [0.1234567]


@pytest.mark.parametrize("kw, field", [(dict(sweep=True), "sweep"), (dict(sweep=True, blocks=2), "sweep"),
                                       (dict(baseline=True, blocks=2), "blocks")])
def test_export_refuses_sweeps_and_interleaved_blocks(kw, field, tmp_path):
    """The export's plain sequential commands reproduce neither a sweep's settings nor interleaved blocks:
    refused naming the field (the command line: the flag), before the server is asked anything and
    before anything is written."""
    o = PerfOptions(url="127.0.0.1:1", workloads={"chat": "mt-bench"}, out=tmp_path / "o", requests=4, **kw)
    with pytest.raises(TrtspecError, match=rf"^perf\.{field}: the genai-perf export writes plain runs"):
        export_for_options(o, tmp_path / "gp", tokenizer=tokenizer_dir(tmp_path))
    assert not (tmp_path / "gp").exists()


def test_the_command_line_refuses_export_with_sweep(tmp_path, capsys):
    code, _, stderr = run_cli(capsys, "perf", "--url", "127.0.0.1:1", "--workloads", "chat=mt-bench", "--sweep",
                              "--requests", "4", "--out", tmp_path / "o", "--export-genai-perf", tmp_path / "gp")
    assert code == 2 and "--export-genai-perf: --sweep: the genai-perf export writes plain runs" in stderr, stderr
    assert not (tmp_path / "gp").exists() and not (tmp_path / "o" / "results.json").exists()


def test_a_truncated_genai_perf_export_is_an_error_naming_the_file(tmp_path):
    """genai-perf killed mid-write leaves half a profile_export_genai_perf.json: one TrtspecError that
    names it, not a bare JSONDecodeError; a whole one reads back."""
    nested = tmp_path / "art" / "m-tensorrtllm-concurrency1"
    nested.mkdir(parents=True)
    (nested / "profile_export_genai_perf.json").write_text('{"time_to_first_token": {"avg": 1')
    with pytest.raises(TrtspecError, match=r"profile_export_genai_perf\.json: not valid JSON"):
        read_genai_perf_stats(tmp_path / "art")
    (nested / "profile_export_genai_perf.json").write_text('{"time_to_first_token": {"avg": 1.5}}')
    assert read_genai_perf_stats(tmp_path / "art") == {"time_to_first_token": {"avg": 1.5}}

PROBE = r"""
import json, sys, os
os.environ["HF_HUB_OFFLINE"] = "1"
from genai_perf.parser import parse_args
from genai_perf.config.input.create_config import CreateConfig
from genai_perf.subcommand.profile import Profile
out = []
for argv in json.load(open(sys.argv[1])):
    sys.argv = ["genai-perf"] + argv
    args, extra = parse_args()
    config = CreateConfig.create(args, extra)
    p = Profile(config, extra)
    objectives = p._create_objectives_based_on_stimulus()
    pa = p._create_perf_analyzer_config(objectives)
    p._create_tokenizer()
    p._create_artifact_directory(pa)
    p._generate_inputs(pa)
    inputs = json.load(open(pa.get_artifact_directory() / "inputs.json"))
    out.append({"inputs": inputs["data"], "pa": pa.create_command()})
print(json.dumps(out))
"""


@pytest.mark.skipif(not GP_PYTHON.exists(), reason="no genai-perf 0.0.16 venv (scripts/bench_genai_perf.py creates it)")
def test_genai_perf_itself_reads_the_export(tmp_path):
    tok = tokenizer_dir(tmp_path)
    script = export_genai_perf(tmp_path / "gp", prompts=PROMPTS, url="127.0.0.1:8001", model="generate", tokenizer=tok,
                               max_tokens=48, concurrency=[2], requests=5, warmup=1, baseline=True)
    runs = json.loads((tmp_path / "gp" / MANIFEST).read_text())["runs"]
    (tmp_path / "argv.json").write_text(json.dumps([r["argv"][1:] for r in runs]))
    r = subprocess.run([str(GP_PYTHON), "-c", PROBE, str(tmp_path / "argv.json")], capture_output=True, text=True,
                       cwd=script.parent, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for run, g in zip(runs, got):
        want = [{"model": "generate", "text_input": [t.strip()], "max_tokens": [48], "exclude_input_in_output": [True],
                 "stream": [True], "workload": [run["workload"]], **({} if run["speculation"] else
                                                                    {"speculation": [False]})}
                for _, t in PROMPTS[run["workload"]]]
        assert g["inputs"] == want  # our prompts (stripped: genai-perf's caveat), in order, our inputs
        pa = g["pa"]
        assert pa[pa.index("--concurrency-range") + 1] == "2" and pa[pa.index("--request-count") + 1] == "5"
        assert pa[pa.index("--warmup-request-count") + 1] == "2" and pa[pa.index("-u") + 1] == "127.0.0.1:8001"
        assert "--streaming" in pa and pa[pa.index("-m") + 1] == "generate"


def test_the_export_names_the_pinned_genai_perf_release(tmp_path):
    """The version is an upstream fact (trtspec.upstream.triton, with its source), stated once."""
    script = export_genai_perf(tmp_path / "gp", prompts=PROMPTS, url="127.0.0.1:8001", model="generate",
                               tokenizer=tokenizer_dir(tmp_path), max_tokens=8, concurrency=[1], baseline=False)
    assert json.loads((tmp_path / "gp" / MANIFEST).read_text())["genai_perf_version"] == GENAI_PERF_VERSION
    assert f"# Needs genai-perf=={GENAI_PERF_VERSION} and perf_analyzer" in script.read_text()


def test_sampled_workloads_send_their_settings(tmp_path):
    from trtspec.options import Sampling
    from trtspec.perf.genai_perf import genai_perf_inputs

    assert genai_perf_inputs(Sampling()) == {}
    chat = genai_perf_inputs(Sampling(temperature=0.8, top_p=0.9, seed=3))
    assert chat == {"temperature": 0.8, "seed": 3, "top_p": 0.9}
    script = export_genai_perf(tmp_path / "gp", prompts=PROMPTS, url="127.0.0.1:8001", model="generate",
                               tokenizer=tokenizer_dir(tmp_path), max_tokens=8, concurrency=[1], baseline=True,
                               sampling={"chat": chat})
    for r in json.loads((tmp_path / "gp" / MANIFEST).read_text())["runs"]:
        extra = [json.loads(x) for x in flag(r["argv"], "--extra-inputs")]
        assert (chat in extra) == (r["workload"] == "chat")  # baseline and speculative runs alike
    assert script.is_file()


def deterministic_payload(text: str, n: int) -> dict:
    """One request of `genai-perf profile --endpoint-type kserve --backend tensorrtllm --streaming
    --output-tokens-mean N --output-tokens-stddev 0 --output-tokens-mean-deterministic` (0.0.16's
    tensorrtllm converter, as trtspec.upstream.triton records it): min_length rides along with max_tokens."""
    from trtspec.upstream.triton import GENAI_PERF_MIN_TOKENS_INPUT

    return {"model": "generate", "text_input": [text], "max_tokens": [n], "exclude_input_in_output": [True],
            "stream": [True], GENAI_PERF_MIN_TOKENS_INPUT: [n]}


class SpecDecodeRecorder:
    """A draft-target repository's preprocessing / spec_decode / postprocessing; keeps spec_decode's inputs."""

    def __init__(self):
        from triton_repo.test_generate import EndsOnEos

        self.inner, self.spec_inputs = EndsOnEos(), []

    def exec(self, req, decoupled):
        if req.model == "spec_decode":
            self.spec_inputs.append(req.inputs)
        return self.inner.exec(req, decoupled)


@pytest.fixture()
def generate_model(monkeypatch):
    """generate.py of a draft-target repository without a server (tests/triton_repo/test_generate.py's stand-in)."""
    from triton_repo.test_generate import forget_models, load_generate

    band = {"concurrency": 1, "num_draft_tokens": 3}
    routing = {"mode": "draft-target", "workloads": {"chat": [band]}, "default": {"bands": [band]}}
    server = SpecDecodeRecorder()
    model, _, common = load_generate(monkeypatch, {"routing": json.dumps(routing), "max_concurrency": "1"}, False,
                                     server)
    yield model, server, common
    model.finalize()
    forget_models()


def as_request(payload: dict):
    """A payload as Triton hands it to generate: each input typed as generate declares it."""
    import numpy as np
    from triton_repo.test_generate import ClientRequest, Tensor
    from trtspec.triton_repo.contracts import GENERATE_INPUTS

    dtypes = {t.name: t.data_type for t in GENERATE_INPUTS}
    numpy = {"TYPE_STRING": object, "TYPE_INT32": np.int32, "TYPE_BOOL": bool}
    request = ClientRequest(None)
    request.inputs = {}
    for name, value in payload.items():
        if name != "model":
            v = [x.encode() if isinstance(x, str) else x for x in value]
            request.inputs[name] = Tensor(name, np.array([v], dtype=numpy[dtypes[name]]))
    return request


def test_generate_takes_the_deterministic_output_length_payload(generate_model):
    """--output-tokens-mean-deterministic sends min_length: generate declares every input of that payload
    (Triton refuses an undeclared one) and applies it as min_tokens."""
    from triton_repo.test_generate import Sender
    from trtspec.triton_repo.contracts import GENERATE_INPUTS

    model, server, common = generate_model
    payload = deterministic_payload("Why?", 12)
    declared = {t.name: t for t in GENERATE_INPUTS}
    assert {k for k in payload if k != "model"} <= set(declared)
    assert declared["min_length"].data_type == declared["min_tokens"].data_type == "TYPE_INT32"
    model._generate(as_request(payload), Sender(), 1)
    [sent] = server.spec_inputs
    assert sent["min_tokens"].tolist() == [[12]]
    # min_length beside an equal min_tokens is the same request; a different one is refused by name
    model._generate(as_request({**payload, "min_tokens": [12]}), Sender(), 1)
    assert server.spec_inputs[-1]["min_tokens"].tolist() == [[12]]
    with pytest.raises(common.RequestError, match=r"^min_length: 12 differs from min_tokens: 3 "):
        model._generate(as_request({**payload, "min_tokens": [3]}), Sender(), 1)
    assert len(server.spec_inputs) == 2


def test_the_script_sends_speculation_and_baseline_in_perfs_alternating_order(tmp_path):
    """The half sent second is favoured by a warm server (KV-cache reuse): perf alternates which goes
    first from load point to load point, workloads counted in turn (order.forward), and so must the
    exported script; it used to send speculation first at every load point."""
    script = export_genai_perf(tmp_path / "gp", prompts=PROMPTS, url="h:1", model="m", tokenizer=tokenizer_dir(tmp_path),
                               max_tokens=8, concurrency=[1, 4], request_rate=2.0, requests=4, baseline=True)
    sent = [(flag(argv, "--input-file")[0][len("inputs/"):][:2], (flag(argv, "--concurrency") or ["r"])[0],
             {"speculation": False} not in [json.loads(x) for x in flag(argv, "--extra-inputs")])
            for argv in script_commands(script)]
    on_off, off_on = (True, False), (False, True)
    planned = [(w, c, on) for w, points in (("00", (("1", on_off), ("4", off_on), ("r", on_off))),
                                            ("01", (("1", off_on), ("4", on_off), ("r", off_on))))
               for c, order in points for on in order]
    assert sent == planned
