"""generate's stopping rules end to end on the bundled tritonserver (cpu flavor, tiny draft-target pair).

A request with stop_words, bad_words, min_tokens (and an end_id the output reaches early, so that
min_tokens has an end to hold back) must return exactly the text trtspec.runtime's loop gives with
the same rules (trtspec.runtime.words): through spec_decode with the workload's K, with speculation
off (the plain target), through spec_decode's BLS rounds (the trtllm flavor's orchestration, against
the cpu tensorrt_llm stand-ins), and from the cpu tensorrt_llm itself given upstream's [1, 2, N]
lists. The rules are picked from the runtime's own outputs so that each one changes the text.
return_log_probs false is accepted; true is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest

from serve_helpers import DT, PROMPTS, bls_engine, procs_mentioning, request, text_of, value
from triton_fixtures import cpu_repository, serve_this_trtspec, tiny_pair
from trtspec.runtime.generate import load_models, stream_request
from trtspec.runtime.words import Words
from trtspec.triton_repo.models.word_rules import word_list_format
from trtspec.triton_repo.ports import server_ports
from trtspec.triton_repo.serve import CpuServer

grpcclient = pytest.importorskip("tritonclient.grpc")
pytestmark = pytest.mark.usefixtures("one_torch_thread")
MAX_TOKENS = 16
MIN_TOKENS = 4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_words").resolve()
    pair = tiny_pair(d)
    repo = serve_this_trtspec(cpu_repository(d, "draft-target", pair, DT)[0])
    server = CpuServer(repo, *server_ports(), log_file=d / "server.log",
                       model_control=True).start(240)  # model control: bls_engine reloads spec_decode
    yield {"url": server.grpc_url, "models": load_models(pair / "target", pair / "draft", tokenizer=False),
           "tok": __import__("transformers").AutoTokenizer.from_pretrained(str(pair / "target"))}
    assert server.stop() == 0
    assert procs_mentioning(str(repo)) == []


def run(info, ids, mode="greedy", k=None, words=Words(), end=None, min_tokens=0):
    """trtspec.runtime's steps for the prompt ids (eos: `end`, else the tokenizer's)."""
    eos = (info["tok"].eos_token_id,) if end is None else (end,)
    return list(stream_request(info["models"], ids, MAX_TOKENS, mode, draft_len=k, eos_ids=eos, words=words,
                               min_tokens=min_tokens))


def tokens(steps) -> list[int]:
    return [t for s in steps for t in s.tokens]


@pytest.fixture(scope="module")
def rules(served):
    """(request inputs, Words, end id) picked so that each rule matters: the bad token is the plain
    output's second; the end id comes early in what is left (held back by min_tokens); the stop word
    is two tokens of the output under those rules, which then ends there."""
    tok, ids = served["tok"], served["tok"].encode(PROMPTS["chat"])
    bad = (tokens(run(served, ids))[1],)
    end = tokens(run(served, ids, words=Words.of(bad=[bad])))[1]
    held = tokens(run(served, ids, words=Words.of(bad=[bad]), end=end, min_tokens=MIN_TOKENS))
    assert len(held) > MIN_TOKENS + 3 and end not in held[:MIN_TOKENS]
    stop = tuple(held[MIN_TOKENS + 1:MIN_TOKENS + 3])
    words = Words.of(stop=[stop], bad=[bad])
    for ids_ in (stop, bad):  # the strings tokenize back to the ids (preprocessing encodes them so)
        assert tok.encode(tok.decode(list(ids_)), add_special_tokens=False) == list(ids_)
    inputs = {"stop_words": ([tok.decode(list(stop))], "BYTES"), "bad_words": ([tok.decode(list(bad))], "BYTES"),
              "min_tokens": (MIN_TOKENS, "INT32"), "end_id": (end, "INT32")}
    return inputs, words, end


def expected(served, rules, mode="greedy", k=None):
    _, words, end = rules
    steps = run(served, served["tok"].encode(PROMPTS["chat"]), mode, k, words, end, MIN_TOKENS)
    out = tokens(steps)
    assert steps[-1].finish_reason == "stop" and len(out) == MIN_TOKENS + 3  # ends on the stop word
    return served["tok"].decode(out, skip_special_tokens=True), steps[-1].stats.acceptance_length, len(out)


def test_spec_decode_applies_the_rules_as_the_runtime_does(served, rules):
    k = DT["chat"][0]
    want, al, n = expected(served, rules, "draft-target", k)
    assert want == expected(served, rules)[0]  # lossless: the greedy text under the same rules
    pieces, last = request(served["url"], PROMPTS["chat"], "chat", extra=rules[0])
    assert text_of(pieces) == want and value(last, "num_output_tokens") == n
    assert value(last, "num_draft_tokens") == k and value(last, "acceptance_length") == pytest.approx(al, rel=1e-6)
    pieces, last = request(served["url"], PROMPTS["chat"], "chat",
                           extra={**rules[0], "speculation": (False, "BOOL")})  # the plain target
    assert text_of(pieces) == want and value(last, "num_draft_tokens") == 0
    plain, _ = request(served["url"], PROMPTS["chat"], "chat")
    assert text_of(plain) != want


def test_spec_decode_bls_rounds_apply_the_rules(served, rules):
    """The trtllm flavor's rounds: the word lists and the remaining min_tokens go to each round's
    target request (here the cpu tensorrt_llm), and a round ending on the stop word ends the request."""
    want = expected(served, rules)[0]
    with bls_engine(served["url"]):
        pieces, last = request(served["url"], PROMPTS["chat"], "chat", extra=rules[0])
    assert text_of(pieces) == want and value(last, "num_draft_tokens") == DT["chat"][0]


def test_cpu_tensorrt_llm_takes_upstreams_word_lists(served, rules):
    _, words, end = rules
    ids = served["tok"].encode(PROMPTS["chat"])
    want = tokens(run(served, ids, words=words, end=end, min_tokens=MIN_TOKENS))
    base = {"input_ids": (ids, "INT32"), "input_lengths": (len(ids), "INT32"),
            "request_output_len": (MAX_TOKENS, "INT32"), "exclude_input_in_output": (True, "BOOL"),
            "end_id": (end, "INT32"), "min_tokens": (MIN_TOKENS, "INT32")}
    lists = {name: np.array(word_list_format([seqs]), np.int32) for name, seqs in (("stop_words_list", words.stop),
                                                                  ("bad_words_list", words.bad))}
    _, last = request(served["url"], "", model="tensorrt_llm", extra=base, arrays=lists)
    assert last.as_numpy("output_ids").reshape(-1).tolist() == want


def test_return_log_probs_false_is_accepted_and_true_refused_by_name(served, rules):
    want = expected(served, rules, "draft-target", DT["chat"][0])[0]
    pieces, _ = request(served["url"], PROMPTS["chat"], "chat",
                        extra={**rules[0], "return_log_probs": (False, "BOOL")})
    assert text_of(pieces) == want
    with pytest.raises(Exception, match=r"return_log_probs: not supported by trtspec's generate \(no cum_log_probs"):
        request(served["url"], PROMPTS["chat"], "chat", extra={"return_log_probs": (True, "BOOL")})


def test_a_request_ending_on_its_end_id_counts_the_same_tokens_on_every_engine(served):
    """The end id that ends a request is returned by none of the models (TensorRT-LLM's executor
    returns none): generate's text and num_output_tokens are the same with speculation (spec_decode,
    in-process runtime), without it (K = 0), through spec_decode's BLS rounds, and equal to what the
    cpu tensorrt_llm target alone returns. The acceptance length still counts the step that
    produced the end id (as trtspec.runtime counts it)."""
    tok, ids = served["tok"], served["tok"].encode(PROMPTS["chat"])
    plain = tokens(run(served, ids))
    i = next(i for i in range(2, len(plain)) if plain[i] not in plain[:i])
    end, want = plain[i], plain[:i]
    k = DT["chat"][0]
    al = run(served, ids, "draft-target", k, end=end)[-1].stats.acceptance_length
    base = {"input_ids": (ids, "INT32"), "input_lengths": (len(ids), "INT32"), "end_id": (end, "INT32"),
            "request_output_len": (MAX_TOKENS, "INT32"), "exclude_input_in_output": (True, "BOOL")}
    _, last = request(served["url"], "", model="tensorrt_llm", extra=base)
    assert last.as_numpy("output_ids").reshape(-1).tolist() == want
    got = {}
    for name, extra in (("spec", {}), ("off", {"speculation": (False, "BOOL")})):
        pieces, last = request(served["url"], PROMPTS["chat"], "chat", extra={"end_id": (end, "INT32"), **extra})
        got[name] = text_of(pieces), value(last, "num_output_tokens")
        if name == "spec":
            assert value(last, "acceptance_length") == pytest.approx(al, rel=1e-6)
    with bls_engine(served["url"]):
        pieces, last = request(served["url"], PROMPTS["chat"], "chat", extra={"end_id": (end, "INT32")})
        got["bls"] = text_of(pieces), value(last, "num_output_tokens")
    text = tok.decode(want, skip_special_tokens=True)
    assert got == {"spec": (text, len(want)), "off": (text, len(want)), "bls": (text, len(want))}
