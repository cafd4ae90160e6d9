"""spec_decode: draft-target speculative decoding, streamed, with per-request acceptance (trtspec).

Inputs: tensorrt_llm's request tensors (input_ids, input_lengths, request_output_len, end_id,
pad_id, streaming, sampling) plus num_draft_tokens (K, the workload's tuned value; 0 = plain
target decoding). Outputs: output_ids / sequence_length (the new tokens of each step when
streaming, all of them otherwise), and running acceptance statistics: acceptance_length (tokens
per target verification step, bonus included), total_accepted_draft_tokens, total_draft_tokens,
num_draft_tokens, verify_steps.

Two engines, chosen by the `engine` parameter:
- "bls" (trtllm flavor): each round calls `tensorrt_llm_draft` for up to K tokens, then
  `tensorrt_llm` with them as draft_input_ids and request_output_len = drafts + 1; the target's
  output is the accepted prefix plus its own next token. Every round re-sends the whole prefix as a
  new executor request, which KV-cache reuse (enable_kv_cache_reuse on both models) makes cheap.
  Unlike upstream's BLS this streams every round and sums the acceptance over all rounds.
- "trtspec.runtime" (cpu flavor): the same loop in-process on the two TRT-LLM checkpoints with
  trtspec.runtime (one KV cache per request instead of re-sent prefixes; the tensorrt_llm* models
  of the repository stay as they are, callable directly). Greedy only: the runtime accepts draft
  tokens by greedy matching, which makes the output exactly the target's greedy output.
Concurrency: `max_concurrency` worker threads, one request each (trtspec.runtime engine: torch
intra-op threads `torch_threads`, default 1).
"""

import numpy as np
import triton_python_backend_utils as pb_utils

from serving_rules import Acceptance, check_greedy, draft_len, stop_ids
from trtspec_triton_common import FINAL, PooledModel, bls, llm_request, max_positions, out, scalar

SAMPLING = ("temperature", "runtime_top_k", "runtime_top_p", "repetition_penalty", "presence_penalty",
            "frequency_penalty", "seed")
SAMPLING_DTYPES = {"runtime_top_k": np.int32, "seed": np.uint64}


