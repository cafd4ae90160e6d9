"""The derive stage's trained draft (`draft: {train: ...}`): each head trained into the cache
(trtspec.drafts.cache: keyed by its inputs, so another output directory or a re-run reuses it) and
copied under OUT, where the later stages read it as they read a given `draft: {eagle3: DIR}` head:
the general head at OUT/draft-head, per-workload heads at OUT/draft-heads/<workload>."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..fsutil import atomic_dir, read_json
from ..recipe import GENERAL_HEAD


def train_heads(recipe, target: Path, paths, console, log) -> str:
    """Train (or take from the cache) every head of recipe.trained_heads(); returns the stage note."""
    from ..drafts.cache import cached_head  # lazy: torch and transformers

    notes, copies = [], {}
    for name, entries in recipe.trained_heads().items():
        log(f"{name}: EAGLE-3 head on {entries}")
        options = recipe.draft.train.head_options(entries, recipe.threads, general=name == GENERAL_HEAD)
        cached, trained = cached_head(target, options, console)
        copies[name] = cached
        notes.append(f"{name} {'trained' if trained else 'from the cache'}{heldout_note(cached)}")
    with atomic_dir(paths.head, overwrite=True) as tmp:
        shutil.copytree(copies[GENERAL_HEAD], tmp, dirs_exist_ok=True)
    shutil.rmtree(paths.heads, ignore_errors=True)  # heads of an earlier per_workload run
    if len(copies) > 1:
        with atomic_dir(paths.heads, overwrite=True) as tmp:
            for name, cached in copies.items():
                if name != GENERAL_HEAD:
                    shutil.copytree(cached, tmp / paths.head_dir(name).name)
    return "; ".join(notes)


def heldout_note(head: Path) -> str:
    """`, held-out AL(3) 1.23 ±0.05` from the head's training.json (its last measurement), if it has
    one; '±?' where its standard error is unknown (drafts.report.al_texts)."""
    from ..drafts.report import al_texts, last_heldout  # lazy: matplotlib

    if not (head / "training.json").is_file():
        return ""
    history = read_json(head / "training.json", "training summary").get("history", [])
    return "".join(f", held-out {text}" for text in al_texts(last_heldout(history))[-1:])
