"""Library errors name the options field (`build.role: ...`) or the Python argument (`until: ...`);
the CLI re-words them with the flag the user typed (`--role: ...`), through the same flag_context
(and the same flag maps) the command modules use. The last tests run the real `trtspec` entry point.
"""

from __future__ import annotations

import pytest

from cli_helpers import run_cli
from triton_fixtures import tuning_file
from trtspec.builders.options import BuildOptions
from trtspec.builders.plan import resolve_role
from trtspec.builders.rules import check_options
from trtspec.calib.formats import check_format, check_kv_format
from trtspec.calib.mixed import check_mixed_algo
from trtspec.calib.options import QuantizeOptions
from trtspec.calib.refusals import check_request, quant_dtype
from trtspec.checkpoints.convert import resolve_dtype
from trtspec.checkpoints.eagle import check_eagle_options
from trtspec.checkpoints.options import ConvertOptions, EagleOptions
from trtspec.checkpoints.scheme import QuantScheme
from trtspec.errors import TrtspecError
from trtspec.options import flag_context
from trtspec.perf.options import PerfOptions
from trtspec.perf.prompts import load_tokenizer
from trtspec.pipeline.runner import check_stage
from trtspec.quality.command import REPORT_PARAMS
from trtspec.quality.quantize_command import FLAGS as QUANTIZE_FLAGS
from trtspec.quality.report import quality_report
from trtspec.triton_repo.command import PORT_FLAGS, REPO_PARAMS
from trtspec.triton_repo.options import ServeOptions, TritonOptions
from trtspec.triton_repo.repo import RepoRequest, _check_options
from trtspec.triton_repo.routing import draft_target_routes, eagle_routes
from trtspec.triton_repo.ports import check_ports, free_port
from trtspec.tuning.tuning_schema import load_tuning


def _keep_sensitive_samples(tmp_path):
    from trtspec.calib.pipeline import KeepSensitive
    from trtspec.calib.quantize import check_keep_sensitive

    check_keep_sensitive(KeepSensitive(2, 0), "FP8")


def _repo(tmp_path, **kw):
    _check_options(RepoRequest(tuning=tmp_path / "t.json", out=tmp_path / "o", **kw))


def _tuning(tmp_path, mode):
    """A real tuning.json (bands 1 and 4; workloads chat, code) read back as the routes read it."""
    choices = {"chat": 3, "code": 5} if mode == "draft-target" else {"chat": [[0], [0, 0]], "code": [[0]]}
    return load_tuning(tuning_file(tmp_path / mode / "tuning.json", mode, choices))


BUILD = (BuildOptions, {"timeout_s": "--timeout"}, None)
TRITON = (TritonOptions, None, REPO_PARAMS)
SERVE = (ServeOptions, PORT_FLAGS, None)
QUANT = (QuantizeOptions, QUANTIZE_FLAGS, None)
RUN = (None, None, {"until": "--until", "force": "--force"})

