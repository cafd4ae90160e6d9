"""`trtspec demo`: the pipeline as far as it exists, on the embedded SmolLM2-135M-Instruct, on CPU.

Today: the default model -> a same-tokenizer draft derived from it (its first layers) -> a
draft-target pair of TRT-LLM checkpoints -> greedy and draft-target decoding with the PyTorch
runtime on two small workloads (chat, code), checking that speculation reproduces greedy exactly
and reporting acceptance length, target steps and tokens/s. Later stages (quantization, tuning,
Triton, perf) extend this same command.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .errors import TrtspecError

# Small built-in prompt sets until the workloads stage lands; chat-like and code-like on purpose,
# because acceptance differs between them.
WORKLOADS = {
    "chat": ["Give me three tips for staying focused while studying.",
             "Write a short, friendly email inviting a colleague to lunch."],
    "code": ["Write a Python function that returns the n-th Fibonacci number.",
             "Write a Python function that checks whether a string is a palindrome."],
}


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def run_demo(out: Path, draft_layers: int = 10, draft_len: int = 3, max_new_tokens: int = 32) -> dict:
    from .checkpoints.default_model import smollm2_dir
    from .checkpoints.derive import truncate_layers
    from .checkpoints.pair import convert_pair
    from .runtime.generate import generate_batch, load_models

    console = Console()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target_hf = smollm2_dir()
    draft_hf = out / f"hf-draft-{draft_layers}l"
    if not (draft_hf / "config.json").exists():
        console.print(f"[bold]derive draft[/] first {draft_layers} layers of SmolLM2 -> {draft_hf}")
        truncate_layers(target_hf, draft_hf, draft_layers)
    pair = out / "ckpt-pair"
    if not (pair / "trtspec.json").exists():
        console.print(f"[bold]convert[/] target + draft -> {pair}")
        convert_pair(target_hf, draft_hf, pair, dtype="float32")
    models = load_models(pair)
    tok = models.tokenizer
    summary: dict = {"draft_layers": draft_layers, "draft_len": draft_len, "max_new_tokens": max_new_tokens,
                     "workloads": {}}
    table = Table(title=f"SmolLM2-135M target, {draft_layers}-layer draft, K={draft_len}, CPU")
    for col in ("workload", "AL", "target steps greedy→spec", "tok/s greedy", "tok/s spec", "speedup", "lossless"):
        table.add_column(col, justify="right")
    for name, texts in WORKLOADS.items():
        prompts = [list(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                                tokenize=True)) for t in texts]
        console.print(f"[bold]decode[/] {name}: {len(prompts)} prompts, greedy then draft-target")
        greedy, t_greedy = _timed(lambda: generate_batch(models, prompts, max_new_tokens, mode="greedy"))
        spec, t_spec = _timed(lambda: generate_batch(models, prompts, max_new_tokens, mode="draft-target",
                                                     draft_len=draft_len))
        lossless = [g.output_ids for g in greedy] == [s.output_ids for s in spec]
        if not lossless:
            raise TrtspecError(f"demo: draft-target output differs from greedy on workload {name!r}")
        tokens = sum(len(g.output_ids) for g in greedy)
        al = sum(s.stats.acceptance_length for s in spec) / len(spec)
        row = {"acceptance_length": al, "tokens": tokens,
               "target_steps_greedy": sum(g.stats.target_calls for g in greedy),
               "target_steps_spec": sum(s.stats.target_calls for s in spec),
               "tokens_per_s_greedy": tokens / t_greedy, "tokens_per_s_spec": tokens / t_spec,
               "sample_output": tok.decode(spec[0].output_ids, skip_special_tokens=True)}
        summary["workloads"][name] = row
        table.add_row(name, f"{al:.2f}", f"{row['target_steps_greedy']}→{row['target_steps_spec']}",
                      f"{row['tokens_per_s_greedy']:.1f}", f"{row['tokens_per_s_spec']:.1f}",
                      f"{t_greedy / t_spec:.2f}x", "yes")
    console.print(table)
    console.print("On a 2-core CPU a draft step is not cheap relative to a target step, so tokens/s gains are "
                  "small or negative; acceptance length and target steps are the portable numbers.")
    (out / "demo.json").write_text(json.dumps(summary, indent=2) + "\n")
    console.print(f"summary: {out / 'demo.json'}")
    return summary
