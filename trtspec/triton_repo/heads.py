"""Several EAGLE-3 heads in one repository: a general head and heads trained per workload
(trtspec.drafts, `draft: {train: {per_workload: true}}`), between which the drafter choice
(tuning/choose.py) routes each workload x band.

The general head is `draft_ckpt` as ever; each other head a band names (`drafter` in tuning.json,
`draft_head` in the routes, routing.py) is resolved here: from the request's `draft_heads`
({drafter name: directory}), else from the directory tuning.json's choice recorded for it
(`choice.drafters.NAME.head`). Heads the choice does not serve are not part of the repository.
How each flavor serves them: llmapi, one LLM-API model per (head, K) (llmapi.py: speculative_config
is per model); cpu, spec_decode loads every head on its one target and drafts each request with the
head its route names (models/spec_decode.py); trtllm has no EAGLE-3 (refused before)."""

from __future__ import annotations

from pathlib import Path

from ..errors import TrtspecError
from .deploy import Artifact, eagle3_head


def routed_drafters(tuning) -> set[str]:
    """The extra heads some band of the tuning drafts with (drafter names beside None and ngram)."""
    return {b.drafter for w in tuning.workloads.values() for b in w.bands
            if b.speculate and b.drafter not in (None, "ngram")}


def resolve_heads(tuning, given: dict[str, Path] | None) -> dict[str, Artifact]:
    """{drafter name: head Artifact} of every extra head the tuning routes to."""
    used = routed_drafters(tuning)
    if used and tuning.mode != "eagle3":
        raise TrtspecError(f"tuning: bands name drafters {sorted(used)}, but several heads need an eagle3 tuning")
    recorded = {n: d.head for n, d in (tuning.choice.drafters.items() if tuning.choice else ()) if d.head}
    heads = {}
    for name in sorted(used):
        path = (given or {}).get(name) or recorded.get(name)
        if path is None:
            raise TrtspecError(f"draft_heads: the tuning routes to EAGLE-3 head '{name}', but neither draft_heads nor "
                               "tuning.json's choice names its directory")
        heads[name] = eagle3_head(path, f"draft_heads.{name}")
    return heads
