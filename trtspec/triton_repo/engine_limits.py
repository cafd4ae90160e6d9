"""What the served engines and checkpoints allow, against what the repository is asked to serve.

The batch size the models are written with, the draft lengths and EAGLE trees the routing may send
(each within the engine's max_draft_len and tree limits, or a checkpoint's positions), and the
request limits `generate` enforces. Apart from repo.py, which assembles the models, because these
are the numbers read from the artifacts' own configs (deploy.Artifact) and the refusals they lead
to, each naming tuning.json and the artifact; repo.py's _Builder calls them.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TrtspecError
from .deploy import Artifact
from .flavors import is_pytorch
from .routing import tree_problems

DEFAULT_CPU_BATCH = 8


def batch_size(requested: int | None, flavor: str, arts: list[Artifact], warnings: list[str]) -> int:
    """--max-batch-size if given (a warning in `warnings` when above the engines'), else the engines'
    smallest max_batch_size (trtllm flavor), else DEFAULT_CPU_BATCH."""
    if requested is not None:
        engine_max = min((a.max_batch_size for a in arts if a.max_batch_size), default=None)
        if engine_max is not None and requested > engine_max:
            warnings.append(f"--max-batch-size {requested} exceeds the engines' max_batch_size "
                            f"{engine_max}; the executor queues the rest")
        return requested
    return min((a.max_batch_size for a in arts if a.max_batch_size), default=DEFAULT_CPU_BATCH) \
        if flavor == "trtllm" else DEFAULT_CPU_BATCH


def check_draft_lengths(routing: dict, flavor: str, arts: list[Artifact], tuning_path: Path) -> int:
    """The largest num_draft_tokens the routing sends, refused when the target cannot take it."""
    target = arts[0]
    ks = [(w, b["concurrency"], b["num_draft_tokens"]) for w, bands in routing["workloads"].items() for b in bands]
    ks += [("(default route)", b["concurrency"], b["num_draft_tokens"]) for b in routing["default"]["bands"]]
    worst = max(ks, key=lambda x: x[2])
    if flavor == "trtllm" and worst[2] > target.max_draft_len:
        raise TrtspecError(
            f"{tuning_path}: workload '{worst[0]}' at concurrency {worst[1]} is tuned to num_draft_tokens "
            f"{worst[2]}, above the target engine's max_draft_len {target.max_draft_len} "
            f"({target.path / 'config.json'}); rebuild the pair with build.max_draft_len {worst[2]} or re-tune")
    if is_pytorch(flavor) and target.max_seq_len and worst[2] >= target.max_seq_len:
        # the cpu flavor has no engine max_draft_len; a chain of drafts must still fit the positions
        raise TrtspecError(
            f"{tuning_path}: workload '{worst[0]}' at concurrency {worst[1]} is tuned to num_draft_tokens "
            f"{worst[2]}, not below the target checkpoint's max_position_embeddings {target.max_seq_len} "
            f"({target.path / 'config.json'}); re-tune")
    return max(k for _, _, k in ks)


def check_trees(routing: dict, art: Artifact, tuning_path: Path) -> None:
    for m in routing["models"]:
        probs = tree_problems(m["eagle_choices"], art.max_draft_len, art.num_eagle_layers, art.max_non_leaves)
        if probs:
            raise TrtspecError(f"{tuning_path}: profile '{m['profile']}' tree does not fit {art.path}: "
                               f"{probs[0]}")


def request_limits(flavor: str, arts: list[Artifact]) -> dict:
    """The request limits `generate` enforces before calling any model (serving_rules.check_limits).
    Engines: the smallest max_input_len and max_seq_len of the served engines, max_seq_len less
    the room trtllm-build added for speculation (max_draft_len, and num_eagle_layers for EAGLE:
    upstream.trtllm, builder.py), which a request cannot use. Checkpoints (cpu flavor): their
    smallest max_position_embeddings."""
    if flavor == "trtllm":
        seq = [a.max_seq_len - a.max_draft_len - (a.num_eagle_layers or 0) for a in arts if a.max_seq_len]
        inp = [int(a.build["max_input_len"]) for a in arts if a.build.get("max_input_len")]
        return {"max_input_len": min(inp) if inp else None, "max_seq_len": min(seq) if seq else None}
    positions = [int(a.config["max_position_embeddings"]) for a in arts
                 if isinstance(a.config.get("max_position_embeddings"), int)]
    if not positions:
        return {"max_input_len": None, "max_seq_len": None}
    return {"max_input_len": min(positions) - 1, "max_seq_len": min(positions)}
