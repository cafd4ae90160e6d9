"""Replay math against hand-computed sequences, and the profile.json model's checks.

Every golden number below was worked out by hand from the step rule in
trtspec/tuning/acceptance.py: replay starts at state 1 (the prefill emits x_1), a step at state t
accepts a_t and moves to t + a_t + 1, and stops once t >= T; the step that reaches T emits only
the T - t tokens left and offers nothing past them (as TensorRT-LLM counts a request's last step).
"""

from __future__ import annotations

import json

import pytest

from trtspec.errors import TrtspecError
from trtspec.tuning.acceptance import (TreeIndex, acceptance_length, chain_accepted, rank_paths_to_chain,
                                       ratio_se, replay_chain, replay_tree, summarize)
from trtspec.tuning.schema import build_profile, dump_json, load_profile
from trtspec.tuning.synthetic import chain_profile, eagle_profile

# T = 12 states. K=2 visits t = 1, 4, 6, 9, 11 with a = 2, 1, 2, 1, 0; the step at t = 11 emits
# x_12, the last token, so it offers nothing (offered 0, not 1).
M = [1, 2, 0, 3, 1, 0, 2, 2, 0, 1, 0, 0]


def test_chain_golden_k2():
    r = replay_chain([M], 2)
    assert (r.steps, r.tokens) == (5, 11)
    assert r.acceptance_length == pytest.approx(2.2)
    assert r.accepted_at == [4, 2] and r.reached == [4, 4]
    assert r.conditional_rates() == pytest.approx([1.0, 0.5])
    assert r.marginal_rates() == pytest.approx([0.8, 0.4])
    assert 1 + sum(r.marginal_rates()) == pytest.approx(r.acceptance_length)  # AL = 1 + sum of marginals


def test_chain_golden_other_k():
    # K=1 visits t = 1, 3, 5, 6, 8, 9, 11 with a = 1, 1, 0, 1, 0, 1, 0: 7 steps, 11 tokens
    assert replay_chain([M], 1).steps == 7
    assert replay_chain([M], 1).acceptance_length == pytest.approx(11 / 7)
    # K=3 never visits m=3 (state 3), so it replays exactly like K=2
    assert replay_chain([M], 3).acceptance_length == pytest.approx(2.2)
    r0 = replay_chain([M], 0)  # no speculation: one token per step over states 1..11
    assert (r0.steps, r0.acceptance_length, r0.reached) == (11, 1.0, [])


def test_final_step_counts_only_what_it_emits():
    # T = 5; at state 1 the draft matches 4 but only 4 tokens remain: the step emits x_2..x_5 and
    # counts 3 accepted drafts, offering nothing past them (TensorRT-LLM stops at the request's end).
    r = replay_chain([[0, 4, 0, 0, 0]], 4)
    assert (r.steps, r.tokens, r.acceptance_length) == (1, 4, 4.0)
    assert r.accepted_at == [1, 1, 1, 0] and r.reached == [1, 1, 1, 0]
    assert acceptance_length([chain_accepted([0, 4, 0, 0, 0], 4)]) == 4.0  # the fast path counts the same


def test_pooling_is_per_step_across_samples():
    a, b = [0, 1, 1, 1], [0, 0, 0]  # a: t=1 (a1) -> 3 (a1, cut to 0: only x_4 is left) -> 4: 2 steps, 3 tokens
    assert replay_chain([a, b], 1).acceptance_length == pytest.approx(5 / 4)  # b: 2 steps, 2 tokens
    assert acceptance_length([chain_accepted(a, 1), chain_accepted(b, 1)]) == pytest.approx(5 / 4)


TREE = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
SAMPLE_A = [[0, 0], [0, 1, 2], [0, 0, 0], [-1], [1, 0, 0], [0], [3, -1], [2]]  # T = 8
SAMPLE_B = [[], [-1], [0, 0, 0], [0]]  # T = 4


def test_tree_golden_single_sample():
    # t=1 [0,1,2]: [0,1] is a leaf node -> a=2, offered 2 -> t=4; t=4 [1,0,0]: a=2 -> t=7;
    # t=7 [2]: a=0 and x_8 is the last token, so offered 0 (nothing past the end) -> t=8, stop.
    r = replay_tree([SAMPLE_A], TREE)
    assert (r.steps, r.tokens) == (3, 7)
    assert r.acceptance_length == pytest.approx(7 / 3)
    assert r.accepted_at == [2, 2, 0] and r.reached == [2, 2, 0]
    assert r.conditional_rates() == pytest.approx([1.0, 1.0, None])
    assert r.marginal_rates() == pytest.approx([2 / 3, 2 / 3, 0.0])


def test_tree_golden_pooled():
    # B: t=1 [-1] -> a=0, offered 1 -> t=2; t=2 [0,0,0] hits the deepest node (a=3) but only x_3, x_4
    # remain: a=1, offered 1 -> t=4, stop. 5 steps, 7 + 3 tokens.
    r = replay_tree([SAMPLE_A, SAMPLE_B], TREE)
    assert (r.steps, r.tokens, r.acceptance_length) == (5, 10, pytest.approx(2.0))
    assert r.accepted_at == [3, 2, 0] and r.reached == [4, 2, 0]
    assert r.conditional_rates() == pytest.approx([0.75, 1.0, None])
    assert r.marginal_rates() == pytest.approx([0.6, 0.4, 0.0])


