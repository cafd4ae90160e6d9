"""Profile throughput of the PyTorch runtime: batched vs one prompt at a time, and bf16 logits vs
transformers, on the device at hand (issue 16, the CUDA acceptance point).

For each configuration the same prompts are profiled (draft-target, greedy, eos ignored) twice:

- one prompt at a time: `profile_prompts` called once per prompt with batch_size 1 (its decode
  and its teacher-forced pass each a batch of one), what profiling did before batching;
- batched: one `profile_prompts` call over all prompts, the decode as one ragged batch and the
  teacher-forced pass `--batch-size` sequences per forward (ProfileOptions.batch_size).

Both runs follow an untimed warm-up; each prints profiled tokens/s (output tokens recorded / wall
seconds, GPU synchronized), the ratio against the one-at-a-time baseline measured in the same
run, and whether the two recorded the same match lengths. Then the logits of one prompt in
bfloat16 (the runtime from the converted checkpoint vs transformers' bf16 forward, both on the
device): max abs difference, and for scale transformers' own bf16-vs-float32 difference.

Configurations:
- smollm2: SmolLM2-135M-Instruct (the embedded default, cached under ~/.cache/trtspec, see
  trtspec/checkpoints/default_model.py) with its first 6 layers as the draft; MT-Bench prompts.
- llama8b: a random-weight model of Llama-3.1-8B's shape (32 layers, hidden 4096, GQA 32/8, MLP
  14336, vocab 128256, llama3 RoPE scaling) with its first 2 layers as the draft, random prompt
  ids; built here (nothing downloaded). On a GPU only; elsewhere (or with --llama-shape small) a
  small model of the same family stands in (4 layers, hidden 256, vocab 32000), so the script
  runs end to end on a CPU.

    python scripts/bench_profile_throughput.py --device cuda --out results.json
    python scripts/bench_profile_throughput.py --device cpu --samples 4 --new-tokens 16 --out cpu.json

Results go to --out as JSON (printed too), so a run on a remote GPU can be brought back as a file.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from trtspec.checkpoints.convert import convert_hf
from trtspec.checkpoints.derive import truncate_layers
from trtspec.checkpoints.trtllm_ckpt import load_checkpoint
from trtspec.runtime.device import compute_dtype, describe, resolve, synchronize
from trtspec.runtime.generate import load_models
from trtspec.runtime.model import Decoder
from trtspec.tuning.profile import profile_prompts

LLAMA31_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5)
SMALL = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=2, vocab_size=32000, max_position_embeddings=131072, rms_norm_eps=1e-5)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


def timed(fn, device: torch.device):
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - t0


def throughput(models, prompts: list[tuple[str, list[int]]], new: int, max_k: int, batch: int) -> dict:
    """One prompt at a time vs batched profiling of `prompts` (module docstring)."""
    dev = models.target.output_device
    profile_prompts(models, prompts[:2], 4, max_k, ignore_eos=True, batch_size=2)  # warm-up (kernels, caches)
    ones, one_s = timed(lambda: [profile_prompts(models, [p], new, max_k, ignore_eos=True)[0] for p in prompts], dev)
    batched, batched_s = timed(lambda: profile_prompts(models, prompts, new, max_k, ignore_eos=True,
                                                       batch_size=batch), dev)
    tokens = sum(len(sp.output_ids) for sp in batched)
    return {"prompts": len(prompts), "new_tokens": new, "max_k": max_k, "batch_size": batch,
            "profiled_tokens": tokens, "one_at_a_time_s": one_s, "batched_s": batched_s,
            "one_at_a_time_tokens_per_s": tokens / one_s, "batched_tokens_per_s": tokens / batched_s,
            "speedup_vs_one_at_a_time": one_s / batched_s,
            "same_match_lengths": [sp.match_lengths for sp in ones] == [sp.match_lengths for sp in batched],
            "same_outputs": [sp.output_ids for sp in ones] == [sp.output_ids for sp in batched]}


@torch.inference_mode()
def bf16_logits(hf_dir: Path, ckpt: Path, ids: list[int], device: torch.device, with_fp32: bool) -> dict:
    """Max |runtime bf16 - transformers bf16| over one prompt's logits, both on `device`."""
    import transformers as tf

    prompt = torch.tensor([ids], device=device)
    out = {}
    if with_fp32:
        hf = tf.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).to(device).eval()
        ref32 = hf(prompt).logits.float()
        hf = hf.to(torch.bfloat16)
    else:
        hf = tf.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.bfloat16).to(device).eval()
    ref = hf(prompt).logits.float()
    del hf
    dec = Decoder(load_checkpoint(ckpt), torch.bfloat16, device=[device])
    ours, _ = dec.forward(prompt, dec.new_cache(1, len(ids)))
    out["bf16_vs_transformers_bf16_max_abs"] = (ours - ref).abs().max().item()
    out["transformers_logits_std"] = ref.std().item()
    out["argmax_agreement"] = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
    if with_fp32:
        out["transformers_bf16_vs_fp32_max_abs"] = (ref32 - ref).abs().max().item()
    del dec
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def smollm2(work: Path, args, device, dtype) -> dict:
    from trtspec.checkpoints.default_model import smollm2_dir
    from trtspec.workloads import load_workloads, render

    hf = smollm2_dir()
    draft_hf = truncate_layers(hf, work / "smol_draft_hf", 6, overwrite=True)
    convert_hf(hf, work / "smol_target", dtype="float32", overwrite=True)
    convert_hf(draft_hf, work / "smol_draft", dtype="float32", overwrite=True)
    models = load_models(work / "smol_target", work / "smol_draft", dtype, device=[device])
    (w,) = load_workloads("chat=mt-bench", samples=args.samples)
    prompts = [(s.id, render(s, models.tokenizer)) for s in w.samples]
    result = {"model": "SmolLM2-135M-Instruct (draft: its first 6 layers)", "dtype": str(dtype)}
    result["profile"] = throughput(models, prompts, args.new_tokens, args.max_k, args.batch_size or len(prompts))
    del models
    result["logits"] = bf16_logits(hf, work / "smol_target", prompts[0][1], device, with_fp32=True)
    return result