class TritonPythonModel(PooledModel):
    pool_name = "spec_decode"

    def setup(self, p):
        self.engine = p.get("engine", "bls")
        self.target_model = p.get("target_model", "tensorrt_llm")
        self.draft_model = p.get("draft_model", "tensorrt_llm_draft")
        self.max_draft_len = int(p.get("max_draft_len") or 0)
        self.positions = 0  # bls: the TensorRT-LLM engines refuse what exceeds their limits themselves
        if self.engine == "trtspec.runtime":
            # lazy: only the cpu flavor runs trtspec.runtime; the trtllm container (bls) may have no trtspec
            import torch

            from trtspec.runtime.generate import load_models

            # One request per worker thread; torch's own intra-op threads on top of that oversubscribe
            # a small CPU (measured: SmolLM2 greedy 10x slower with 2 intra-op threads on a busy 2-core box).
            threads = int(p.get("torch_threads") or 1)
            if threads > 0:
                torch.set_num_threads(threads)
            self.models = load_models(p["target_checkpoint"], p["draft_checkpoint"] or None, tokenizer=False)
            self.positions = max_positions(p["target_checkpoint"], p["draft_checkpoint"])
        elif self.engine != "bls":
            raise ValueError(f"spec_decode: engine {self.engine!r} is not 'bls' or 'trtspec.runtime'")

    def handle(self, request, sender):
        prompt, n, end_id, streaming = llm_request(request, self.positions)
        k = draft_len(scalar(request, "num_draft_tokens", 0), self.max_draft_len)
        stats = Acceptance()
        steps = self._runtime(request, prompt, n, k, end_id, stats) if self.engine == "trtspec.runtime" \
            else self._bls(request, prompt, n, k, end_id, stats)
        collected = []
        for tokens in steps:
            self.check_running(request)
            if streaming:
                sender.send(self._response(tokens, stats, k))
            else:
                collected.extend(tokens)
        if streaming:
            sender.send(flags=FINAL)
        else:
            sender.send(self._response(collected, stats, k), flags=FINAL)

    def _response(self, tokens, stats, k):
        return pb_utils.InferenceResponse(output_tensors=[
            out("output_ids", np.array(tokens, np.int32).reshape(1, 1, -1), np.int32),
            out("sequence_length", [[len(tokens)]], np.int32),
            out("acceptance_length", [[stats.length]], np.float32),
            out("total_accepted_draft_tokens", [[stats.accepted]], np.int32),
            out("total_draft_tokens", [[stats.drafted]], np.int32),
            out("num_draft_tokens", [[k]], np.int32),
            out("verify_steps", [[stats.steps]], np.int32)])

    # ---- cpu flavor: trtspec.runtime in-process ---------------------------------------------
    def _runtime(self, request, prompt, n, k, end_id, stats):
        check_greedy(scalar(request, "temperature"), scalar(request, "runtime_top_k"))
        from trtspec.runtime.generate import stream_request  # lazy: cpu flavor only (see setup)

        eos = stop_ids(end_id, self.models.eos_ids)
        m = self.models
        pieces = stream_request(m, prompt, n, "draft-target" if k else "greedy", draft_len=k or None, eos_ids=eos)
        for piece in pieces:
            s = piece.stats
            stats.steps, stats.accepted = (len(s.steps) if k else s.target_calls), s.accepted_draft_tokens
            stats.drafted = k * len(s.steps)
            yield piece.tokens

    # ---- trtllm flavor: BLS calls to the two TensorRT-LLM models ------------------------------
    def _call(self, model, ids, n, end_id, pad_id, extra):
        inputs = {"input_ids": np.array([ids], np.int32), "input_lengths": np.array([[len(ids)]], np.int32),
                  "request_output_len": np.array([[n]], np.int32), "streaming": np.array([[False]], bool),
                  "exclude_input_in_output": np.array([[True]], bool)}
        if end_id is not None:
            inputs["end_id"] = np.array([[end_id]], np.int32)
        if pad_id is not None:
            inputs["pad_id"] = np.array([[pad_id]], np.int32)
        inputs.update(extra)
        tokens = []
        for resp in bls(model, inputs, ["output_ids", "sequence_length"], True):
            ids_out = resp["output_ids"].reshape(-1)
            length = resp.get("sequence_length")
            k = int(length.reshape(-1)[0]) if length is not None else ids_out.size
            tokens.extend(int(t) for t in ids_out[:k])
        return tokens

    def _bls(self, request, prompt, n, k, end_id, stats):
        pad_id = scalar(request, "pad_id")
        sampling = {}
        for name in SAMPLING:
            v = scalar(request, name)
            if v is not None:
                sampling[name] = np.array([[v]], SAMPLING_DTYPES.get(name, np.float32))
        end = int(end_id) if end_id is not None else None
        if k == 0:  # no speculation for this workload: stream the target directly
            inputs = {"input_ids": np.array([prompt], np.int32), "input_lengths": np.array([[len(prompt)]], np.int32),
                      "request_output_len": np.array([[n]], np.int32), "streaming": np.array([[True]], bool),
                      "exclude_input_in_output": np.array([[True]], bool), **sampling}
            if end is not None:
                inputs["end_id"] = np.array([[end]], np.int32)
            for resp in bls(self.target_model, inputs, ["output_ids", "sequence_length"], True):
                ids_out = resp["output_ids"].reshape(-1)
                length = resp.get("sequence_length")
                new = [int(t) for t in ids_out[: int(length.reshape(-1)[0]) if length is not None else ids_out.size]]
                stats.steps += len(new)
                if new:
                    yield new
            return
        out_tokens = []
        while len(out_tokens) < n:
            left = n - len(out_tokens)
            ids = prompt + out_tokens
            draft = []
            if k > 0 and left > 1:
                draft = self._call(self.draft_model, ids, min(k, left - 1), end, pad_id, {})
            extra = dict(sampling)
            if draft:
                extra["draft_input_ids"] = np.array([draft], np.int32)
            new = self._call(self.target_model, ids, len(draft) + 1, end, pad_id, extra)[:left]
            if not new:
                return
            if draft:
                a = 0
                while a < min(len(draft), len(new) - 1) and draft[a] == new[a]:
                    a += 1
                stats.steps += 1
                stats.accepted += a
                stats.drafted += len(draft)
            if end is not None and end in new:
                new = new[: new.index(end) + 1]
                out_tokens.extend(new)
                yield new
                return
            out_tokens.extend(new)
            yield new
