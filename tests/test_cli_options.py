"""Each stage states a default once: its options model. The Typer commands' defaults must equal the
model's, every CLI option that sets an option must be a model field, and each recipe section must be
the model (same keys, same defaults; recipe-only keys and the one deliberate difference named here)."""

from __future__ import annotations

import copy
import inspect

import pytest

from trtspec import cli
from trtspec.builders.command import build_command
from trtspec.builders.options import BuildOptions
from trtspec.quality.quantize_command import quantize_command
from trtspec.calib.options import QuantizeOptions
from trtspec.checkpoints.options import ConvertOptions, EagleOptions
from trtspec.options import default
from trtspec.perf.command import perf_command
from trtspec.perf.options import PerfOptions, PerfSettings
from trtspec.quality.command import quant_report_command
from trtspec.quality.options import QualityReportOptions, QuantizeStage, QuantReportOptions
from trtspec.recipe import Recipe
from trtspec.runtime.options import GenerateOptions
from trtspec.triton_repo.command import serve_command, triton_command
from trtspec.triton_repo.options import Ports, ServeOptions, TritonOptions
from trtspec.tuning.command import measure_cost_command, tune_command
from trtspec.tuning.options import MeasureConfig, ProfileOptions, TuneOptions
from trtspec.tuning.profile_command import profile_command


def ints(v):
    return ",".join(map(str, v))


def entries(v):
    return ",".join(f"{n}={s}" for n, s in v.items())


def none_is_empty(v):
    return None if v == [] else v


# command -> {CLI parameter: (model, field, how the CLI writes the model's default)}. Parameters not
# listed are inputs/outputs of one invocation (paths, --out, --dry-run, --json, ...): see NOT_OPTIONS.
EAGLE = {"max_draft_len": (EagleOptions, "max_draft_len", None), "num_eagle_layers": (EagleOptions,
         "num_eagle_layers", None), "max_non_leaves": (EagleOptions, "max_non_leaves", None)}
CONVERT = {"dtype": (ConvertOptions, "dtype", None), "tp": (ConvertOptions, "tp", None),
           "allow_pickle": (ConvertOptions, "allow_pickle", None)}
COMMANDS = {
    "convert": (cli.convert, {**CONVERT, **EAGLE}),
    "generate": (cli.generate, {**{f: (GenerateOptions, f, None) for f in GenerateOptions.model_fields},
                                "stop_words": (GenerateOptions, "stop_words", none_is_empty),
                                "bad_words": (GenerateOptions, "bad_words", none_is_empty)}),
    "build": (build_command, {**{f: (BuildOptions, f, None) for f in BuildOptions.model_fields if f != "timeout_s"},
                              "timeout": (BuildOptions, "timeout_s", None)}),
    "profile": (profile_command, {f: (ProfileOptions, f, None) for f in ProfileOptions.model_fields}),
    "tune": (tune_command, {**{f: (TuneOptions, f, None) for f in TuneOptions.model_fields},
                            "concurrency_bands": (TuneOptions, "concurrency_bands", ints)}),
    "measure-cost": (measure_cost_command, {"batches": (MeasureConfig, "batches", ints),
                                            "num_tokens": (MeasureConfig, "num_tokens", ints),
                                            "context": (MeasureConfig, "context", None),
                                            "repeats": (MeasureConfig, "repeats", None),
                                            "device": (MeasureConfig, "device", None),
                                            "dtype": (MeasureConfig, "dtype", None),
                                            "compile_layers": (MeasureConfig, "compile_layers", None),
                                            "fp8_gemm": (MeasureConfig, "fp8_gemm", None)}),
    "triton": (triton_command, {f: (TritonOptions, f, None) for f in TritonOptions.model_fields}),
    "serve": (serve_command, {"timeout": (ServeOptions, "start_timeout_s", None),
                              "drain_timeout": (ServeOptions, "drain_timeout_s", None),
                              "model_control": (ServeOptions, "model_control", None),
                              **{f"{p}_port": (Ports, p, None) for p in Ports.model_fields}}),
    "perf": (perf_command, {**{f: (PerfOptions, f, None) for f in PerfOptions.model_fields
                               if f not in ("workloads", "out", "duration_s", "timeout_s", "connect_timeout_s")},
                            "concurrency": (PerfOptions, "concurrency", none_is_empty),
                            "duration": (PerfOptions, "duration_s", None), "timeout": (PerfOptions, "timeout_s", None),
                            "connect_timeout": (PerfOptions, "connect_timeout_s", None)}),
    "quant-report": (quant_report_command, {**{f: (QuantReportOptions, f, None)
                                               for f in QuantReportOptions.model_fields},
                                            "workloads": (QuantReportOptions, "workloads", entries)}),
}
QUANT_FIELDS = {f: (QuantizeStage, f, None) for f in QuantizeOptions.model_fields
                if f not in ("format", "calib", "samples", "seq_len", "exclude")}
