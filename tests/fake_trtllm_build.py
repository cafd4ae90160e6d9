"""A stand-in for TensorRT-LLM 1.2's `trtllm-build`, put on PATH by tests (see `install_fake`).

It records its argv and working directory, streams a few log lines, and writes the engine
directory the way `Engine.save` does (reference trtllm.md §7.3): `config.json` with `version`,
`pretrained_config` (the checkpoint's config) and `build_config` (after the builder's automatic
adjustments: max_seq_len + max_draft_len [+ num_eagle_layers], max_num_tokens raised to
batch x (draft + 1), speculative_decoding_mode as the IntFlag's integer, plugin_config as a dict,
kv_cache_type by name), one `rank{r}.engine` per rank, and the timing cache.

Environment knobs:
  FAKE_TRTLLM_RECORD     append {"argv", "cwd"} as one JSON line to this file
  FAKE_TRTLLM_EXIT       print an error and exit with this status (after a partial engine write)
  FAKE_TRTLLM_SLEEP      start a sleeping child process (pid to FAKE_TRTLLM_CHILD_PID), then sleep
  FAKE_TRTLLM_HANDSHAKE  after the first line, wait until this file exists (proves streaming)
  FAKE_TRTLLM_VERSION    the version written into config.json (default 1.2.0)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SPEC_FLAGS = {None: 1, "draft_tokens_external": 2, "medusa": 4, "lookahead_decoding": 8,
              "explicit_draft_tokens": 16, "eagle": 32}


def parse(argv):
    p = argparse.ArgumentParser(prog="trtllm-build")
    p.add_argument("--checkpoint_dir", required=True)
    p.add_argument("--output_dir", default="engine_outputs")
    for name, default in (("max_batch_size", 2048), ("max_input_len", 1024), ("max_seq_len", None),
                          ("max_num_tokens", 8192), ("max_beam_width", 1), ("max_draft_len", 0),
                          ("workers", 1), ("tokens_per_block", 32)):
        p.add_argument(f"--{name}", type=int, default=default)
    for name, default in (("gemm_plugin", None), ("gpt_attention_plugin", "auto"), ("context_fmha", "enable"),
                          ("remove_input_padding", "enable"), ("use_paged_context_fmha", "enable"),
                          ("use_fp8_context_fmha", "enable"), ("use_fused_mlp", "enable"),
                          ("kv_cache_type", "paged"), ("speculative_decoding_mode", None),
                          ("input_timing_cache", None), ("output_timing_cache", "model.cache")):
        p.add_argument(f"--{name}", default=default)
    p.add_argument("--gather_generation_logits", action="store_true")
    p.add_argument("--gather_context_logits", action="store_true")
    return p.parse_args(argv)


def main(argv):
    if os.environ.get("FAKE_TRTLLM_RECORD"):
        with open(os.environ["FAKE_TRTLLM_RECORD"], "a") as f:
            f.write(json.dumps({"argv": argv, "cwd": os.getcwd()}) + "\n")
    args = parse(argv)
    print("[TensorRT-LLM] TensorRT-LLM version: fake", flush=True)
    handshake = os.environ.get("FAKE_TRTLLM_HANDSHAKE")
    if handshake:
        deadline = time.time() + 20
        while not os.path.exists(handshake):
            if time.time() > deadline:
                print("handshake never came: output was not streamed", flush=True)
                return 7
            time.sleep(0.02)
    ckpt = json.loads((Path(args.checkpoint_dir) / "config.json").read_text())
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(f"[TensorRT-LLM] building {ckpt['architecture']} into {out}", flush=True)
    if os.environ.get("FAKE_TRTLLM_EXIT"):
        (out / "rank0.engine").write_bytes(b"partial")
        print("[TensorRT-LLM][ERROR] Engine building failed, please check error log.", flush=True)
        return int(os.environ["FAKE_TRTLLM_EXIT"])
    if os.environ.get("FAKE_TRTLLM_SLEEP"):
        (out / "rank0.engine").write_bytes(b"partial")
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        Path(os.environ["FAKE_TRTLLM_CHILD_PID"]).write_text(str(child.pid))
        print("[TensorRT-LLM] building...", flush=True)
        time.sleep(float(os.environ["FAKE_TRTLLM_SLEEP"]))
        return 0

    build = {"max_batch_size": args.max_batch_size, "max_input_len": args.max_input_len,
             "max_seq_len": args.max_seq_len or ckpt.get("max_position_embeddings") or 2048,
             "max_num_tokens": args.max_num_tokens, "max_beam_width": args.max_beam_width,
             "max_draft_len": args.max_draft_len or int(ckpt.get("max_draft_len", 0)),
             "speculative_decoding_mode": SPEC_FLAGS[args.speculative_decoding_mode],
             "gather_context_logits": args.gather_context_logits,
             "gather_generation_logits": args.gather_generation_logits,
             "kv_cache_type": args.kv_cache_type.upper(), "strongly_typed": True, "opt_num_tokens": None,
             "output_timing_cache": args.output_timing_cache}
    kv = (ckpt.get("quantization") or {}).get("kv_cache_quant_algo")
    quant = (ckpt.get("quantization") or {}).get("quant_algo")
    # builder.py build(): the paged / FP8 context FMHA logic for SM90
    paged, fp8_ctx = args.use_paged_context_fmha == "enable", args.use_fp8_context_fmha == "enable"
    if quant not in ("FP8", "W4A8_AWQ", "NVFP4"):
        fp8_ctx = False
        paged = paged and kv != "FP8"
    elif paged:
        fp8_ctx = kv == "FP8"
    paged = paged and kv != "INT8"
    if args.speculative_decoding_mode:
        build["max_seq_len"] += build["max_draft_len"]
        build["max_num_tokens"] = max(build["max_num_tokens"], args.max_batch_size * (build["max_draft_len"] + 1))
    if args.speculative_decoding_mode == "eagle":
        build["max_seq_len"] += int(ckpt["num_eagle_layers"])
        paged = True
    build["plugin_config"] = {"dtype": ckpt["dtype"], "gemm_plugin": args.gemm_plugin,
                              "gpt_attention_plugin": args.gpt_attention_plugin,
                              "context_fmha": args.context_fmha == "enable",
                              "remove_input_padding": args.remove_input_padding == "enable",
                              "paged_kv_cache": True, "tokens_per_block": args.tokens_per_block,
                              "use_paged_context_fmha": paged, "use_fp8_context_fmha": fp8_ctx,
                              "use_fused_mlp": args.use_fused_mlp == "enable"}
    config = {"version": os.environ.get("FAKE_TRTLLM_VERSION", "1.2.0"), "pretrained_config": ckpt,
              "build_config": build}
    world = int((ckpt.get("mapping") or {}).get("world_size", 1))
    for r in range(world):
        (out / f"rank{r}.engine").write_bytes(b"fake engine")
        print(f"[TensorRT-LLM] Engine for rank {r} serialized", flush=True)
    (out / "config.json").write_text(json.dumps(config, indent=4))
    Path(args.output_timing_cache).write_bytes(b"fake timing cache")
    print("[TensorRT-LLM] Total time of building all engines: 00:00:00", flush=True)
    return 0


def install_fake(bin_dir: Path) -> Path:
    """Write an executable `trtllm-build` in `bin_dir` that runs this script with this Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "trtllm-build"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -u "{Path(__file__).resolve()}" "$@"\n')
    exe.chmod(0o755)
    return exe


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