def test_chain_tree_equals_chain_replay_of_leading_zeros():
    chain = [[0], [0, 0], [0, 0, 0]]
    samples = [SAMPLE_A, SAMPLE_B]
    as_chain = [rank_paths_to_chain(s, 3) for s in samples]
    assert as_chain[0] == [2, 1, 3, 0, 0, 1, 0, 0]
    for k in (1, 2, 3):
        assert replay_tree(samples, chain[:k]).acceptance_length == replay_chain(as_chain, k).acceptance_length


def test_tree_index_rejects_disconnected_choices():
    with pytest.raises(TrtspecError, match="missing prefix"):
        TreeIndex([[0], [1, 0]])


def test_summarize_matches_replays():
    agg = summarize("draft-target", [M], 3)
    assert agg["accept_length_by_k"] == {"1": pytest.approx(11 / 7), "2": pytest.approx(2.2), "3": pytest.approx(2.2)}
    assert agg["mean_accept_length"] == agg["accept_length_by_k"]["3"]
    assert agg["num_tokens"] == 12 and agg["num_samples"] == 1


def test_iid_chain_matches_the_closed_form():
    """Leviathan et al. §3: E[AL] = (1 - a^(K+1)) / (1 - a) for i.i.d. agreement a (landscape.md §4.2)."""
    p = chain_profile({"w": 0.7}, num_samples=40, T=500, max_k=6, seed=3)
    for k in (1, 3, 6):
        want = (1 - 0.7 ** (k + 1)) / 0.3
        assert p.workloads["w"].accept_length_by_k[str(k)] == pytest.approx(want, rel=0.03)


def test_profile_roundtrip_and_consistency_check(tmp_path):
    p = eagle_profile({"chat": (0.6, 0.1)}, num_samples=3, T=40)
    path = tmp_path / "profile.json"
    path.write_text(dump_json(p))
    again = load_profile(path)
    assert again.workloads["chat"].accept_length_by_k == p.workloads["chat"].accept_length_by_k
    data = json.loads(path.read_text())
    data["workloads"]["chat"]["accept_length_by_k"]["2"] += 0.1
    path.write_text(json.dumps(data))
    with pytest.raises(TrtspecError, match=r"workloads.chat.accept_length_by_k.2' is .* replaying"):
        load_profile(path)


def test_a_profile_of_the_earlier_count_is_refused_not_read(tmp_path):
    """trtspec.profile/1 counted a request's last step whole (past the end of its output), so its
    aggregates are up to one token per sample too high and an n-gram sample's last step may run past
    its eos: such a file is refused by its schema (one line, saying why) rather than read as /2."""
    data = json.loads(dump_json(chain_profile({"chat": 0.7}, num_samples=2, T=20, max_k=3)))
    assert data["schema"] == "trtspec.profile/2"
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data | {"schema": "trtspec.profile/1"}))
    with pytest.raises(TrtspecError, match=r"field 'schema' is 'trtspec.profile/1'; expected 'trtspec.profile/2' "
                                           r"\(it counts a request's last step past the end") as e:
        load_profile(path)
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(schema="trtspec.profile/9"), "field 'schema'"),
    (lambda d: d.update(mode="medusa"), "field 'mode'"),
    (lambda d: d["workloads"]["w"]["samples"][0].update(match_lengths=[0, 9]), r"match_lengths: 9 is outside"),
    (lambda d: d["workloads"]["w"].update(num_tokens=1), "num_tokens"),
    (lambda d: d["workloads"]["w"]["samples"][0].update(rank_paths=[[0]]), "expected 'match_lengths'"),
    (lambda d: d["measurement_conditions"].update(temperature=0.7), "only greedy"),
    (lambda d: d.update(tree_top_k=4), "tree_top_k"),
])
def test_profile_errors_name_the_field(tmp_path, edit, message):
    p = build_profile("draft-target", 2, None, {"target": "t", "max_new_tokens": 4, "dtype": "float16",
                                                "trtspec_version": "0.1.0"},
                      {"w": [{"id": "a", "match_lengths": [0, 1, 2, 0]}]})
    data = json.loads(dump_json(p))
    edit(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TrtspecError, match=message) as e:
        load_profile(path)
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_rank_path_rules(tmp_path):
    ok = [[], [0, 1], [2, -1], [-1]]
    build_profile("eagle", 2, 3, {"target": "t", "max_new_tokens": 4, "dtype": "float16", "trtspec_version": "x"},
                  {"w": [{"id": "a", "rank_paths": ok}]})
    for bad in ([0, 0, 0], [-1, 0], [3]):
        with pytest.raises(ValueError, match=r"samples.0.rank_paths.1: \[.*\] is not a path"):
            build_profile("eagle", 2, 3, {"target": "t", "max_new_tokens": 4, "dtype": "float16",
                                          "trtspec_version": "x"}, {"w": [{"id": "a", "rank_paths": [[], bad, [0]]}]})
    with pytest.raises(ValueError, match="no verify steps"):
        build_profile("eagle", 2, 3, {"target": "t", "max_new_tokens": 1, "dtype": "float16",
                                      "trtspec_version": "x"}, {"w": [{"id": "a", "rank_paths": [[0]]}]})


def test_the_standard_error_counts_only_prompts_with_steps():
    """A one-token answer has no step: it is not a second prompt whose spread was measured, so one
    real prompt beside it has no SE (None), not a zero one the tuner would take as exact."""
    assert ratio_se([(7.0, 4.0), (1.0, 0.0)]) is None
    assert ratio_se([(7.0, 4.0), (5.0, 4.0), (1.0, 0.0)]) == pytest.approx(ratio_se([(7.0, 4.0), (5.0, 4.0)]))
    assert ratio_se([(7.0, 4.0), (5.0, 4.0)]) > 0