COMMANDS["quantize"] = (quantize_command, {
    **QUANT_FIELDS, **CONVERT, **EAGLE, "report": (QuantizeStage, "report", None),
    "calib_samples": (QuantizeStage, "samples", None), "calib_seq_len": (QuantizeStage, "seq_len", None),
    "exclude": (QuantizeStage, "exclude", none_is_empty),
    "report_workloads": (QualityReportOptions, "workloads", entries),
    "report_samples": (QualityReportOptions, "samples", None),
    "report_max_new_tokens": (QualityReportOptions, "max_new_tokens", None)})

# Inputs and outputs of one invocation, and CLI-only switches: not options of the stage.
NOT_OPTIONS = {
    "convert": {"hf", "out", "eagle", "draft"},
    "generate": {"ckpt", "draft_ckpt", "eagle3_head", "prompt", "prompt_ids", "as_json"},
    "quantize": {"hf", "out", "eagle", "draft", "format", "calib"},
    "build": {"ckpt", "out", "dry_run"},
    "profile": {"ckpt", "workloads", "draft_ckpt", "eagle3_head", "out"},
    "tune": {"profile", "target_ckpt", "draft_ckpt", "out", "plots", "no_plots"},
    "measure-cost": {"target_ckpt", "draft_ckpt", "out"},
    "triton": {"tuning", "out", "engines", "draft_engines", "ckpt", "draft_ckpt", "tokenizer", "overwrite", "check"},
    "serve": {"repo", "log_file", "exec_", "image"},
    "perf": {"workloads", "out", "export_genai_perf"},
    "quant-report": {"ckpt", "ref", "draft_ckpt", "ref_draft_ckpt", "out"},
}


def cli_defaults(fn) -> dict:
    return {name: p.default.default for name, p in inspect.signature(fn).parameters.items()}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_cli_defaults_are_the_options_models(name):
    fn, table = COMMANDS[name]
    got = cli_defaults(fn)
    assert set(got) == set(table) | NOT_OPTIONS[name], f"{name}: CLI parameters not mapped to a model field"
    for param, (model, field, written) in table.items():
        want = default(model, field)
        want = written(want) if written else want
        assert got[param] == want, f"trtspec {name} --{param.replace('_', '-')}: CLI default {got[param]!r}, " \
                                   f"{model.__name__}.{field} default {want!r}"


# recipe section -> (its options model(s), recipe-only keys, deliberate default differences)
SECTIONS = {
    "quantization": ((QuantizeStage,), set(), {}),
    "build": ((BuildOptions,), {"engines"}, {}),
    "profile": ((ProfileOptions,), set(), {}),
    "tune": ((TuneOptions,), set(), {}),
    "triton": ((TritonOptions, ServeOptions), set(), {}),
    "perf": ((PerfSettings,), set(), {"baseline": True}),  # a recipe measures the speedup
    "eagle": ((EagleOptions,), set(), {}),
}


