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

import json
import os
import random
import warnings
from pathlib import Path

from ..errors import TrtspecError
from ..triton_repo.models.serving_rules import RequestError, check_limits
from ..workloads import Workload, load_workload, parse_workload_specs, served_text
from ..workloads.spec import parse_one
from . import client


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


async def drop_refused(rendered: dict[str, list[tuple[str, str]]], url: str, model: str, max_tokens: int,
                       timeout_s: float, served_tokenizer=None) -> dict[str, list[tuple[str, str]]]:
    """The rendered prompts less those `model` would refuse: a trtspec repository's `generate`
    checks every request against its routing `limits` (the engines' max_input_len / max_seq_len,
    or the checkpoints' positions) before any engine runs, with the token count its `preprocessing`
    encodes. Sent anyway, such a prompt is an error in every run (and the baseline probe's reason).
    Left as they are without limits (another model; llmapi checks its own) or a readable tokenizer.
    served_tokenizer: preprocessing's tokenizer when the caller has loaded it already (else loaded
    here from client.tokenizer_dir; perf.tokenizer may be another)."""
    routing = (await client.model_parameters(url, model, timeout_s)).get("routing")
    limits = json.loads(routing).get("limits") if routing else None
    if not limits or not any(limits.values()):
        return rendered
    if served_tokenizer is None:
        path = await client.tokenizer_dir(url, timeout_s)
        if not path or not Path(path).is_dir():
            return rendered
        served_tokenizer = load_tokenizer(path)
    tokenizer = served_tokenizer  # special tokens on, as preprocessing encodes
    return {name: servable(name, texts, lambda t: len(tokenizer.encode(t)), limits, max_tokens)
            for name, texts in rendered.items()}


def servable(name: str, texts: list[tuple[str, str]], count, limits: dict, max_tokens: int) -> list[tuple[str, str]]:
    """texts less those over `limits` (serving_rules.check_limits on count(text) tokens + max_tokens),
    with one warning naming how many and why; an error when none is left."""
    kept, refused = [], []
    for pid, text in texts:
        try:
            check_limits(count(text), max_tokens, limits)
            kept.append((pid, text))
        except RequestError as e:
            refused.append((pid, str(e)))
    if refused and not kept:
        raise TrtspecError(f"perf.workloads: the server refuses every prompt of {name!r} with max_tokens "
                           f"{max_tokens} (e.g. {refused[0][0]}: {refused[0][1]})")
    if refused:
        warnings.warn(f"workload {name!r}: left out {len(refused)} of {len(texts)} prompts the server would refuse "
                      f"(e.g. {refused[0][0]}: {refused[0][1]})", stacklevel=2)
    return kept
