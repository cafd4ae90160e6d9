"""Prompt files: JSONL and CSV traffic logs, and EAGLE/Spec-Bench `question.jsonl` sets.

Files are streamed line by line, never held whole (a seeded draw from a multi-GB log reads it twice and
keeps only the ids and categories of the records it does not pick: workloads/spec.py). Accepted JSONL
lines (one JSON object per line, blank lines skipped; `.gz` files are read too):

    {"prompt": "..."}  or  {"text": "..."}                 a single user message
    "..."                                                   a bare JSON string: the same
    {"messages": [{"role": "user", "content": "..."}, ...]} an OpenAI-style conversation
    {"turns": ["...", "..."], "category": "...", "question_id": 81}
                                                            EAGLE/Spec-Bench question.jsonl

A key whose value is null counts as absent, whatever the key (fixed-schema loggers write every
column: `{"prompt": "...", "text": null}` is a prompt record). Optional on any object line:
`category` (string), an id (`question_id`, `task_id` or `id`; without one the id is
`<file name>:<line>`) and the request's own sampling settings `temperature`, `top_p`, `top_k`
(trtspec.options.Sampling's fields and ranges; a profile then decodes that request at them,
Sample.sampling). Other keys (timestamps, responses, references) are ignored, so real logs load
as they are. Exactly one of prompt / text / messages / turns must be present: when a log carries
two of them we do not guess which one was the request.

CSV (`.csv`): a header row with a `prompt` (or `text`) column, optional `category`, `id` and the
sampling columns (an empty cell: not set). Quoting is strict: a quote that never closes is an error,
not the rest of the file read as one prompt.

`messages` conversations are real transcripts, so earlier assistant turns are kept as context;
trailing assistant messages (a logged response) are dropped so the prompt ends with a user turn, or
with a tool result (an agent's request after a tool ran).

Tool use (OpenAI form) is kept as the served model sees it: an assistant message's `tool_calls`
(its `content` may then be null or absent; JSON-string `arguments` are parsed, as servers do), a
tool message's `tool_call_id` / `name`, and the record's `tools` (Sample.tools) all go to the chat
template (workloads/render.py), which refuses a sample with tool use when the template cannot render
it, rather than measure a prompt the server never sees.

Anything else raises `TrtspecError` naming the file, the line, what was expected, and the start of
the offending line.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Iterable, Iterator

from pydantic import ValidationError

from ..errors import TrtspecError
from ..options import Sampling, first_problem
from .sample import Sample, Turns

JSONL_SUFFIXES = (".jsonl", ".ndjson")
CSV_SUFFIXES = (".csv",)
CONTENT_KEYS = ("prompt", "text", "messages", "turns")
ID_KEYS = ("question_id", "task_id", "id")
ROLES = ("system", "developer", "user", "assistant", "tool")
TOOL_KEYS = ("tool_call_id", "name")  # kept on a message for the chat template, with tool_calls
EXPECTED_JSONL = ('expected one JSON object per line with "prompt" or "text" (a string), "messages" '
                  '(a list of {"role", "content"}), or "turns" (a list of user-turn strings, '
                  'EAGLE/Spec-Bench question.jsonl)')
EXPECTED_CSV = 'expected a CSV header with a "prompt" (or "text") column and optional "category", "id"'
SHOW_CHARS = 120
LONE_CR = re.compile(r"(?<=\r)(?!\n)")  # where a CR not followed by LF ends a CSV line
SAMPLING_KEYS = ("temperature", "top_p", "top_k")  # a request's own settings (Sampling fields; seeds are the run's)


def file_format(path: Path) -> str:
    """'jsonl' or 'csv' from the file name (a trailing .gz is looked through)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last in JSONL_SUFFIXES:
        return "jsonl"
    if last in CSV_SUFFIXES:
        return "csv"
    raise TrtspecError(f"{path}: unknown prompt file type {last or '(no suffix)'!r}; "
                       f"expected {', '.join(JSONL_SUFFIXES + CSV_SUFFIXES)} (optionally .gz)")


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line with its end) of a UTF-8 file (BOM tolerated; `.gz` decompressed), streamed so a
    multi-GB log is never held whole. Lines end at "\\n" only (a JSON string may hold U+2028); each line is
    decoded on its own (no UTF-8 sequence holds the byte 0x0A), so a decoding error names its line."""
    if not path.exists():
        raise TrtspecError(f"{path}: no such prompt file")
    if not path.is_file():
        raise TrtspecError(f"{path}: not a file")
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    yield lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    raise TrtspecError(f"{path}:{lineno}: not UTF-8 text ({e.reason} at byte {e.start} of the "
                                       "line)") from None
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise TrtspecError(f"{path}: cannot read ({e})") from None


def show(text: str) -> str:
    """The start of an offending line, on one line, for error messages."""
    text = text.strip()
    return repr(text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS] + "...")


def iter_prompt_file(path: Path, turns: Turns = "first") -> Iterator[Sample]:
    """The samples of a JSONL or CSV prompt file, in file order, read as they are yielded (bounded memory)."""
    path = Path(path)
    fmt = file_format(path)
    lines = read_lines(path)
    empty = True
    for sample in jsonl_samples(lines, path, turns) if fmt == "jsonl" else csv_samples(lines, path):
        empty = False
        yield sample
    if empty:
        raise TrtspecError(f"{path}: no prompts in the file; "
                           f"{EXPECTED_JSONL if fmt == 'jsonl' else EXPECTED_CSV}")


def read_prompt_file(path: Path, turns: Turns = "first") -> list[Sample]:
    """All samples of a JSONL or CSV prompt file, in file order."""
    return list(iter_prompt_file(path, turns))


def unique(new: list[Sample], seen: dict[str, int], where: str, lineno: int) -> list[Sample]:
    """`new`, refusing an id seen before: manifests and sampling identify samples by id."""
    for s in new:
        if s.id in seen:
            raise TrtspecError(f"{where}: duplicate sample id {s.id!r} (first on line {seen[s.id]}); ids must "
                               "be unique (drop the id field to use file:line ids)")
        seen[s.id] = lineno
    return new


def jsonl_samples(lines: Iterable[tuple[int, str]], path: Path, turns: Turns = "first") -> Iterator[Sample]:
    """The samples of numbered JSONL lines (read_lines), one record at a time."""
    seen: dict[str, int] = {}
    for lineno, line in lines:
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise TrtspecError(f"{where}: not valid JSON ({e.msg}); {EXPECTED_JSONL}; line: {show(line)}") from None
        try:
            new = record_samples(obj, f"{path.name}:{lineno}", turns)
        except ValueError as e:
            raise TrtspecError(f"{where}: {e}; {EXPECTED_JSONL}; line: {show(line)}") from None
        yield from unique(new, seen, where, lineno)


def record_samples(obj, default_id: str, turns: Turns = "first") -> list[Sample]:
    """Samples of one JSON record; raises ValueError (message without location) when malformed."""
    if isinstance(obj, str):
        obj = {"prompt": obj}
    if not isinstance(obj, dict):
        raise ValueError(f"a JSON {type(obj).__name__} is not a prompt record")
    keys = ", ".join(f"{k}: null" if v is None else k for k, v in obj.items()) or "none"
    obj = {k: v for k, v in obj.items() if v is not None}  # null = not set, for every key (module docstring)
    present = [k for k in CONTENT_KEYS if k in obj]
    if not present:
        raise ValueError(f"unknown format (keys: {keys})")
    if len(present) > 1:
        raise ValueError(f"ambiguous record: has both {present[0]!r} and {present[1]!r}")
    sid = record_id(obj, default_id)
    category = obj.get("category")
    if category is not None and not isinstance(category, str):
        raise ValueError(f"'category' must be a string, got {type(category).__name__}")
    category = category or None  # EAGLE's alpaca set uses "" for "no category"
    key, sampling = present[0], record_sampling(obj)
    if key in ("prompt", "text"):
        return [Sample(sid, category, [{"role": "user", "content": nonempty_str(obj[key], key)}], sampling)]
    if key == "messages":
        return [Sample(sid, category, conversation(obj["messages"]), sampling, record_tools(obj))]
    user_turns = obj["turns"]
    if not isinstance(user_turns, list) or not user_turns:
        raise ValueError("'turns' must be a non-empty list of strings")
    texts = [nonempty_str(t, f"turns[{i}]") for i, t in enumerate(user_turns)]
    if turns == "first":
        return [Sample(sid, category, [{"role": "user", "content": texts[0]}], sampling)]
    return [Sample(f"{sid}#turn{i}", category, [{"role": "user", "content": t}], sampling)
            for i, t in enumerate(texts, start=1)]


def record_sampling(rec: dict) -> dict | None:
    """The record's own sampling fields (SAMPLING_KEYS; a CSV's empty cell is not set, like a JSON null),
    validated as trtspec.options.Sampling validates them; None when it sets none. ValueError names the field."""
    given = {k: rec[k] for k in SAMPLING_KEYS if k in rec and rec[k] != ""}
    if not given:
        return None
    if any(isinstance(v, bool) for v in given.values()):
        raise ValueError(f"sampling fields must be numbers, got {given}")
    try:
        checked = Sampling.model_validate(given)
    except ValidationError as e:
        field, msg = first_problem(e)
        raise ValueError(f"{field!r}: {msg}") from None
    return checked.model_dump(include=set(given))


def record_id(obj: dict, default_id: str) -> str:
    for k in ID_KEYS:
        if k in obj:
            v = obj[k]
            if isinstance(v, bool) or not isinstance(v, (str, int)) or (isinstance(v, str) and not v.strip()):
                raise ValueError(f"{k!r} must be a non-empty string or an integer, got {v!r}")
            return str(v)
    return default_id


def nonempty_str(value, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{what!r} is empty")
    return value


def message_content(content, i: int) -> str:
    """A message's text: a string, or OpenAI content parts of type "text" joined by newlines, as TensorRT-LLM's
    and vLLM's OpenAI servers join them before the chat template (so the prompt is the one they served)."""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"messages[{i}].content: only text parts are supported, got {kind!r}")
            parts.append(part["text"])
        content = "\n".join(parts)
    if not isinstance(content, str):
        raise ValueError(f"messages[{i}].content must be a string, got {type(content).__name__}")
    return content