def section_model(name: str):
    ann = Recipe.model_fields[name].annotation
    return next(a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type))


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_recipe_sections_are_the_options_models(name):
    models, recipe_only, differs = SECTIONS[name]
    section = section_model(name)
    fields = set().union(*(m.model_fields for m in models))
    assert set(section.model_fields) == fields | recipe_only
    for model in models:
        for field, info in model.model_fields.items():
            if info.is_required() or section.model_fields[field].is_required():
                continue
            want = differs.get(field, default(model, field))
            assert default(section, field) == want, f"recipe {name}.{field}: {default(section, field)!r} vs " \
                                                    f"{model.__name__}.{field} {want!r}"


def test_recipe_top_level_convert_keys_are_convert_options():
    for field in ConvertOptions.model_fields:
        assert field in Recipe.model_fields and default(Recipe, field) == default(ConvertOptions, field)


def test_a_differing_default_is_caught(monkeypatch):
    """The check above can fail: a CLI default that is not the model's is reported."""
    fn = COMMANDS["profile"][0]
    sig = inspect.signature(fn)
    other = copy.copy(sig.parameters["max_k"].default)
    other.default += 1
    changed = sig.replace(parameters=[p.replace(default=other) if n == "max_k" else p
                                      for n, p in sig.parameters.items()])
    monkeypatch.setattr(fn, "__signature__", changed, raising=False)
    with pytest.raises(AssertionError, match="--max-k"):
        test_cli_defaults_are_the_options_models("profile")


def test_a_recipe_override_is_caught(monkeypatch):
    """... and so is a recipe section whose default differs from its model's without being named."""
    monkeypatch.setitem(SECTIONS, "perf", ((PerfSettings,), set(), {}))
    with pytest.raises(AssertionError, match="perf.baseline"):
        test_recipe_sections_are_the_options_models("perf")


# ---- errors: the library names the field, the CLI the flag, the recipe the file ----------------------

def test_library_errors_name_the_field_and_the_cli_rewords_them(tmp_path):
    from trtspec.errors import TrtspecError
    from trtspec.options import flag_context, from_cli
    from trtspec.perf.runner import check_options
    from trtspec.tuning.gpus import gpu_preset

    with pytest.raises(TrtspecError, match=r"^tune\.cost: unknown GPU 'a100'"):
        gpu_preset("a100")
    with pytest.raises(TrtspecError, match=r"^--cost: unknown GPU 'a100'"), flag_context("tune"):
        gpu_preset("a100")
    with pytest.raises(TrtspecError, match=r"^--calib-samples: expected"), flag_context("quantization",
                                                                                       {"samples": "--calib-samples"}):
        raise TrtspecError("quantization.samples: expected a positive integer, got 0")
    with pytest.raises(TrtspecError, match=r"^perf\.requests: "):
        check_options(dict(workloads={"chat": "mt-bench"}, out=tmp_path, requests=0))
    with pytest.raises(TrtspecError, match=r"^--max-k: "):
        from_cli(ProfileOptions, max_k=0)


def test_recipe_errors_name_the_file_and_section():
    from trtspec.errors import TrtspecError
    from trtspec.recipe import parse_recipe

    base = {"target": "t", "draft": {"hf": "d"}, "workloads": {"chat": "mt-bench"}}
    with pytest.raises(TrtspecError, match=r"^r\.yaml: profile\.max_k: "):
        parse_recipe({**base, "profile": {"max_k": 0}}, "r.yaml")
    with pytest.raises(TrtspecError, match=r"^r\.yaml: quantization\.report\.samples: "):
        parse_recipe({**base, "quantization": {"format": "fp8", "report": {"samples": 0}}}, "r.yaml")
    recipe = parse_recipe({**base, "quantization": {"format": "fp8", "exclude": ["*.mlp.proj"], "keep_sensitive": 2,
                                                    "sensitivity_samples": 4, "sensitivity_seq_len": 32}}, "r.yaml")
    assert recipe.quantization.exclude == ["*.mlp.proj"] and recipe.quantization.keep_sensitive == 2
