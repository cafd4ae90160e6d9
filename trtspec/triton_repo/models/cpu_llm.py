"""tensorrt_llm* for the cpu flavor: a python-backend stand-in for the C++ tensorrtllm backend (trtspec).

It takes the subset of `tensorrt_llm`'s tensors that trtspec's models and a direct client use,
with the same names, types and shapes, and runs the TRT-LLM checkpoint with trtspec.runtime:
- input_ids / input_lengths / request_output_len / end_id (the end id that ends a request is not
  returned, as the executor's; executor_tokens), streaming (one response per target
  step, carrying that step's new tokens; otherwise one response), exclude_input_in_output (else
  the prompt is prepended when not streaming), min_tokens (no end id before that many generated
  tokens: their logits are masked per verified position until then; serving_rules.check_min_tokens,
  and trtspec.upstream.sampling for where the engine's kernel differs on verify steps),
  stop_words_list / bad_words_list (upstream's [2, N] format, word_rules; trtspec.runtime.words:
  a stop word's tokens are returned, nothing after them);
- draft_input_ids (a `draft_tokens_external` target): prompt + draft in one forward, the accepted
  draft prefix plus the target's next token, then plain decoding up to request_output_len, as the
  executor does with external draft tokens;
- role "eagle": EAGLE-1 decoding with the model's `eagle_choices` parameter (brace syntax, as the
  C++ backend parses it);
- return_perf_metrics: total_accepted_draft_tokens and total_draft_tokens with TRT-LLM's
  accounting (per verification step: accepted tokens, and min(draft tokens, max path length));
  acceptance_rate = accepted / drafted.
Sampling: temperature / runtime_top_k / runtime_top_p / seed per request (checked by
trtspec.options.Sampling; a bad value is a one-line error naming the input; a penalty set to
anything but off is refused, the runtime has none), with the rule of the
engine path each role stands for (serving_rules, "sampling at temperature > 0"): plain decoding
samples the target; draft_input_ids are checked by exact_match_resample (the engine without
draft logits); the "eagle" role decodes greedily whatever the temperature, as TensorRT-LLM's
Triton backend does (generate flags that fallback in its response). Same seed, same output.

Loading: with lazy_load true the checkpoint is loaded on the first request, not at start-up. That
is what draft-target repositories use: their `spec_decode` runs both checkpoints in-process, so
these models serve only clients that call them directly, and loading them eagerly would double the
server's memory and start-up time for nothing. initialize() still checks the checkpoint's
config.json and rank files, so a bad path fails the model load, not the first request. EAGLE
profiles are the serving path and load eagerly.
Parameters: checkpoint_dir, role (target | draft | eagle), eagle_choices, exclude_input_in_output,
lazy_load, max_concurrency, torch_threads (default 1: one request per worker thread).
"""

import json
import os
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

from serving_rules import (RESAMPLE_RULE, acceptance_rate, check_beam_width, check_min_tokens, engine_top_k_top_p,
                           parse_braces, stop_ids, tree_depth)
from trtspec_triton_common import FINAL, executor_tokens, is_true, llm_request, load_device, out, scalar, tensor
from trtspec_triton_pool import PooledModel
from word_rules import request_words


