"""drafts/selfprompt.py: the prompts a target writes itself after its chat template's user header
(Magpie), and their place in train-draft's data (workload 'self', training only, cached, in the key)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tiny_models import save_tiny_tokenizer, tiny_draft_target
from trtspec.drafts import selfprompt
from trtspec.drafts.options import TrainDraftOptions, TrainDraftStage
from trtspec.errors import TrtspecError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# a chat template over the tiny tokenizer's words: t5 opens a user turn, t6 the assistant's
TEMPLATE = ("{% for m in messages %}t5 {{ m['content'] }} </s> {% endfor %}"
            "{% if add_generation_prompt %}t6{% endif %}")


@pytest.fixture(scope="module")
def chat_target(tmp_path_factory):
    """The train-draft tests' tiny target with a chat template, and 12 prompts of words t7.. (not the
    template's)."""
    return tiny_draft_target(tmp_path_factory.mktemp("self_target"), prompts=12, chat_template=TEMPLATE, low=7)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTSPEC_CACHE", str(tmp_path / "cache"))


def test_the_prefix_is_the_template_up_to_the_users_message(chat_target, tmp_path):
    target, _ = chat_target
    assert selfprompt.user_prefix(AutoTokenizer.from_pretrained(target)) == [5]
    save_tiny_tokenizer(tmp_path / "plain")  # no chat template: nothing to let the target write
    with pytest.raises(TrtspecError, match=r"^draft\.train\.self_prompts: the target's tokenizer has no chat template"):
        selfprompt.user_prefix(AutoTokenizer.from_pretrained(tmp_path / "plain"))


def test_the_target_writes_distinct_seeded_prompts(chat_target):
    target, _ = chat_target
    tok, model = AutoTokenizer.from_pretrained(target), AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    write = lambda seed: selfprompt.write_prompts(model, tok, 6, seed, 4, {2}, 2)  # noqa: E731
    first = write(0)
    assert len(first) == 6 and len(set(first)) == 6 and all(p and "</s>" not in p for p in first)
    assert all(w.startswith("t") for p in first for w in p.split())  # the tiny tokenizer's words, the header cut off
    assert write(0) == first and write(1) != first


def test_train_draft_trains_on_them_as_workload_self_and_keys_the_head_by_them(chat_target, tmp_path):
    from trtspec.drafts import cache
    from trtspec.drafts.train import train_draft

    target, prompts = chat_target
    base = dict(workloads=f"p={prompts}", heldout=2, max_new_tokens=8, epochs=1, batch_size=4, eval_every=100,
                draft_vocab_size=128, device="cpu", eval_k=[1])
    summary = train_draft(target, tmp_path / "head", TrainDraftOptions(**base, self_prompts=4))
    assert summary["train_prompts"] == 10 + 4 and summary["heldout_prompts"] == 2  # never held out
    assert set(summary["heldout_vocab_coverage"]) == {"p"}
    assert len(list((tmp_path / "cache" / "draft-data").glob("self-*.json"))) == 1  # written once, cached
    assert cache.head_key(target, TrainDraftOptions(**base, self_prompts=4)) != \
        cache.head_key(target, TrainDraftOptions(**base))


def test_only_the_general_head_of_a_recipe_gets_them():
    stage = TrainDraftStage(self_prompts=100)
    assert stage.head_options("chat=mt-bench", 1).self_prompts == 100
    assert stage.head_options("chat=mt-bench", 1, general=False).self_prompts == 0


def test_a_workload_named_self_is_refused_only_beside_self_written_prompts():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="workloads: the name 'self' is reserved"):
        TrainDraftOptions(workloads="chat=mt-bench,self=humaneval", self_prompts=2)
    assert TrainDraftOptions(workloads="self=humaneval").workloads == "self=humaneval"  # no clash without them
    with pytest.raises(ValidationError, match="reserved"):
        TrainDraftStage(self_prompts=2).head_options("self=mt-bench", 1)


def test_fewer_written_prompts_than_asked_are_warned_of_and_counted(chat_target, tmp_path, monkeypatch):
    """write_prompts gives up after TRIES_PER_PROMPT * n samples (a target may not have n distinct
    prompts in it): the run says so and training.json records how many it trained on."""
    import io

    from rich.console import Console

    from trtspec.drafts.train import train_draft

    target, prompts = chat_target
    tok, model = AutoTokenizer.from_pretrained(target), AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    assert selfprompt.write_prompts(model, tok, 3, 0, 4, set(range(1001)), 2) == []  # every sample ends at once
    real = selfprompt.write_prompts
    monkeypatch.setattr(selfprompt, "write_prompts", lambda *a, **kw: real(*a, **kw)[:1])
    out = io.StringIO()
    summary = train_draft(target, tmp_path / "head", TrainDraftOptions(
        workloads=f"p={prompts}", heldout=2, max_new_tokens=8, epochs=1, batch_size=4, eval_every=100,
        draft_vocab_size=128, device="cpu", eval_k=[1], self_prompts=3), console=Console(file=out, width=300))
    assert summary["self_prompts_written"] == 1 and summary["train_prompts"] == 10 + 1
    assert "warning: draft.train.self_prompts: the target wrote 1 distinct prompts of the 3 asked for (9 tries" \
        in out.getvalue()
    written = json.loads((tmp_path / "head" / "training.json").read_text())
    assert written["self_prompts_written"] == 1


def test_a_written_prompt_that_repeats_a_held_out_prompt_is_not_trained_on(chat_target, monkeypatch):
    """A target can write a request its users sent (a short greeting in a traffic log): trained on,
    the held-out AL would measure an answer the head learnt."""
    from trtspec.drafts import data

    target, prompts = chat_target
    texts = [json.loads(line)["prompt"] for line in prompts.read_text().splitlines()]
    monkeypatch.setattr(selfprompt, "write_prompts", lambda *a, **kw: texts[:12])  # every prompt of the set
    tok, model = AutoTokenizer.from_pretrained(target), AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    opts = TrainDraftOptions(workloads=f"p={prompts}", heldout=2, max_new_tokens=4, device="cpu", self_prompts=12)
    examples = data.load_examples(target, model, tok, opts, {2})
    held = {tuple(e.prompt) for e in examples if e.heldout}
    written = [e for e in examples if e.workload == "self"]
    assert len(held) == 2 and len(written) == 10
    assert not any(tuple(e.prompt) in held for e in written)
