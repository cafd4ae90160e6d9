"""Does a per-workload EAGLE-3 head beat the general head on its own workload? (issue #17)

Two heads for SmolLM2-135M-Instruct (the embedded default model, from the cache), trained by
trtspec.drafts with the same options and the same number of training prompts (so about the same
token budget; the table reports the actual response tokens of each):

- general: half its prompts from MT-Bench (chat), half from HumanEval (code);
- code:    all its prompts from HumanEval.

Both are then profiled by the runtime (trtspec profile's code: the drafter chain on the target's
greedy output) on the same held-out prompts of each workload, which neither head trained on, and the
table prints AL(K) ± 1.96 standard errors (95%; tuning/acceptance.ratio_se) per head and workload, and
the code head's difference on code in standard errors. Small by default (a few CPU-minutes on a
2-core box); raise --prompts and --epochs for a sharper answer.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/study_workload_heads.py --out out/study-heads
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

from trtspec.checkpoints.convert import convert_hf
from trtspec.confidence import PM_MEANS, Z95
from trtspec.checkpoints.default_model import smollm2_dir
from trtspec.drafts.options import TrainDraftOptions
from trtspec.drafts.train import train_draft
from trtspec.tuning.options import ProfileOptions
from trtspec.tuning.profile import profile_workloads
from trtspec.workloads import load_workloads

SETS = {"chat": "mt-bench", "code": "humaneval"}


def write_prompts(path: Path, samples) -> str:
    path.write_text("".join(json.dumps({"messages": s.messages}) + "\n" for s in samples), encoding="utf-8")
    return str(path)


def split(out: Path, prompts: int, heldout: int, seed: int) -> tuple[dict, dict]:
    """({head: workloads entry it trains on}, {workload: held-out prompt file}); disjoint prompts."""
    pools = {}
    for w in load_workloads(",".join(f"{n}={s}" for n, s in SETS.items()), seed=seed):
        order = list(w.samples)
        random.Random(f"{seed}:{w.name}").shuffle(order)
        pools[w.name] = order
    held = {n: write_prompts(out / f"heldout-{n}.jsonl", pools[n][:heldout]) for n in SETS}
    half = prompts // 2
    train = {"general": ",".join(f"{n}={write_prompts(out / f'general-{n}.jsonl', pools[n][heldout:heldout + half])}"
                                 for n in SETS),
             "code": f"code={write_prompts(out / 'code-only.jsonl', pools['code'][heldout:heldout + prompts])}"}
    return train, held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("out/study-heads"))
    ap.add_argument("--prompts", type=int, default=24, help="training prompts per head")
    ap.add_argument("--heldout", type=int, default=8, help="held-out prompts per workload (the evaluation)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--draft-vocab-size", type=int, default=4096)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    target = smollm2_dir()
    train, held = split(a.out, a.prompts, a.heldout, a.seed)
    ckpt = a.out / "target-ckpt"
    if not (ckpt / "config.json").is_file():
        convert_hf(target, ckpt, dtype="float32")
    rows, tokens = {}, {}
    for name, workloads in train.items():
        head = a.out / f"head-{name}"
        start = time.process_time()
        if not (head / "training.json").is_file():
            # heldout=1: train_draft holds out one prompt per workload itself; the evaluation below
            # uses the separate held-out files, the same for both heads
            opts = TrainDraftOptions(workloads=workloads, heldout=1, max_new_tokens=a.max_new_tokens,
                                     epochs=a.epochs, draft_vocab_size=a.draft_vocab_size, eval_every=10 ** 6,
                                     eval_k=[a.k], seed=a.seed, threads=a.threads, device="cpu")
            train_draft(target, head, opts, overwrite=True)
        tokens[name] = json.loads((head / "training.json").read_text())["train_tokens"]
        profile = profile_workloads(ckpt, [f"{n}={p}" for n, p in held.items()],
                                    ProfileOptions(samples=None, max_new_tokens=a.max_new_tokens, max_k=a.k),
                                    eagle3_head=head)
        rows[name] = {w: (p.accept_length_by_k[str(a.k)], (p.accept_length_se_by_k or {}).get(str(a.k)))
                      for w, p in profile.workloads.items()}
        print(f"head {name}: {tokens[name]} response tokens, {time.process_time() - start:.0f} CPU-s")
    report(rows, tokens, a.k)
    (a.out / "study.json").write_text(json.dumps({"al": rows, "train_tokens": tokens, "k": a.k,
                                                  "options": {k: str(v) for k, v in vars(a).items()}}, indent=2))


def report(rows: dict, tokens: dict, k: int) -> None:
    print(f"\nheld-out AL({k}), {PM_MEANS} (same held-out prompts for both heads)")
    print(f"{'head':<10}{'tokens':>8}" + "".join(f"{w:>18}" for w in SETS))
    for name, by in rows.items():
        print(f"{name:<10}{tokens[name]:>8}" + "".join(f"{by[w][0]:>11.3f} ±{Z95 * (by[w][1] or float('nan')):.3f}"
                                                      for w in SETS))
    (g, gs), (c, cs) = rows["general"]["code"], rows["code"]["code"]
    se = math.hypot(gs or 0.0, cs or 0.0)
    z = (c - g) / se if se else float("nan")
    print(f"\ncode head - general head on code: {c - g:+.3f} ({z:+.1f} standard errors; |z| < 2 is no "
          "measurable difference)")


if __name__ == "__main__":
    main()