def message(m, i: int) -> dict:
    """One validated message: {role, content} plus the tool keys it carries (tool_calls, TOOL_KEYS). An
    assistant turn that only calls tools has content null or none in OpenAI logs; it is kept as ""."""
    calls = m.get("tool_calls") if isinstance(m, dict) else None
    if not isinstance(m, dict) or "role" not in m or ("content" not in m and not calls):
        raise ValueError(f"messages[{i}] must be an object with \"role\" and \"content\"")
    if m["role"] not in ROLES:
        raise ValueError(f"messages[{i}].role {m['role']!r} is not one of {', '.join(ROLES)}")
    if calls is not None and (m["role"] != "assistant" or not isinstance(calls, list)
                              or not all(isinstance(c, dict) for c in calls)):
        raise ValueError(f"messages[{i}].tool_calls must be a list of objects on an assistant message")
    content = "" if calls and m.get("content") is None else message_content(m["content"], i)
    out = {"role": m["role"], "content": content} | {k: m[k] for k in TOOL_KEYS if m.get(k) is not None}
    return out | {"tool_calls": [call_arguments_parsed(c) for c in calls]} if calls else out


def call_arguments_parsed(call: dict) -> dict:
    """A tool call whose `function.arguments` (OpenAI logs: a JSON string) is an object, as HF chat
    templates expect (they `tojson` it) and as OpenAI-compatible servers hand it to the template."""
    fn = call.get("function")
    if not (isinstance(fn, dict) and isinstance(fn.get("arguments"), str)):
        return call
    try:
        args = json.loads(fn["arguments"])
    except json.JSONDecodeError:
        return call
    return call | {"function": fn | {"arguments": args}} if isinstance(args, dict) else call