class TritonPythonModel(PooledModel):
    pool_name = "tensorrt_llm"

    def setup(self, p):
        self.path = p["checkpoint_dir"]
        self.role = p.get("role", "target")
        self.choices = eagle_choices(p.get("eagle_choices")) if self.role == "eagle" else None
        self.exclude_default = is_true(p.get("exclude_input_in_output"), False)
        self.torch_threads = int(p.get("torch_threads") or 1)
        self.device = load_device(p)
        with open(os.path.join(self.path, "config.json")) as f:
            cfg = json.load(f)
        self.positions = int(cfg.get("max_position_embeddings") or 0)
        tp = int((cfg.get("mapping") or {}).get("tp_size", 1))
        for r in range(tp):
            if not os.path.isfile(os.path.join(self.path, f"rank{r}.safetensors")):
                raise FileNotFoundError(f"{self.path}: missing rank{r}.safetensors")
        self.models, self.load_lock = None, threading.Lock()
        if not is_true(p.get("lazy_load"), False):
            self._load()

    def _load(self):
        with self.load_lock:
            if self.models is None:
                # lazy: torch and trtspec load with the checkpoint (lazy_load defers both to the first request)
                import torch

                from trtspec.runtime.generate import load_models

                # one request per worker thread: no intra-op threads on top (see spec_decode.py)
                torch.set_num_threads(self.torch_threads)

                self.models = load_models(self.path, tokenizer=False, **self.device)
        return self.models

    def handle(self, request, sender):
        # lazy: imported with the checkpoint (see _load)
        from trtspec.runtime.generate import stream_request
        from trtspec.runtime.words import Words
        from trtspec.triton_repo.sampling import request_sampling

        prompt, n, end_id, streaming = llm_request(request, self.positions)
        sampling = request_sampling(lambda name: scalar(request, name), engine_top_k_top_p)
        check_beam_width(scalar(request, "beam_width", 1))
        exclude = scalar(request, "exclude_input_in_output")
        exclude = self.exclude_default if exclude is None else bool(exclude)
        perf = bool(scalar(request, "return_perf_metrics", False))
        min_tokens = check_min_tokens(scalar(request, "min_tokens", 0))
        words = Words.of(*request_words(lambda name: tensor(request, name)))
        draft = tensor_list(request, "draft_input_ids")
        m = self._load()
        eos = stop_ids(end_id, m.eos_ids)
        acc = {"accepted": 0, "drafted": 0}
        if self.role == "eagle":
            depth = tree_depth(self.choices) if self.choices else None
            pieces = stream_request(m, prompt, n, "eagle", eagle_choices=self.choices, eos_ids=eos,
                                    min_tokens=min_tokens, words=words)
        elif draft:
            pieces = self._verify_then_decode(m, prompt, draft, n, eos, acc, sampling, min_tokens, words)
            depth = None
        else:
            pieces = stream_request(m, prompt, n, "greedy", eos_ids=eos, sampling=sampling, min_tokens=min_tokens,
                                    words=words)
            depth = None
        collected = []
        for piece in pieces:
            self.check_running(request)
            if depth is not None:
                s = piece.stats
                acc["accepted"], acc["drafted"] = s.accepted_draft_tokens, depth * len(s.steps)
            tokens = executor_tokens(piece)
            if streaming:
                sender.send(self._response(tokens, acc, perf, len(prompt), len(tokens)))
            else:
                collected.extend(tokens)
        if streaming:
            sender.send(flags=FINAL)
        else:
            tokens = collected if exclude else prompt + collected
            sender.send(self._response(tokens, acc, perf, len(prompt), len(collected)), flags=FINAL)

    def _verify_then_decode(self, m, prompt, draft, n, eos, acc, sampling, min_tokens, words):
        """The engine's draft_tokens_external step (exact_match_resample at T > 0: no draft logits
        reach this model), then plain decoding. The continuation restarts the runtime's output
        positions at 0, so it draws with the next seed rather than re-using the first step's draws,
        and owes min_tokens less what the first step emitted."""
        # lazy: imported with the checkpoint (see _load)
        from trtspec.runtime.accept import Key, accept_rule
        from trtspec.runtime.decode import verify_external
        from trtspec.runtime.generate import stream_request
        from trtspec.upstream.sampling import SEED_LIMIT

        rule = accept_rule(RESAMPLE_RULE, sampling)
        first = verify_external(m.target, prompt, draft, n, eos, accept=rule, key=Key(sampling.seed, 0),
                                min_tokens=min_tokens, words=words)
        acc["accepted"] += first.step.accepted
        acc["drafted"] += len(draft)
        yield first
        if not first.done:
            rest = sampling.model_copy(update={"seed": (sampling.seed + 1) % SEED_LIMIT})
            yield from stream_request(m, prompt + first.tokens, n - len(first.tokens), "greedy", eos_ids=eos,
                                      sampling=rest, min_tokens=max(0, min_tokens - len(first.tokens)), words=words)

    def _response(self, tokens, acc, perf, n_input, n_output):
        outs = [out("output_ids", np.array(tokens, np.int32).reshape(1, 1, -1), np.int32),
                out("sequence_length", [[len(tokens)]], np.int32),
                out("num_input_tokens", [[n_input]], np.int32),
                out("num_output_tokens", [[n_output]], np.int32)]
        if perf:
            rate = acceptance_rate(acc["accepted"], acc["drafted"])
            outs += [out("total_accepted_draft_tokens", [[acc["accepted"]]], np.int32),
                     out("total_draft_tokens", [[acc["drafted"]]], np.int32),
                     out("acceptance_rate", [[rate]], np.float32)]
        return pb_utils.InferenceResponse(output_tensors=outs)


def eagle_choices(text):
    """The eagle_choices parameter in brace syntax, or None when not set (the runtime's default tree)."""
    if not (text or "").strip():
        return None
    try:
        return parse_braces(text)
    except ValueError as e:
        raise ValueError(f"eagle_choices: {e}") from None


def tensor_list(request, name):
    t = pb_utils.get_input_tensor_by_name(request, name)
    return [] if t is None else [int(x) for x in t.as_numpy().reshape(-1)]
