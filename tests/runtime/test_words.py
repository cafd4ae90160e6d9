"""Stop words and bad words (TensorRT-LLM's stop_words_list / bad_words_list; runtime/words.py).

Oracle: transformers' greedy generate on the tiny target with `bad_words_ids` (NoBadWordsLogitsProcessor:
the last token of a sequence is banned where the sequence's other tokens precede it) and a
StoppingCriteria that ends the request when its ids end with a stop sequence (the token completing
it is kept, as TensorRT-LLM keeps it). The stop sequence is two tokens of the plain greedy output,
so that speculative steps complete it in the middle of their accepted drafts. Plain, draft-target,
n-gram and EAGLE decoding must all give the oracle's tokens; a stop word cuts the step there.
"""

from __future__ import annotations

import pytest
import torch

from tiny_models import hf_greedy
from triton_fixtures import TREE_A, tiny_eagle, tiny_pair
from trtspec.errors import TrtspecError
from trtspec.runtime.decode import verify_external
from trtspec.runtime.generate import generate_batch, load_models, stream_request
from trtspec.runtime.words import Words

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NEW = 16


def hf_words(model, prompt: list[int], stop=(), bad=()) -> list[int]:
    """transformers' greedy output with bad_words_ids `bad` and the stop sequences `stop` (the oracle)."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class EndsWith(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            tail = input_ids[0].tolist()
            return torch.tensor([any(tail[-len(s):] == list(s) for s in stop)])

    ids = torch.tensor([prompt])
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = model.generate(ids, do_sample=False, max_new_tokens=NEW, attention_mask=torch.ones_like(ids),
                             bad_words_ids=[list(b) for b in bad] or None,
                             stopping_criteria=StoppingCriteriaList([EndsWith()]) if stop else None)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    d = tmp_path_factory.mktemp("words")
    pair, eagle = tiny_pair(d), tiny_eagle(d)
    out = {}
    for name, hf, models in (("pair", d / "hf", load_models(pair / "target", pair / "draft", tokenizer=False)),
                             ("eagle", d / "ehf", load_models(eagle, tokenizer=False))):
        model = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
        prompt = [5, 17, 42, 99, 7, 250]
        greedy = hf_greedy(model, torch.tensor([prompt]), NEW)
        stop = (tuple(greedy[5:7]),)
        bad = ((greedy[1], greedy[2]), (greedy[6],))  # a two-token sequence and a one-token one
        oracles = {"stop": hf_words(model, prompt, stop=stop), "bad": hf_words(model, prompt, bad=bad),
                   "both": hf_words(model, prompt, stop=stop, bad=bad)}
        out[name] = (models, prompt, greedy, Words.of(stop=stop), Words.of(bad=bad), Words.of(stop, bad), oracles)
    return out


MODES = {"greedy": ("pair", {"mode": "greedy"}),
         "draft-target K=1": ("pair", {"mode": "draft-target", "draft_len": 1}),
         "draft-target K=4": ("pair", {"mode": "draft-target", "draft_len": 4}),
         "ngram K=3": ("pair", {"mode": "ngram", "draft_len": 3}),
         "eagle tree": ("eagle", {"mode": "eagle", "eagle_choices": TREE_A}),
         "eagle-2": ("eagle", {"mode": "eagle", "eagle_dynamic_top_k": 2})}


@pytest.mark.parametrize("name", list(MODES))
def test_every_mode_gives_transformers_output_with_stop_and_bad_words(tiny, name):
    which, options = MODES[name]
    models, prompt, greedy, stop, bad, both, oracles = tiny[which]
    assert oracles["stop"] == greedy[:7]  # the oracle stopped on the stop sequence, which it keeps
    assert oracles["bad"][:2] == greedy[:2] and oracles["bad"][2] != greedy[2]  # the ban changed the output
    for words, key in ((stop, "stop"), (bad, "bad"), (both, "both")):
        (got,) = generate_batch(models, [prompt], NEW, ignore_eos=True, words=words, **options)
        assert got.output_ids == oracles[key], key
        streamed = [t for row in stream_request(models, prompt, NEW, eos_ids=(), words=words, **options)
                    for t in row.tokens]
        assert streamed == oracles[key], key
    (stopped,) = generate_batch(models, [prompt], NEW, ignore_eos=True, words=stop, **options)
    assert stopped.finish_reason == "stop"


def test_a_stop_sequence_completed_by_an_accepted_draft_cuts_the_step_there(tiny):
    """The target accepts all 5 drafts of a verify step, and the stop sequence ends at draft 3:
    the step emits drafts 1-3 only and the request ends; the step counts what it emitted, as
    TensorRT-LLM counts a request's last step (runtime/stats.py counted_step)."""
    models, prompt, greedy, stop, *_ = tiny["pair"]
    step = verify_external(models.target, prompt + greedy[:4], greedy[4:9], NEW, (), words=stop)
    assert step.tokens == greedy[4:7] and step.done and step.finish_reason == "stop"
    assert (step.step.accepted, step.step.offered) == (2, 2)  # 3 tokens emitted; nothing compared after


def test_a_stop_sequence_may_start_in_the_prompt(tiny):
    """As TensorRT-LLM matches it: against prompt + output, so the first generated token can complete it."""
    models, prompt, greedy, *_ = tiny["pair"]
    (got,) = generate_batch(models, [prompt], NEW, "greedy", ignore_eos=True,
                            words=Words.of(stop=[(prompt[-1], greedy[0])]))
    assert got.output_ids == greedy[:1] and got.finish_reason == "stop"


def test_empty_or_negative_sequences_are_refused():
    with pytest.raises(TrtspecError, match=r"^stop_words\[1\]: empty token sequence; expected one token id or more$"):
        Words.of(stop=[(3,), ()])
    with pytest.raises(TrtspecError, match=r"^bad_words\[0\]: token id -1; expected ids >= 0$"):
        Words.of(bad=[(-1, 2)])


def test_word_ids_outside_the_vocabulary_are_refused(tiny):
    """Checked like prompt ids: an id past the vocabulary would never match (stop) or never be
    masked (bad), silently."""
    models, prompt, *_ = tiny["pair"]
    V = models.target.vocab_size
    with pytest.raises(TrtspecError, match=rf"^bad_words\[1\]: token id {V} is outside the vocabulary \[0, {V}\)$"):
        generate_batch(models, [prompt], 4, "greedy", words=Words.of(bad=[(1,), (2, V)]))
