"""Per-request sampling fields in traffic logs (trtspec.workloads.files) and a workload's own
sampling settings (Workload.sampling, its manifest, the recipe's `{source, temperature, ...}`)."""

from __future__ import annotations

import json

import pytest

from trtspec.errors import TrtspecError
from trtspec.workloads import load_workload, load_workloads, read_prompt_file


def test_jsonl_and_csv_records_carry_their_own_sampling(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "a", "temperature": 0.7, "top_p": 0.9, "ts": 1},
        {"messages": [{"role": "user", "content": "b"}], "top_k": 20},
        {"prompt": "c", "temperature": None},
        {"turns": ["d", "e"], "temperature": 0}]))
    got = [s.sampling for s in read_prompt_file(log)]
    assert got == [{"temperature": 0.7, "top_p": 0.9}, {"top_k": 20}, None, {"temperature": 0.0}]
    csv = tmp_path / "log.csv"
    csv.write_text("prompt,temperature,top_k\nx,0.8,\ny,,5\nz,,\n")
    assert [s.sampling for s in read_prompt_file(csv)] == [{"temperature": 0.8}, {"top_k": 5}, None]


@pytest.mark.parametrize("record,pattern", [
    ({"prompt": "a", "temperature": -0.5}, r"log\.jsonl:1: 'temperature': Input should be greater than or equal to 0"),
    ({"prompt": "a", "top_p": 0}, r"log\.jsonl:1: 'top_p': Input should be greater than 0"),
    ({"prompt": "a", "top_k": "many"}, r"log\.jsonl:1: 'top_k': "),
    ({"prompt": "a", "temperature": True}, r"log\.jsonl:1: sampling fields must be numbers"),
])
def test_bad_sampling_fields_name_the_line_and_field(tmp_path, record, pattern):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(record) + "\n")
    with pytest.raises(TrtspecError, match=pattern):
        read_prompt_file(log)


def test_bad_csv_sampling_cell(tmp_path):
    csv = tmp_path / "log.csv"
    csv.write_text("prompt,top_p\nx,2\n")
    with pytest.raises(TrtspecError, match=r"log\.csv:2: 'top_p': Input should be less than or equal to 1"):
        read_prompt_file(csv)


def test_workload_sampling_is_in_the_manifest():
    plain = load_workload("chat=mt-bench", samples=2)
    hot = load_workloads("chat=mt-bench", samples=2, sampling={"chat": {"temperature": 0.7}})[0]
    assert "sampling" not in plain.manifest()  # greedy manifests are unchanged
    assert hot.manifest() == plain.manifest() | {"sampling": {"temperature": 0.7}}
    with pytest.raises(TrtspecError, match="sampling settings for code: no such workload"):
        load_workloads("chat=mt-bench", sampling={"code": {"temperature": 0.7}})


def test_recipe_workload_entries_with_sampling():
    from trtspec.recipe import Recipe

    base = {"target": "t", "draft": {"hf": "d"}}
    r = Recipe.model_validate(base | {"workloads": {"chat": {"source": "mt-bench", "temperature": 0.7, "top_p": 0.9},
                                                    "code": "humaneval"}})
    assert r.workloads == {"chat": "mt-bench", "code": "humaneval"}
    assert r.workload_sampling == {"chat": {"temperature": 0.7, "top_p": 0.9}}
    assert r.workload_entries() == ["chat=mt-bench", "code=humaneval"]
    for bad, field in (({"source": "mt-bench", "temperature": -1}, "temperature"),
                       ({"source": "mt-bench", "temp": 1}, "temp"), ({"source": "mt-bench", "seed": 3}, "seed")):
        with pytest.raises(ValueError, match=rf"workloads\.chat\.{field}"):
            Recipe.model_validate(base | {"workloads": {"chat": bad}})


def test_null_keys_count_as_absent(tmp_path):
    """Fixed-schema loggers write every key: a null content key is not a second request."""
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "a", "text": None, "messages": None, "turns": None, "id": None, "category": None},
        {"prompt": None, "text": "b", "temperature": None}]))
    got = read_prompt_file(log)
    assert [(s.id, s.prompt, s.category, s.sampling) for s in got] == [("log.jsonl:1", "a", None, None),
                                                                       ("log.jsonl:2", "b", None, None)]
    log.write_text(json.dumps({"prompt": None, "text": None}) + "\n")
    with pytest.raises(TrtspecError, match=r"log\.jsonl:1: unknown format \(keys: prompt: null, text: null\)"):
        read_prompt_file(log)


TOOL_LOG = {"messages": [
    {"role": "user", "content": "weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    {"role": "assistant", "content": "It is 18C."}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]}
TOOL_TEMPLATE = ("{% if tools %}TOOLS {{ tools | map(attribute='function.name') | join(',') }} {% endif %}"
                 "{% for m in messages %}{{ m.role }}: {{ m.content }}{% for c in m.tool_calls or [] %}"
                 "CALL {{ c.function.name }} {{ c.function.arguments | tojson }}{% endfor %} | {% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def test_tool_call_logs_reach_the_chat_template(tmp_path):
    """An OpenAI tool-use transcript is kept up to the tool's result (the request the server answered),
    with its calls (arguments parsed, as servers hand them to the template) and tool definitions."""
    from tiny_models import save_tiny_tokenizer
    from transformers import AutoTokenizer

    from trtspec.workloads import render_text

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(TOOL_LOG) + "\n")
    (s,) = read_prompt_file(log)
    assert [m["role"] for m in s.messages] == ["user", "assistant", "tool"]
    assert s.messages[1]["content"] == "" and s.messages[2]["tool_call_id"] == "c1"
    save_tiny_tokenizer(tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    tok.chat_template = TOOL_TEMPLATE
    assert render_text(s, tok) == ('TOOLS get_weather user: weather in Paris? | assistant: CALL get_weather '
                                   '{"city": "Paris"} | tool: 18C | assistant:')
    tok.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}"
    with pytest.raises(TrtspecError, match=r"sample log\.jsonl:1: its tool use \(tool_calls, tools\) cannot be "
                                           r"rendered .*never mentions tool_calls or tools; filter .*jq"):
        render_text(s, tok)
    with pytest.raises(TrtspecError, match=r"the plain format .* has no form for it"):
        render_text(s, tok, chat=False)


@pytest.mark.parametrize("message,pattern", [
    ({"role": "user", "content": None, "tool_calls": [{}]}, r"messages\[0\]\.tool_calls must be a list of objects "
                                                           "on an assistant message"),
    ({"role": "assistant", "content": None}, r"messages\[0\]\.content must be a string, got NoneType"),
])
def test_bad_tool_messages_name_the_field(tmp_path, message, pattern):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"messages": [message, {"role": "user", "content": "x"}]}) + "\n")
    with pytest.raises(TrtspecError, match=r"log\.jsonl:1: " + pattern):
        read_prompt_file(log)