CASES = [  # (library call, what the library says, the command's flag_context, what the CLI says)
    pytest.param(lambda t: resolve_role(t, "medusa"), r"^build\.role: 'medusa' is not one of auto, ",
                 BUILD, r"^--role: 'medusa' is not one of auto, ", id="build.role"),
    pytest.param(lambda t: check_options(BuildOptions(gpu="a100")), r"^build\.gpu: 'a100' is not one of h100",
                 BUILD, r"^--gpu: 'a100' is not one of h100", id="build.gpu"),
    pytest.param(lambda t: check_options(BuildOptions(max_batch_size=0)),
                 r"^build\.max_batch_size: expected a positive integer, got 0",
                 BUILD, r"^--max-batch-size: expected a positive integer, got 0", id="build.max_batch_size"),
    pytest.param(lambda t: check_options(BuildOptions(max_draft_len=0)), r"^build\.max_draft_len: expected >= 1",
                 BUILD, r"^--max-draft-len: expected >= 1", id="build.max_draft_len"),
    pytest.param(lambda t: check_options(BuildOptions(max_input_len=512, max_seq_len=256)),
                 r"^build\.max_input_len: 512 exceeds build\.max_seq_len 256 .*; raise build\.max_seq_len or lower "
                 r"build\.max_input_len$",
                 BUILD, r"^--max-input-len: 512 exceeds --max-seq-len 256 .*; raise --max-seq-len or lower "
                        r"--max-input-len$", id="build.max_input_len"),
    pytest.param(lambda t: _repo(t, flavor="tensorrt"), r"^triton\.flavor: 'tensorrt' is not one of",
                 TRITON, r"^--flavor: 'tensorrt' is not one of", id="triton.flavor"),
    pytest.param(lambda t: _repo(t, flavor="cpu", instances=0), r"^triton\.instances: expected >= 1, got 0",
                 TRITON, r"^--instances: expected >= 1, got 0", id="triton.instances"),
    pytest.param(lambda t: _repo(t, flavor="cpu", engines=t), r"^engines: the cpu flavor serves checkpoints; give "
                 r"`ckpt` \(and `draft_ckpt`\)$", TRITON,
                 r"^--engines: the cpu flavor serves checkpoints; give --ckpt \(and --draft-ckpt\)$",
                 id="RepoRequest.engines"),
    pytest.param(lambda t: _repo(t, flavor="trtllm", engines=t, draft_ckpt=t),
                 r"^`ckpt`/`draft_ckpt`: the trtllm flavor serves engines; give `engines`/`draft_engines`$", TRITON,
                 r"^--ckpt/--draft-ckpt: the trtllm flavor serves engines; give --engines/--draft-engines$",
                 id="RepoRequest.ckpt"),
    pytest.param(lambda t: draft_target_routes(_tuning(t, "draft-target"), "poetry"),
                 r"^triton\.default_workload: 'poetry' is not a workload of the tuning \(chat, code\)$", TRITON,
                 r"^--default-workload: 'poetry' is not a workload of the tuning \(chat, code\)$",
                 id="triton.default_workload"),
    pytest.param(lambda t: eagle_routes(_tuning(t, "eagle"), band=2),
                 r"^triton\.eagle_band: 2 is not a tuned concurrency band \(1, 4\)$", TRITON,
                 r"^--eagle-band: 2 is not a tuned concurrency band \(1, 4\)$", id="triton.eagle_band"),
    pytest.param(lambda t: check_ports({"http": 9000, "grpc": 9000, "metrics": 9001}),
                 r"^triton\.ports: http, grpc and metrics must differ", SERVE,
                 r"^--http-port/--grpc-port/--metrics-port: http, grpc and metrics must differ", id="triton.ports"),
    pytest.param(lambda t: check_ports({"http": free_port(), "grpc": 70000, "metrics": free_port()}),
                 r"^triton\.ports\.grpc: 70000 is not a TCP port$", SERVE, r"^--grpc-port: 70000 is not a TCP port$",
                 id="triton.ports.grpc"),
    pytest.param(lambda t: check_format("fp16"), r"^quantization\.format: unknown format 'fp16'; expected one of",
                 QUANT, r"^--format: unknown format 'fp16'; expected one of", id="quantization.format"),
    pytest.param(lambda t: check_format("int4_awq", "quantization.draft_format"),
                 r"^quantization\.draft_format: int4_awq: .*name for quantization\.draft_format w4a16_awq$", QUANT,
                 r"^--draft-format: int4_awq: .*name for --draft-format w4a16_awq$", id="quantization.draft_format"),
    pytest.param(lambda t: check_kv_format("int4"), r"^quantization\.kv_cache: expected fp8 or int8 .*got 'int4'$",
                 QUANT, r"^--kv-cache: expected fp8 or int8 .*got 'int4'$", id="quantization.kv_cache"),
    pytest.param(lambda t: check_request(QuantScheme(quant_algo="FP8", kv_cache_quant_algo="INT8"), "eagle"),
                 r"^quantization\.kv_cache: int8 with eagle: .*use quantization\.kv_cache fp8", QUANT,
                 r"^--kv-cache: int8 with eagle: .*use --kv-cache fp8", id="quantization.kv_cache-speculative"),
    pytest.param(lambda t: check_request(QuantScheme(quant_algo="W8A8_SQ_PER_CHANNEL"), "eagle"),
                 r"^quantization\.format: int8_sq with an EAGLE head: .*use quantization\.format fp8", QUANT,
                 r"^--format: int8_sq with an EAGLE head: .*use --format fp8", id="quantization.format-eagle"),
    pytest.param(lambda t: check_mixed_algo("W8A16", "quantization.exclude"),
                 r"^quantization\.exclude: keeping linears unquantized needs a calibrated weight format", QUANT,
                 r"^--exclude: keeping linears unquantized needs a calibrated weight format",
                 id="quantization.exclude"),
    pytest.param(_keep_sensitive_samples, r"^quantization\.sensitivity_samples: expected an integer >= 1, got 0$",
                 QUANT, r"^--sensitivity-samples: expected an integer >= 1, got 0$",
                 id="quantization.sensitivity_samples"),
    pytest.param(lambda t: quant_dtype("float32", t), r"^convert\.dtype: float32: .*use convert\.dtype float16",
                 (ConvertOptions, None, None), r"^--dtype: float32: .*use --dtype float16", id="convert.dtype"),
    pytest.param(lambda t: resolve_dtype("int3", t), r"^convert\.dtype: 'int3' is not one of",
                 (ConvertOptions, None, None), r"^--dtype: 'int3' is not one of", id="convert.dtype-unknown"),
    pytest.param(lambda t: check_eagle_options(300, 1, 1), r"^eagle\.max_draft_len: 300 is outside \[1, 256\]",
                 (EagleOptions, None, None), r"^--max-draft-len: 300 is outside \[1, 256\]", id="eagle.max_draft_len"),
    pytest.param(lambda t: check_stage("compile", "until"), r"^until: unknown stage 'compile'", RUN,
                 r"^--until: unknown stage 'compile'", id="run.until"),
    pytest.param(lambda t: check_stage("tuning", "force"), r"^force: unknown stage 'tuning'", RUN,
                 r"^--force: unknown stage 'tuning'", id="run.force"),
    pytest.param(lambda t: quality_report(t / "q", t, []), r"^quant_ckpt: .*/q: not a checkpoint directory$",
                 (None, None, REPORT_PARAMS), r"^--ckpt: .*/q: not a checkpoint directory$", id="quality_report.ckpt"),
    pytest.param(lambda t: quality_report(t, t, [], max_k=0), r"^max_k: expected a positive integer, got 0$",
                 (None, None, REPORT_PARAMS), r"^--max-k: expected a positive integer, got 0$",
                 id="quality_report.max_k"),
    pytest.param(lambda t: load_tokenizer(t / "none"), r"give perf\.tokenizer, or turn perf\.chat off",
                 (PerfOptions, None, None), r"give --tokenizer, or turn --chat off", id="perf.tokenizer"),
]


