"""Traffic logs as real loggers write them (trtspec.workloads.files): OpenAI content parts, logs too
large to hold, CSV quoting mistakes, undecodable bytes."""

from __future__ import annotations

import gzip
import json
import tracemalloc

import pytest

from trtspec.errors import TrtspecError
from trtspec.workloads import load_workload, read_prompt_file
from trtspec.workloads import spec as spec_mod
from trtspec.workloads.sample import select


def test_text_parts_are_joined_by_newlines_as_openai_servers_join_them(tmp_path):
    # TensorRT-LLM's and vLLM's OpenAI servers hand the template "\n".join(text parts)
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Here is the file:"}, {"type": "text", "text": "def f(): pass"}]}]}) + "\n")
    (s,) = read_prompt_file(log)
    assert s.messages == [{"role": "user", "content": "Here is the file:\ndef f(): pass"}]


def big_log(path, n=400, chars=20_000):
    """n records of `chars` characters each, in the format the suffix says."""
    rows = [f"request {i} " + "x" * chars for i in range(n)]
    if path.name.endswith(".csv"):
        data = "prompt\n" + "".join(f"{r}\n" for r in rows)
    else:
        data = "".join(json.dumps({"messages": [{"role": "user", "content": r}]}) + "\n" for r in rows)
    path.write_bytes(gzip.compress(data.encode()) if path.suffix == ".gz" else data.encode())
    return path


@pytest.mark.parametrize("name", ["log.jsonl", "log.jsonl.gz", "log.csv"])
def test_a_draw_from_a_large_log_does_not_hold_the_file(tmp_path, name):
    path = big_log(tmp_path / name)  # 8 MB of text; reading it whole took 3 to 4 times that
    tracemalloc.start()
    try:
        wl = load_workload(str(path), samples=4, seed=3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000, f"peak {peak / 1e6:.1f} MB for an {path.stat().st_size / 1e6:.1f} MB log"
    full = read_prompt_file(path)  # the same draw as from the whole file held in memory
    assert wl.samples == select(full, "x", None, 4, 3)
    assert all(len(s.prompt) > 20_000 for s in wl.samples)


def test_a_log_that_changes_between_its_two_readings_is_an_error(tmp_path, monkeypatch):
    path = big_log(tmp_path / "log.jsonl", n=6, chars=10)
    readings = iter([spec_mod.iter_prompt_file(path), iter([])])  # the second reading finds the records gone
    monkeypatch.setattr(spec_mod, "iter_prompt_file", lambda p, turns: next(readings))
    with pytest.raises(TrtspecError, match=r"log\.jsonl: the file changed while it was read"):
        load_workload(str(path), samples=2)


def test_a_csv_quote_that_never_closes_is_an_error_not_the_rest_of_the_file(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text('prompt\nfine\n"never closed\nnext\nlast\n')
    with pytest.raises(TrtspecError, match=r"log\.csv:3: bad CSV in the record starting on this line"):
        read_prompt_file(log)
    log.write_text('prompt\n"quoted" then more\n')
    with pytest.raises(TrtspecError, match=r"log\.csv:2: bad CSV"):
        read_prompt_file(log)


def test_line_endings_and_bom_as_before(tmp_path):
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\r\n\r\n{"prompt": "b \\u2028 c"}\r\n')
    assert [(s.id, s.prompt) for s in read_prompt_file(crlf)] == [("crlf.jsonl:1", "a"), ("crlf.jsonl:3", "b \u2028 c")]
    mac = tmp_path / "mac.csv"  # CR-only line ends (old Mac exports); a quoted field keeps its line break
    mac.write_bytes(b'prompt,id\r"two\rlines",1\ry,2\r')
    assert [(s.id, s.prompt) for s in read_prompt_file(mac)] == [("1", "two\rlines"), ("2", "y")]


def test_undecodable_bytes_name_their_line(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n')  # Latin-1, not UTF-8
    with pytest.raises(TrtspecError, match=r"log\.jsonl:2: not UTF-8 text"):
        read_prompt_file(log)
    gz = tmp_path / "cut.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"prompt": "a"}\n' * 100)[:-20])
    with pytest.raises(TrtspecError, match=r"cut\.jsonl\.gz: cannot read"):
        read_prompt_file(gz)
