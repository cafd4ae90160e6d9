"""The copy-heavy `code-edit` set: HumanEval's functions quoted for an edit the answer repeats them in."""

from __future__ import annotations

import gzip
import json

from trtspec.workloads import PACKAGED, load_workload, packaged_path


def test_code_edit_quotes_each_complete_function_and_asks_for_a_rename():
    records = {r["task_id"]: r for r in (json.loads(x) for x in gzip.open(packaged_path("code-edit"), "rt")
                                         if x.strip())}
    w = load_workload("edit=code-edit")
    assert len(w.samples) == 164 == len(records) and w.max_new_tokens == PACKAGED["code-edit"].max_new_tokens
    for s in w.samples:
        rec, (turn,) = records[s.id], s.messages
        assert turn["role"] == "user" and s.category is None
        assert (rec["prompt"] + rec["canonical_solution"]).strip("\n") in turn["content"]
        assert turn["content"].startswith(f"Rename the function `{rec['entry_point']}` to `{rec['entry_point']}_v2`")
    assert load_workload("h=humaneval").sha256 == w.sha256  # the same data file, rendered differently
