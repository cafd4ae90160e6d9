"""Workloads -> the prompt texts sent as `text_input`.

Why the client renders the chat template: the repository's `preprocessing` applies none (like
upstream's, the client sends the final prompt text), while `trtspec profile` measured acceptance on
prompts rendered with the target's chat template (`trtspec.workloads.render`). To serve the traffic
the tuning was computed for, perf renders each sample the same way, with `served_text` (the template
text without a BOS the repository's preprocessing adds again) and the
tokenizer the repository itself loads (preprocessing's `tokenizer_dir`; servers bind 127.0.0.1,
so that path is readable here) or `--tokenizer`. A tokenizer without a chat template, or
chat=False, gives the plain format of `trtspec.workloads.render`.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from ..errors import TrtspecError
from ..workloads import Workload, load_workload, parse_workload_specs, served_text
from ..workloads.spec import parse_one


def parse_workloads(workloads: dict[str, str] | str | list[str]) -> list:
    """{name: source} (the Python API) or NAME=SOURCE[,...] text (the CLI) -> WorkloadSpecs."""
    if isinstance(workloads, dict):
        if not workloads:
            raise TrtspecError("no workloads given; expected NAME=SOURCE[,NAME=SOURCE...]")
        return [parse_one(f"{k}={v}") for k, v in workloads.items()]  # one entry each: a path may hold a comma
    return parse_workload_specs(workloads)


def load_tokenizer(path: str | Path):
    # lazy: transformers (~3 s, pulls torch) only for chat rendering; its verbosity is set before the import
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import AutoTokenizer

    p = Path(path)
    if not p.is_dir():
        raise TrtspecError(f"{p}: tokenizer directory not found (the chat template is rendered on the client; "
                           "give perf.tokenizer, or turn perf.chat off for plain prompts)")
    try:
        return AutoTokenizer.from_pretrained(str(p), trust_remote_code=False)
    except Exception as e:  # transformers raises many types for a bad directory
        raise TrtspecError(f"{p}: cannot load the tokenizer ({type(e).__name__}: {str(e).splitlines()[0][:200]})") \
            from None


def load_all(specs: list, seed: int) -> list[Workload]:
    """Read every workload's samples (file and format errors surface here, before any server contact)."""
    return [load_workload(spec, seed=seed) for spec in specs]


def render_all(workloads: list[Workload], seed: int, tokenizer, chat: bool) -> dict[str, list[tuple[str, str]]]:
    """{name: [(sample id, prompt text)]}, shuffled with `seed` so that a run of N requests cycles
    through a seeded mix of the whole workload instead of the file's first N."""
    out = {}
    for wl in workloads:
        texts = [(s.id, served_text(s, tokenizer, chat=chat and tokenizer is not None)) for s in wl.samples]
        random.Random(seed).shuffle(texts)
        out[wl.name] = texts
    return out