def llama_shaped(work: Path, args, device, dtype, full: bool) -> dict:
    import transformers as tf

    shape = LLAMA31_8B if full else SMALL
    cfg = tf.LlamaConfig(**shape, rope_theta=500000.0, rope_scaling=LLAMA3_ROPE, tie_word_embeddings=False,
                         architectures=["LlamaForCausalLM"])
    hf = work / "llama_hf"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # random init in bf16 (16 GB for the full shape, not 32)
    try:
        with torch.device(device):
            tf.LlamaForCausalLM(cfg).save_pretrained(hf)
    finally:
        torch.set_default_dtype(default)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    draft_hf = truncate_layers(hf, work / "llama_draft_hf", 2, overwrite=True)
    convert_hf(hf, work / "llama_target", dtype="bfloat16", overwrite=True)
    convert_hf(draft_hf, work / "llama_draft", dtype="bfloat16", overwrite=True)
    g = torch.Generator().manual_seed(1)
    prompts = [(f"r{i}", torch.randint(0, shape["vocab_size"], (int(n),), generator=g).tolist())
               for i, n in enumerate(torch.randint(16, 65, (args.samples,), generator=g))]
    result = {"model": ("Llama-3.1-8B" if full else "small Llama-3.1") + "-shaped, random weights (draft: first 2 "
              "layers)", "shape": shape, "dtype": str(dtype)}
    result["logits"] = bf16_logits(hf, work / "llama_target", prompts[0][1], device, with_fp32=not full)
    models = load_models(work / "llama_target", work / "llama_draft", dtype, tokenizer=False, device=[device])
    result["profile"] = throughput(models, prompts, args.new_tokens, args.max_k, args.batch_size or len(prompts))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="runtime dtype for profiling (default: float32 cpu, bfloat16 GPU)")
    ap.add_argument("--samples", type=int, default=16, help="prompts per configuration")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--max-k", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=None, help="teacher-forced pass batch (default: all prompts)")
    ap.add_argument("--configs", default="smollm2,llama8b")
    ap.add_argument("--llama-shape", choices=["full", "small"], default=None,
                    help="full Llama-3.1-8B shape (default on a GPU) or a small one (default elsewhere)")
    ap.add_argument("--work", type=Path, default=None, help="where checkpoints are written (default: a temp dir)")
    ap.add_argument("--out", type=Path, required=True, help="results JSON")
    args = ap.parse_args()
    (device,) = resolve(args.device, "--device")
    dtype = compute_dtype(args.dtype, [device], "--dtype")
    full = (args.llama_shape or ("full" if device.type == "cuda" else "small")) == "full"
    results = {"device": describe([device]), "torch": torch.__version__, "configs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        for name in args.configs.split(","):
            run = {"smollm2": lambda: smollm2(work, args, device, dtype),
                   "llama8b": lambda: llama_shaped(work, args, device, dtype, full)}[name]
            results["configs"][name] = run()
            p = results["configs"][name]["profile"]
            print(f"{name}: {p['profiled_tokens']} tokens profiled; one prompt at a time "
                  f"{p['one_at_a_time_tokens_per_s']:.1f} tok/s, batched ({p['batch_size']}) "
                  f"{p['batched_tokens_per_s']:.1f} tok/s = {p['speedup_vs_one_at_a_time']:.2f}x; same match lengths: "
                  f"{p['same_match_lengths']}; bf16 logits vs transformers: max abs "
                  f"{results['configs'][name]['logits']['bf16_vs_transformers_bf16_max_abs']:.4f}", flush=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