@pytest.mark.parametrize("call, library, context, cli", CASES)
def test_library_names_the_field_and_the_cli_the_flag(tmp_path, call, library, context, cli):
    with pytest.raises(TrtspecError, match=library) as e:
        call(tmp_path)
    assert " --" not in str(e.value) and not str(e.value).startswith("--"), str(e.value)
    section, flags, params = context
    with pytest.raises(TrtspecError, match=cli), flag_context(section, flags, params):
        call(tmp_path)


def test_flag_context_leaves_paths_and_other_sections_alone():
    text = "build.role: /x/build.sh and triton.flavor stay; build.nope too; `ckpt` is not a param here"
    assert flag_context(BuildOptions).reword(text) == \
        "--role: /x/build.sh and triton.flavor stay; build.nope too; `ckpt` is not a param here"
    assert flag_context(None, params={"ckpt": "--ckpt"}).reword("x: give `ckpt`") == "x: give --ckpt"


# ---- the real entry point: the user sees the flag, never the field ---------------------------------

@pytest.mark.parametrize("args, want", [
    (["build", "--role", "medusa"], "--role: 'medusa' is not one of"),
    (["build", "--max-input-len", "512", "--max-seq-len", "256"],
     "--max-input-len: 512 exceeds --max-seq-len 256 (trtllm-build would silently clip it)"),
    (["triton", "--tuning", "t.json", "--flavor", "tensorrt"], "--flavor: 'tensorrt' is not one of trtllm"),
    (["triton", "--tuning", "t.json", "--flavor", "cpu", "--engines", "."],
     "--engines: the cpu flavor serves checkpoints; give --ckpt (and --draft-ckpt)"),
])
def test_cli_errors_say_the_flag(tmp_path, capsys, args, want):
    out = ["--ckpt", tmp_path] if args[0] == "build" else []
    code, _, err = run_cli(capsys, *args, *out, "--out", tmp_path / "o")
    assert code == 2 and want in err, err
    assert "build." not in err and "triton." not in err and "`" not in err, err
