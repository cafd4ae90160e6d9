"""Workload specs as written on the command line, and loading them into `Workload`s.

Syntax: `NAME=SOURCE[,NAME=SOURCE...]`, e.g. `chat=mt-bench,code=humaneval,logs=/data/traffic.jsonl`.
SOURCE is a packaged set name (`mt-bench`, `humaneval`) or a path to a JSONL/CSV prompt file. A
bare SOURCE is allowed; its name is then the set name or the file's stem (`traffic` above).

- NAME is `[A-Za-z0-9][A-Za-z0-9_.-]*`: it ends up in file names, report columns and Triton model
  names, so nothing that needs quoting. Text before the first `=` that is not a valid NAME (say a
  path like `/data/run=3/x.jsonl`) makes the whole entry a bare SOURCE.
- Packaged names win over files of the same name; write `./mt-bench` for a file.
- Paths containing a comma cannot be written in the comma-separated form; pass a list of entries
  (one per CLI option) instead, each parsed on its own.
- Names must be unique across the list.

Parsing does no I/O; `load_workload` reads the data, filters and samples it (see `select`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..errors import TrtspecError
from .files import iter_prompt_file, read_prompt_file
from .packaged import PACKAGED, read_packaged
from .sample import TURNS_CHOICES, Sample, Turns, Workload, select

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
SYNTAX = "expected NAME=SOURCE[,NAME=SOURCE...] with SOURCE one of " + ", ".join(PACKAGED) + " or a .jsonl/.csv path"
# Traffic logs: chat-length answers by default, as for mt-bench.
FILE_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class WorkloadSpec:
    """One `NAME=SOURCE` entry. `source` is a packaged set name or a path, as written."""

    name: str
    source: str

    @property
    def packaged(self) -> bool:
        return self.source in PACKAGED

    def __str__(self) -> str:
        return f"{self.name}={self.source}"


def default_name(source: str) -> str:
    if source in PACKAGED:
        return source
    stem = Path(source).name
    for suffix in (".gz", ".jsonl", ".ndjson", ".csv"):
        stem = stem[: -len(suffix)] if stem.lower().endswith(suffix) else stem
    if not NAME_RE.fullmatch(stem):
        raise TrtspecError(f"workload {source!r}: cannot use the file stem {stem!r} as a workload name; "
                           "write NAME=PATH with NAME of letters, digits, '_', '.', '-'")
    return stem


def parse_one(entry: str) -> WorkloadSpec:
    entry = entry.strip()
    if not entry:
        raise TrtspecError(f"empty workload entry; {SYNTAX}")
    name, eq, source = entry.partition("=")
    if eq and NAME_RE.fullmatch(name.strip()):
        name, source = name.strip(), source.strip()
        if not source:
            raise TrtspecError(f"workload {name!r}: no source after '='; {SYNTAX}")
        return WorkloadSpec(name, source)
    if eq and not name.strip():
        raise TrtspecError(f"workload entry {entry!r}: no name before '='; {SYNTAX}")
    return WorkloadSpec(default_name(entry), entry)


def parse_workload_specs(text: str | Iterable[str]) -> list[WorkloadSpec]:
    """`"chat=mt-bench,code=humaneval,logs=/p/x.jsonl"` (or a list of such strings) -> specs, in order."""
    entries = [text] if isinstance(text, str) else list(text)
    specs = [parse_one(part) for entry in entries for part in entry.split(",")]
    if not specs:
        raise TrtspecError(f"no workloads given; {SYNTAX}")
    seen: dict[str, WorkloadSpec] = {}
    for s in specs:
        if s.name in seen:
            raise TrtspecError(f"workload name {s.name!r} used twice ({seen[s.name]} and {s}); "
                               "give each source its own NAME=")
        seen[s.name] = s
    return specs


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def index_prompt_file(path: Path, turns: Turns) -> list[Sample]:
    """Every sample of a prompt file with its id and category only: what `select` draws from, in memory
    proportional to the number of records, not to the size of a multi-GB traffic log."""
    return [Sample(s.id, s.category, []) for s in iter_prompt_file(path, turns)]


def file_samples(path: Path, turns: Turns, chosen: list[Sample]) -> list[Sample]:
    """The full samples of the `chosen` (index_prompt_file) ones, read in a second pass over the file."""
    wanted = {s.id for s in chosen}
    found = {s.id: s for s in iter_prompt_file(path, turns) if s.id in wanted}
    if len(found) != len(wanted):
        raise TrtspecError(f"{path}: the file changed while it was read (the sample ids of its first reading are "
                           "not all in its second); read a copy that no process writes to")
    return [found[s.id] for s in chosen]  # in the draw's order, as the one-pass reading gave them


def load_workload(spec: WorkloadSpec | str, seed: int = 0, samples: int | None = None,
                  categories: Iterable[str] | str | None = None, max_new_tokens: int | None = None,
                  turns: Turns = "first", uncategorized_whole: bool = False,
                  sampling: dict | None = None) -> Workload:
    """Read a spec's source and select its samples.

    categories: keep only these (a list or "coding,math"); an unknown one is an error that lists
      the available ones. uncategorized_whole: a source without any category (humaneval) ignores
      `categories` and is used whole (one category list for several workloads). samples: draw this many with `random.Random(seed)` (all when None or at
      least the count available). max_new_tokens: per-set default when None (256 chat, 512 code,
      256 for files). turns: "first" or "all-as-separate", for records with a `turns` list.
      sampling: the workload's own temperature / top_k / top_p (Workload.sampling)."""
    if isinstance(spec, str):
        parsed = parse_workload_specs(spec)
        if len(parsed) != 1:
            raise TrtspecError(f"load_workload takes one workload, got {len(parsed)}; use load_workloads")
        spec = parsed[0]
    if turns not in TURNS_CHOICES:
        raise TrtspecError(f"workload {spec.name!r}: turns must be one of {', '.join(TURNS_CHOICES)}, got {turns!r}")
    if isinstance(categories, str):
        categories = categories.split(",")
    if spec.packaged:
        path, all_samples = read_packaged(spec.source, turns)
        source, default_tokens = spec.source, PACKAGED[spec.source].max_new_tokens
    else:
        path = Path(spec.source).expanduser()
        if not path.exists():  # most often a misspelt set name: say what the packaged ones are
            base = [n for n, p in PACKAGED.items() if not p.derived_from]
            derived = "".join(f"; derived from {p.derived_from}: {n}" for n, p in PACKAGED.items() if p.derived_from)
            raise TrtspecError(f"workload {spec.name!r}: {spec.source!r} is neither a packaged set "
                               f"({', '.join(base)}) nor an existing file ({path}: no such prompt file){derived}")
        # a draw from a log reads it twice (file_samples) rather than hold every record of it
        all_samples = read_prompt_file(path, turns) if samples is None else index_prompt_file(path, turns)
        source, default_tokens = str(path.resolve()), FILE_MAX_NEW_TOKENS
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or max_new_tokens <= 0):
        raise TrtspecError(f"workload {spec.name!r}: max_new_tokens must be positive, got {max_new_tokens}")
    cats = sorted({c.strip() for c in categories if c.strip()}) if categories else None
    if uncategorized_whole and not any(s.category for s in all_samples):
        cats = None
    chosen = select(all_samples, f"workload {spec.name!r} ({spec.source})", cats, samples, seed)
    if not spec.packaged and samples is not None:
        chosen = file_samples(path, turns, chosen)
    options = {"seed": seed, "samples": samples, "categories": cats, "turns": turns}
    return Workload(spec.name, source, chosen, max_new_tokens or default_tokens, sha256_file(path), options,
                    dict(sampling) if sampling else None)


def load_workloads(specs: str | Iterable[str] | Iterable[WorkloadSpec], seed: int = 0,
                   samples: int | None = None, max_new_tokens: int | None = None,
                   turns: Turns = "first", categories: Iterable[str] | str | None = None,
                   sampling: dict[str, dict] | None = None) -> list[Workload]:
    """Every workload of a spec string/list, with the same selection options. `categories` filters
    each workload whose source has categories (an unknown one is an error naming what it has); a
    source without categories is used whole. sampling: {workload name: its own settings}."""
    items = list(specs) if not isinstance(specs, str) else [specs]
    parsed = (items if items and all(isinstance(s, WorkloadSpec) for s in items)
              else parse_workload_specs(items))  # type: ignore[arg-type]
    unknown = sorted(set(sampling or {}) - {s.name for s in parsed})
    if unknown:
        raise TrtspecError(f"workload sampling settings for {', '.join(unknown)}: no such workload")
    return [load_workload(s, seed, samples, categories, max_new_tokens, turns, uncategorized_whole=True,
                          sampling=(sampling or {}).get(s.name)) for s in parsed]
