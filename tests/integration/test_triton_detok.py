"""Streamed text on a live cpu-flavor server with a byte-level BPE tokenizer (SmolLM2's).

The tests' word-level tokenizer decodes every token to the same text whatever follows it. SmolLM2's
does not: a character of several UTF-8 bytes comes as one byte token per step, and its
clean_up_tokenization_spaces rewrites text across steps (" '" then "s" decodes as "'s", " n" then
"'t" as "n't", " " then "." as "."). So the model here is a pure-bigram tiny Llama over SmolLM2's
vocabulary whose greedy output walks a chosen chain of such tokens, and what is asserted is what a
client sees: the streamed pieces concatenate to the non-streamed text, which is the tokenizer's
decode of the output ids, with no replacement character on the way, and the same counts, whether
each step brings one token (speculation off) or several (K = 2, 4).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from serve_helpers import request, start_cli, stop_cli, text_of, value
from tiny_models import make_hf_model, scale_layer_outputs
from triton_fixtures import cpu_repository
from trtspec.checkpoints.pair import convert_pair
from trtspec.runtime.generate import load_models, stream_request

pytest.importorskip("tritonclient.grpc")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

PROMPT = "Hello"
MAX_TOKENS = 30
# the greedy chain after PROMPT (SmolLM2 token texts; "Ã", "©" and "ð", "Ł", "ĺ", "Ģ" are the bytes of é and 😀)
CHAIN = ["Ġit", "Ġ'", "s", "Ġok", "Ġ", ".", "Ġcaf", "Ã", "©", "ĠĠ", "ð", "Ł", "ĺ", "Ģ", "Ġdon", "Ġn", "'t", "Ġyes",
         "Ġ,", "Ġ?"]


def chain_model(out: Path, tok) -> None:
    """A tiny Llama over `tok`'s vocabulary whose layers add nothing to the residual stream, so its
    next token is a function of the current one, with an lm_head that maps each token of
    PROMPT + CHAIN to its successor (the last back to the first of CHAIN)."""
    vocab = tok.get_vocab()
    ids = tok.encode(PROMPT) + [vocab[t] for t in CHAIN]
    model = scale_layer_outputs(make_hf_model("llama", out, vocab_size=len(tok), hidden_size=128,
                                              num_key_value_heads=1, max_position_embeddings=512), 0.0)
    with torch.no_grad():
        e = model.model.embed_tokens.weight
        h = e / e.pow(2).mean(-1, keepdim=True).add(model.config.rms_norm_eps).sqrt() * model.model.norm.weight
        model.lm_head.weight.zero_()
        for a, b in zip(ids, ids[1:] + [ids[1]]):
            model.lm_head.weight[b] += 50 * h[a] / h[a].norm()
    model.save_pretrained(out)
    tok.save_pretrained(str(out))


@pytest.fixture(scope="module")
def server(smollm2_hf, tmp_path_factory):
    from transformers import AutoTokenizer

    d = tmp_path_factory.mktemp("serve_detok").resolve()
    tok = AutoTokenizer.from_pretrained(str(smollm2_hf))
    assert tok.clean_up_tokenization_spaces  # what makes text change across steps
    chain_model(d / "hf", tok)
    convert_pair(d / "hf", d / "hf", d / "pair", dtype="float32")  # the draft is the target: all accepted
    models = load_models(d / "pair" / "target", tokenizer=False)
    ids = tok.encode(PROMPT)
    greedy = [t for p in stream_request(models, ids, MAX_TOKENS, "greedy", eos_ids=(tok.eos_token_id,)) for t in p.tokens]
    repo, _ = cpu_repository(d, "draft-target", d / "pair", {"chat": [2, 1], "code": [4, 3]})
    proc, ports = start_cli(repo, d / "server.log")
    yield {"url": f"127.0.0.1:{ports['grpc']}", "tok": tok, "greedy": greedy}
    stop_cli(proc, repo)


@pytest.mark.parametrize("workload, extra", [("chat", {"speculation": (False, "BOOL")}), ("chat", {}), ("code", {})],
                         ids=["one-token-steps", "K=2", "K=4"])
def test_streamed_text_is_the_decoded_text(server, workload, extra):
    tok, greedy = server["tok"], server["greedy"]
    want = tok.decode(greedy, skip_special_tokens=True)
    assert greedy[:len(CHAIN)] == [tok.get_vocab()[t] for t in CHAIN]  # the chain is what is decoded
    assert "'s ok." in want and "café" in want and "😀" in want and "n't" in want
    pieces, last = request(server["url"], PROMPT, workload, max_tokens=MAX_TOKENS, extra=extra)
    (whole,), last_whole = request(server["url"], PROMPT, workload, stream=False, max_tokens=MAX_TOKENS, extra=extra)
    assert value(whole, "text_output") == want
    assert text_of(pieces) == want
    assert len(pieces) > 3 and not any("\ufffd" in value(p, "text_output") for p in pieces)
    for name in ("num_output_tokens", "acceptance_length", "total_accepted_draft_tokens", "total_draft_tokens"):
        assert value(last, name) == value(last_whole, name), name
    assert value(last, "num_output_tokens") == len(greedy)