def conversation(messages) -> list[dict]:
    """Validated messages, ending with the last user or tool message (what follows is the logged answer)."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list of {\"role\", \"content\"} objects")
    out = [message(m, i) for i, m in enumerate(messages)]
    last_user = max((i for i, m in enumerate(out) if m["role"] == "user"), default=None)
    if last_user is None:
        raise ValueError("'messages' has no user message")
    if not out[last_user]["content"].strip():
        raise ValueError(f"messages[{last_user}] (the last user message) is empty")
    end = max(i for i, m in enumerate(out) if m["role"] in ("user", "tool"))
    return out[:end + 1]


def record_tools(obj: dict) -> list | None:
    """The request's tool definitions (OpenAI `tools`: a list of objects), None when it has none."""
    tools = obj.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ValueError("'tools' must be a list of objects (OpenAI tool definitions)")
    return tools or None


def csv_lines(lines: Iterable[tuple[int, str]]) -> Iterator[str]:
    """CSV lines: read_lines' lines, split after a lone CR as well (old Mac exports end lines with CR alone)."""
    for _, line in lines:
        yield from (piece for piece in LONE_CR.split(line) if piece)


def csv_rows(lines: Iterable[tuple[int, str]], path: Path):
    """(first line number, row) for each non-blank CSV record; quoted fields may span lines. Strict: a quoted
    field that never closes is an error naming the line it opens on, not the rest of the file taken as one
    field."""
    reader = csv.reader(csv_lines(lines), strict=True)
    end = 0
    try:
        for row in reader:
            start, end = end + 1, reader.line_num
            if any(c.strip() for c in row):
                yield start, row
    except csv.Error as e:
        raise TrtspecError(f"{path}:{end + 1}: bad CSV in the record starting on this line ({e}); "
                           f"{EXPECTED_CSV}") from None


