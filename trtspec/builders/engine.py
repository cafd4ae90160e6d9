"""One `trtllm-build` invocation of a plan, and its exact command line."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..upstream import trtllm

TIMING_CACHE = "timing.cache"  # shared by the builds of one plan, inside the output directory


@dataclass
class EngineBuild:
    """One `trtllm-build` invocation."""

    name: str                 # plain | eagle | target | draft; also the engine folder name
    checkpoint_dir: str       # absolute
    engine_dir: str           # relative to the output directory
    architecture: str
    dtype: str
    quant_algo: str | None
    kv_cache_quant_algo: str | None
    tp: int
    speculative_decoding_mode: str | None
    max_draft_len: int        # 0 when not speculative
    num_eagle_layers: int     # 0 unless EAGLE
    max_batch_size: int
    max_input_len: int
    max_seq_len: int          # what we pass
    engine_max_seq_len: int   # what the engine's config.json will say (builder adds the draft)
    max_num_tokens: int
    max_beam_width: int
    plugins: dict[str, str]   # trtllm-build flag (without --) -> value, in argv order
    gather_generation_logits: bool = False
    gather_context_logits: bool = False
    notes: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        """The exact command line; run it with the output directory as the working directory."""
        a = [trtllm.TRTLLM_BUILD, "--checkpoint_dir", self.checkpoint_dir, "--output_dir", self.engine_dir]
        for flag, value in self.plugins.items():
            a += [f"--{flag}", value]
        a += ["--kv_cache_type", trtllm.KV_CACHE_TYPE,
              "--max_batch_size", str(self.max_batch_size), "--max_input_len", str(self.max_input_len),
              "--max_seq_len", str(self.max_seq_len), "--max_num_tokens", str(self.max_num_tokens),
              "--max_beam_width", str(self.max_beam_width)]
        if self.speculative_decoding_mode:
            a += ["--speculative_decoding_mode", self.speculative_decoding_mode,
                  "--max_draft_len", str(self.max_draft_len)]
        if self.gather_generation_logits:
            a.append("--gather_generation_logits")
        if self.gather_context_logits:
            a.append("--gather_context_logits")
        a += ["--input_timing_cache", TIMING_CACHE, "--output_timing_cache", TIMING_CACHE,
              "--workers", str(self.tp)]
        return a
