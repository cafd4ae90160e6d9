"""The default route of a chain repository (triton_repo/routing.py): what an unknown or missing
workload is served, computed from the tuned workloads' sweeps."""

from __future__ import annotations

import math

import pytest

from triton_fixtures import LLAMA, fake_ckpt
from trtspec.triton_repo.routing import draft_target_routes
from trtspec.tuning.schema import dump_json
from trtspec.tuning.select import SelectConfig
from trtspec.tuning.synthetic import ngram_profile
from trtspec.tuning.tune import run_tune

BANDS = [1, 64]


@pytest.fixture(scope="module")
def clear(tmp_path_factory):
    """tune.speculate_only_if_clear on an n-gram profile (as test_command's): chat's small gain over
    3 prompts x 16 tokens is inside its AL noise (held off), edit's is clear. Each workload tuned
    alone as well, so that a default route over one workload can be compared with its own band."""
    d = tmp_path_factory.mktemp("routing")
    target = fake_ckpt(d / "t", LLAMA)

    def tune(alphas: dict[str, float], name: str, only_if_clear: bool = True):
        prof = ngram_profile(alphas, [2], num_samples=3, T=16, max_k=4, target=str(target))
        (d / f"{name}.json").write_text(dump_json(prof))
        return run_tune(d / f"{name}.json", "h100", target, None, SelectConfig(concurrency_bands=BANDS),
                        speculate_only_if_clear=only_if_clear)
    return {"chat": tune({"chat": 0.05}, "chat"), "edit": tune({"edit": 0.9}, "edit"),
            "chat-plain": tune({"chat": 0.05}, "chat-plain", only_if_clear=False)}


def _setting(band) -> dict:
    out = {"concurrency": band.concurrency, "num_draft_tokens": band.draft_len}
    if band.max_matching_ngram_size is not None:
        out["max_matching_ngram_size"] = band.max_matching_ngram_size
    return out


def test_a_default_over_one_workload_is_its_own_band_held_off_or_not(clear):
    """Over one workload the token-weighted sweep is that workload's sweep and its standard errors
    are its own, so the default route must be the band the tuner served it (select.held_off): off
    where speculation was held back as not clear, the clear setting where it was not. Without
    speculate_only_if_clear the default is the plain argmax, as the workload's band is."""
    chat = clear["chat"]
    assert chat.speculate_only_if_clear
    bands = chat.workloads["chat"].bands
    assert all(b.held_off is not None and b.draft_len == 0 for b in bands)  # the premise: chat held off
    default = draft_target_routes(chat)["default"]
    assert default["bands"] == [_setting(b) for b in bands]
    assert "not distinguishable from off" in default["source"] and "speculate_only_if_clear" in default["source"]

    edit = clear["edit"]
    assert all(b.speculate for b in edit.workloads["edit"].bands)  # clear: served as tuned
    default = draft_target_routes(edit)["default"]
    assert default["bands"] == [_setting(b) for b in edit.workloads["edit"].bands]
    assert "not distinguishable" not in default["source"]

    plain = clear["chat-plain"]
    assert not plain.speculate_only_if_clear
    assert draft_target_routes(plain)["default"]["bands"] == [_setting(b) for b in plain.workloads["chat"].bands]


def _copies(tuning, n: int):
    """The tuning with its one workload repeated n times (equal weights, independent errors)."""
    (w,) = tuning.workloads.values()
    return tuning.model_copy(update={"workloads": {f"w{i}": w for i in range(n)}})


def test_the_default_s_standard_error_adds_over_independent_workloads_in_quadrature(clear):
    """n equal workloads, each held off: the token-weighted gain is n times one workload's and its
    standard error sqrt(n) times (sqrt of the sum of (weight x SE)^2), so the default becomes clear
    exactly when sqrt(n) x gain / SE exceeds 1.96. n is taken on either side of that from the held
    choice's own numbers at concurrency 1 (a linear sum of errors would never become clear)."""
    from trtspec.tuning.select import tokens_per_s_se

    band = clear["chat"].workloads["chat"].bands[0]
    held = band.held_off
    se = tokens_per_s_se(held.tokens_per_s, held.acceptance_length, held.acceptance_length_se)
    ratio = (held.tokens_per_s - held.baseline_tokens_per_s) / (1.96 * se)
    assert 0 < ratio < 1  # held: inside the noise alone
    need = 1 / ratio ** 2  # copies whose combined gain is 1.96 standard errors
    below, above = max(1, math.floor(need * 0.9)), math.ceil(need * 1.1)
    assert below < need < above
    at1 = lambda n: draft_target_routes(_copies(clear["chat"], n))["default"]["bands"][0]
    assert at1(below)["num_draft_tokens"] == 0
    assert at1(above) == {"concurrency": 1, "num_draft_tokens": held.draft_len,
                          "max_matching_ngram_size": held.max_matching_ngram_size}


def test_off_winning_outright_is_said_in_the_source(clear):
    """A band whose best token-weighted setting is off (no noise rule needed: every speculating point
    halved) is K = 0, and the source says off predicts the most tokens/s there."""
    t = clear["chat-plain"]
    w = t.workloads["chat"]

    def halved(band):
        return band.model_copy(update={"sweep": [p.model_copy(update={"tokens_per_s": p.tokens_per_s / 2})
                                                 if p.draft_len else p for p in band.sweep]})
    t = t.model_copy(update={"workloads": {"chat": w.model_copy(update={"bands": [halved(b) for b in w.bands]})}})
    default = draft_target_routes(t)["default"]
    assert [b["num_draft_tokens"] for b in default["bands"]] == [0, 0]
    assert default["source"].count("off predicts the most tokens/s") == 2


def test_a_default_over_a_workload_without_a_standard_error_is_not_clear(clear):
    """A workload profiled on one prompt has an AL but no standard error (select.se_unknown). Under
    speculate_only_if_clear the token-weighted default is then not clear of off, however large the
    gain (edit's clear K), alone or beside a workload whose errors are known; the source says why.
    Without the rule it is the argmax, as before."""
    edit = clear["edit"]
    w = edit.workloads["edit"]

    def unknown(band):
        sweep = [p.model_copy(update={"acceptance_length_se": None}) if p.draft_len else p for p in band.sweep]
        return band.model_copy(update={"acceptance_length_se": None, "sweep": sweep})
    one = w.model_copy(update={"bands": [unknown(b) for b in w.bands], "num_prompts": 1})
    for workloads in ({"edit": one}, {"edit": w, "one": one}):
        default = draft_target_routes(edit.model_copy(update={"workloads": workloads}))["default"]
        assert [b["num_draft_tokens"] for b in default["bands"]] == [0, 0]
        assert default["source"].count("is not shown clear of off: a workload's AL has no standard error") == 2
    plain = edit.model_copy(update={"workloads": {"edit": one}, "speculate_only_if_clear": False})
    assert draft_target_routes(plain)["default"]["bands"] == [_setting(b) for b in w.bands]
