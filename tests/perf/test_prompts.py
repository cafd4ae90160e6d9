"""perf.prompts: the text perf sends encodes, on the server, to the ids the profile measured."""

import json

import pytest

BOS_TEMPLATE = ("{{ bos_token }}{% for m in messages %}t5 {{ m['content'] }} t6 {% endfor %}"
                "{% if add_generation_prompt %}t7{% endif %}")


@pytest.fixture
def llama_like_tokenizer(tmp_path):
    """A tokenizer that adds a BOS itself and a chat template that writes one too (as Llama-2/3 and
    Mistral do): encoding the template text with the special tokens gives two BOS."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, 50)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = BOS_TEMPLATE
    return fast


def test_a_template_bos_is_not_doubled_by_the_servers_encoding(llama_like_tokenizer, tmp_path):
    from trtspec.perf.prompts import load_all, parse_workloads, render_all
    from trtspec.workloads import render, render_text

    tok = llama_like_tokenizer
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"prompt": f"t{i} t{i + 1} t{i + 2}"}) + "\n" for i in range(10, 20)))
    workloads = load_all(parse_workloads({"w": str(log)}), seed=0)
    by_id = {s.id: s for s in workloads[0].samples}
    sample = next(iter(by_id.values()))
    assert tok.encode(render_text(sample, tok), add_special_tokens=True)[:2] == [1, 1]  # the hazard
    for pid, text in render_all(workloads, 0, tok, chat=True)["w"]:
        ids = tok.encode(text, add_special_tokens=True)  # what the repository's preprocessing does
        assert ids == render(by_id[pid], tok) and ids.count(1) == 1


def test_plain_prompts_are_sent_as_they_are(llama_like_tokenizer, tmp_path):
    """Without the chat template the text has no BOS of its own: the server's one is the profile's."""
    from trtspec.perf.prompts import load_all, parse_workloads, render_all
    from trtspec.workloads import render

    tok = llama_like_tokenizer
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"prompt": "t10 t11"}) + "\n")
    workloads = load_all(parse_workloads({"w": str(log)}), seed=0)
    [(pid, text)] = render_all(workloads, 0, tok, chat=False)["w"]
    assert text == "t10 t11" and tok.encode(text) == render(workloads[0].samples[0], tok, chat=False)