def csv_samples(lines: Iterable[tuple[int, str]], path: Path) -> Iterator[Sample]:
    """The samples of numbered CSV lines (read_lines), one record at a time."""
    rows = csv_rows(lines, path)
    first = next(rows, None)
    if first is None:
        return
    header_line, header = first[0], [c.strip() for c in first[1]]
    cols = [c for c in ("prompt", "text") if c in header]
    if len(cols) != 1:
        problem = ("both \"prompt\" and \"text\" columns" if cols else
                   f"no \"prompt\" or \"text\" column (columns: {', '.join(header)})")
        raise TrtspecError(f"{path}:{header_line}: {problem}; {EXPECTED_CSV}")
    prompt_col = header.index(cols[0])
    seen: dict[str, int] = {}
    for start, row in rows:
        where = f"{path}:{start}"
        if len(row) != len(header):
            raise TrtspecError(f"{where}: {len(row)} fields, the header (line {header_line}) has "
                               f"{len(header)}; line: {show(','.join(row))}")
        rec = dict(zip(header, row))
        prompt = row[prompt_col]
        if not prompt.strip():
            raise TrtspecError(f"{where}: empty {header[prompt_col]!r}; line: {show(','.join(row))}")
        sid = rec.get("id", "").strip() or f"{path.name}:{start}"
        try:
            sampling = record_sampling({k: v.strip() for k, v in rec.items()})
        except ValueError as e:
            raise TrtspecError(f"{where}: {e}; line: {show(','.join(row))}") from None
        sample = Sample(sid, rec.get("category", "").strip() or None, [{"role": "user", "content": prompt}], sampling)
        yield from unique([sample], seen, where, start)
