"""generate: the front model of a trtspec repository (decoupled; streams when `stream` is true).

Inputs: text_input, max_tokens, optional stream, workload, temperature, top_k, top_p,
repetition_penalty, presence_penalty, frequency_penalty, seed, end_id, pad_id, min_tokens (or its 0.x
name min_length, which genai-perf's --output-tokens-mean-deterministic sends; word_rules), stop_words,
bad_words (preprocessing tokenizes the words into stop_words_list / bad_words_list, sent with
min_tokens to spec_decode or the EAGLE profile: the engines' rules, trtspec.runtime.words on the
cpu flavor; a stop word's tokens stay in the text, as the executor keeps them), return_log_probs
(declared to be refused by name when true: no log-prob outputs; word_rules) (the user-facing
names of upstream's BLS/ensemble, so genai-perf's tensorrtllm payloads work as they are; that
includes exclude_input_in_output, which must be true: the prompt is never echoed; an input a
flavor's models cannot honour is refused, not dropped: penalties on the cpu flavor, end_id and
repetition_penalty on llmapi), and speculation (default true; false = speculation off for this
request, so that a baseline is measured through the same repository: draft-target sends K=0 to
spec_decode, the plain target; EAGLE and llmapi engines always draft, so they refuse it and a
baseline needs a target-only deployment).
Outputs: text_output (one piece per response when streaming, the whole text otherwise), and per
request acceptance_length, num_draft_tokens, total_accepted_draft_tokens, total_draft_tokens,
num_output_tokens, route (which tuned setting served it) and sampling_fallback; the statistics
are running totals in every streamed response and final in the last one.
Request parameters trtspec_num_draft_tokens / trtspec_max_matching_ngram_size / trtspec_route_model
replace the tuned route's setting for one request (serving_rules.swept_route): `trtspec perf --sweep`
measures every setting the repository serves with them, the data `trtspec tune --calibrate` fits.

Sampling: temperature / top_k / top_p / seed go to the engines as they are (serving_rules says
which accept rule each route runs at temperature > 0). An EAGLE route (and an llmapi EAGLE-3
one-model route) decodes greedily whatever the temperature, because that is what TensorRT-LLM
does there; a sampled request on such a route is answered with the greedy tokens and
`sampling_fallback` = "greedy" in every response (else ""), so the fallback is never silent.

Per request: pick the route of its `workload` from the `routing` parameter (tuning.json, see
trtspec/triton_repo/routing.py; unknown or missing workload -> the default route), tokenize with
`preprocessing`, refuse it when the prompt or prompt + max_tokens exceed the routing's `limits`
(the engines' max_input_len / max_seq_len, or the checkpoints' positions), then
- draft-target: call `spec_decode` with num_draft_tokens = the workload's tuned K at the band
  matching the requests in flight (the largest tuned band <= in flight); n-gram: the same, with
  the band's max_matching_ngram_size as well (also in a draft-target repository whose drafter
  choice gave a workload n-gram drafting); the `route` output names it: `chat@1:K=3` (the
  repository's drafter), `edit@1:K=4:ngram:n=2`;
- EAGLE: call the workload's `tensorrt_llm_<profile>` model (its tree is that model's
  eagle_choices) with return_perf_metrics, and derive the acceptance length from its counters:
  TRT-LLM adds min(draft tokens, max path length = tree depth) to total_draft_tokens and
  (tokens of the iteration - 1) to total_accepted_draft_tokens per iteration, so
  steps = total_draft_tokens / depth and AL = 1 + accepted / steps, the runtime's definition;
and detokenize with `postprocessing` (all tokens so far, streaming the new suffix of the text; a
tail the next tokens may still change, an incomplete UTF-8 character or what the tokenizer's clean-up may
rewrite, is held back until it settles: serving_rules.new_suffix).
A request the client cancels (or that stops early) cancels the call behind it: spec_decode, or the
EAGLE profile's tensorrt_llm_<profile> (see bls in trtspec_triton_common: Triton's own BLS
cancellation where the python backend has it, which the C++ tensorrtllm backend honors; else a
cancel message, which trtspec's python models take).
Parameters: routing (JSON), max_concurrency (worker threads = requests served at once),
llm_cancel_messages (true: the tensorrt_llm* models are trtspec's python models, cpu flavor),
tokenizer_dir (llmapi: the tokenizer its output tokens are counted with).
"""

import contextlib
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

from serving_rules import (CHAIN_MODES, SWEEP_K, SWEEP_MODEL, SWEEP_NGRAM, RequestError, acceptance_length,
                           band_label, chain_route, chain_setting, check_limits, check_llmapi_inputs,
                           check_min_tokens, new_suffix,
                           output_len, pick_band, sampling_fallback, swept_route, tree_depth, trtllm_steps)
from trtspec_triton_common import FINAL, bls, out, request_parameter, scalar, tensor
from trtspec_triton_pool import PooledModel
from word_rules import check_llmapi_words, check_log_probs, min_tokens_or_alias

SAMPLING_TO_TRTLLM = {"temperature": ("temperature", np.float32), "top_k": ("runtime_top_k", np.int32),
                      "top_p": ("runtime_top_p", np.float32), "repetition_penalty": ("repetition_penalty", np.float32),
                      "presence_penalty": ("presence_penalty", np.float32),
                      "frequency_penalty": ("frequency_penalty", np.float32), "seed": ("seed", np.uint64)}
LLMAPI_SAMPLING = {"temperature": ("sampling_param_temperature", np.float32),
                   "top_k": ("sampling_param_top_k", np.int32), "top_p": ("sampling_param_top_p", np.float32),
                   "presence_penalty": ("sampling_param_presence_penalty", np.float32),
                   "frequency_penalty": ("sampling_param_frequency_penalty", np.float32),
                   "seed": ("sampling_param_seed", np.uint64)}
SPEC_OUTPUTS = ["output_ids", "sequence_length", "acceptance_length", "total_accepted_draft_tokens",
                "total_draft_tokens", "num_draft_tokens", "verify_steps"]
LLM_OUTPUTS = ["output_ids", "sequence_length", "total_accepted_draft_tokens", "total_draft_tokens"]


class TritonPythonModel(PooledModel):
    pool_name = "generate"
    front = True

    def setup(self, p):
        self.routing = json.loads(p["routing"])
        self.mode = self.routing["mode"]
        # which callee takes a cancel message: spec_decode always; an EAGLE profile when it is cpu_llm
        self.cancel_messages = self.mode in CHAIN_MODES or p.get("llm_cancel_messages") == "true"
        self.depth = {m["model"]: tree_depth(m["eagle_choices"]) for m in self.routing.get("models", [])}
        self.lock = threading.Lock()
        self.inflight = 0
        if self.mode == "llmapi":  # the LLM API model sends text only: its tokens are counted here
            from transformers import AutoTokenizer
            self.tokenizer = AutoTokenizer.from_pretrained(p["tokenizer_dir"])

    def route(self, workload, inflight):
        known = workload in self.routing["workloads"]
        entry = self.routing["workloads"][workload] if known else self.routing["default"]
        label = workload if known else "default"
        if self.mode in CHAIN_MODES:
            bands = entry if known else entry["bands"]
            band = pick_band(bands, inflight)
            # n-gram: the band's matching size travels with K; draft_head: a workload's own EAGLE-3 head
            k, n, head = band["num_draft_tokens"], band.get("max_matching_ngram_size"), band.get("draft_head")
            return chain_route(k, n, head, band_label(label, band["concurrency"], chain_setting(k, n, head)))
        # one band serves every request here (EAGLE engines: triton.eagle_band; llmapi: the smallest)
        return {"model": entry["model"], "num_draft_tokens": int(entry["num_draft_tokens"]),
                "label": band_label(label, self.routing["band"], entry["model"])}

    def _fallback(self, request, route):
        """sampling_fallback of this request: EAGLE engines, and the llmapi models the routing names
        greedy (one-model EAGLE-3; not tensorrt_llm_k0 or n-gram ones, which sample), decode greedily."""
        greedy_only = self.mode == "eagle" or route.get("model") in self.routing.get("greedy_models", ())
        return sampling_fallback(greedy_only, scalar(request, "temperature"), scalar(request, "top_k"),
                                 scalar(request, "top_p"))

    def _speculation_off(self, route):
        if self.mode not in CHAIN_MODES:
            raise RequestError(f"speculation=false: this {self.mode} repository's engines always draft; measure the "
                            "baseline against a target-only deployment (a repository without speculation)")
        return {"num_draft_tokens": 0, "label": route["label"].split("@")[0] + ":speculation-off:K=0"}

    def handle(self, request, sender):
        with self.lock:
            self.inflight += 1
            inflight = self.inflight
        try:
            self._generate(request, sender, inflight)
        finally:
            with self.lock:
                self.inflight -= 1

    def _generate(self, request, sender, inflight):
        text = scalar(request, "text_input")
        if not text:
            raise RequestError("text_input: empty prompt")
        max_tokens = output_len(scalar(request, "max_tokens"), "max_tokens")
        stream = bool(scalar(request, "stream", False))
        if not bool(scalar(request, "exclude_input_in_output", True)):
            raise RequestError("exclude_input_in_output: only true is supported "
                               "(text_output never includes the prompt)")
        check_log_probs(scalar(request, "return_log_probs"))
        min_given = scalar(request, "min_tokens"), scalar(request, "min_length")
        min_tokens = check_min_tokens(min_tokens_or_alias(*min_given))
        words = {n: w for n in ("stop_words", "bad_words") if (w := tensor(request, n)) is not None and w.size}
        workload = scalar(request, "workload", "") or ""
        route = self.route(workload, inflight)
        route = swept_route(self.routing, route, *(request_parameter(request, p) for p in (SWEEP_K, SWEEP_NGRAM,
                                                                                           SWEEP_MODEL)))
        if not bool(scalar(request, "speculation", True)):
            route = self._speculation_off(route)
        route["fallback"] = self._fallback(request, route)
        if self.mode == "llmapi":
            check_llmapi_words(sorted(words), *min_given)
            return self._llmapi(request, sender, route, text, max_tokens, stream)
        pre_in = {"QUERY": np.array([[text.encode("utf-8")]], dtype=object),
                  "REQUEST_OUTPUT_LEN": np.array([[max_tokens]], np.int32)}
        for name, key in (("end_id", "END_ID"), ("pad_id", "PAD_ID")):
            v = scalar(request, name)
            if v is not None:
                pre_in[key] = np.array([[v]], np.int32)
        for name, key in (("stop_words", "STOP_WORDS_DICT"), ("bad_words", "BAD_WORDS_DICT")):
            if name in words:
                pre_in[key] = words[name].reshape(1, -1)
        lists = {"stop_words": ("STOP_WORDS_IDS", "stop_words_list"), "bad_words": ("BAD_WORDS_IDS", "bad_words_list")}
        pre = next(bls("preprocessing", pre_in, ["INPUT_ID", "REQUEST_INPUT_LEN", "OUT_END_ID", "OUT_PAD_ID"]
                       + [lists[n][0] for n in words], False))
        n = int(pre["REQUEST_INPUT_LEN"].reshape(-1)[0])
        check_limits(n, max_tokens, self.routing.get("limits"))  # before any engine sees the request
        inputs = {"input_ids": pre["INPUT_ID"].reshape(1, -1)[:, :n].astype(np.int32),
                  "input_lengths": np.array([[n]], np.int32),
                  "request_output_len": np.array([[max_tokens]], np.int32),
                  "end_id": pre["OUT_END_ID"].reshape(1, 1).astype(np.int32),
                  "pad_id": pre["OUT_PAD_ID"].reshape(1, 1).astype(np.int32),
                  "streaming": np.array([[True]], bool)}
        for name in words:  # [1, 2, N], upstream's format (word_rules)
            inputs[lists[name][1]] = pre[lists[name][0]].reshape(1, 2, -1).astype(np.int32)
        if min_tokens:
            inputs["min_tokens"] = np.array([[min_tokens]], np.int32)
        for name, (target_name, dtype) in SAMPLING_TO_TRTLLM.items():
            v = scalar(request, name)
            if v is not None:
                inputs[target_name] = np.array([[v]], dtype)
        if self.mode in CHAIN_MODES:
            model, outputs = "spec_decode", SPEC_OUTPUTS
            inputs["num_draft_tokens"] = np.array([[route["num_draft_tokens"]]], np.int32)
            if "max_matching_ngram_size" in route:
                inputs["max_matching_ngram_size"] = np.array([[route["max_matching_ngram_size"]]], np.int32)
            if "draft_head" in route:
                inputs["draft_head"] = np.array([[route["draft_head"].encode("utf-8")]], dtype=object)
        else:
            model, outputs = route["model"], LLM_OUTPUTS
            inputs["exclude_input_in_output"] = np.array([[True]], bool)
            inputs["return_perf_metrics"] = np.array([[True]], bool)

        tokens, sent, told = [], "", None  # told: what the last streamed response reported
        stats = {"acceptance_length": 1.0, "accepted": 0, "drafted": 0}
        steps = bls(model, inputs, outputs, True, self.workers.stop, cancellable=self.cancel_messages)
        with contextlib.closing(steps):  # closing early (Cancelled, an error) cancels the call's stream
            for resp in steps:
                self.check_running(request)
                ids = resp.get("output_ids")
                if ids is not None:
                    length = resp.get("sequence_length")
                    k = int(length.reshape(-1)[0]) if length is not None else ids.shape[-1]
                    tokens.extend(int(t) for t in ids.reshape(-1)[:k])
                self._update_stats(stats, resp, model)
                if stream and ids is not None and ids.size:
                    piece, sent = self._piece(tokens, sent, final=False)
                    if piece:
                        sender.send(self._response(piece, stats, route, len(tokens)))
                        told = (len(tokens), dict(stats))
        self.check_running(request)
        piece, sent = self._piece(tokens, sent, final=True) if stream else (self._detok(tokens), None)
        # the last round's statistics go out even when its text is empty (it emitted only the end id,
        # which no model returns) or it brought counters only: the final numbers are the last response's
        if piece or not stream or (len(tokens), stats) != told:
            sender.send(self._response(piece, stats, route, len(tokens)), flags=0 if stream else FINAL)
        if stream:
            sender.send(flags=FINAL)

    def _llmapi(self, request, sender, route, text, max_tokens, stream):
        """llmapi flavor: the LLM API model tokenizes, drafts and detokenizes itself. Each of its
        streamed responses carries the whole completion so far (upstream.triton.LLMAPI_TEXT_IS_CUMULATIVE,
        with its source), so the new suffix is forwarded (new_suffix). It sends
        no token ids or counts, so num_output_tokens counts the text's tokens as genai-perf does
        (the target's tokenizer, no special tokens): per piece while streaming, the whole text in
        the last response. It reports no acceptance counters (acceptance_length stays 0)."""
        check_llmapi_inputs(lambda name: scalar(request, name))
        inputs = {"text_input": np.array([text.encode("utf-8")], dtype=object),
                  "sampling_param_max_tokens": np.array([max_tokens], np.int32),
                  "sampling_param_exclude_input_from_output": np.array([True], bool),
                  "streaming": np.array([True], bool)}
        for name, (key, dtype) in LLMAPI_SAMPLING.items():
            v = scalar(request, name)
            if v is not None:
                inputs[key] = np.array([v], dtype)
        stats = {"acceptance_length": 0.0, "accepted": 0, "drafted": 0}
        sent, streamed = "", 0  # streamed: the tokens of the pieces sent so far
        for resp in bls(route["model"], inputs, ["text_output"], True, self.workers.stop):
            self.check_running(request)
            so_far = "".join(v.decode("utf-8") if isinstance(v, bytes) else str(v)
                             for v in resp["text_output"].reshape(-1))
            piece, sent = new_suffix(so_far, sent)
            if stream and piece:
                streamed += self._count(piece)
                sender.send(self._response(piece, stats, route, streamed))
        self.check_running(request)
        n = self._count(sent)  # the whole text's count (a piece boundary can split a token)
        if not stream:
            sender.send(self._response(sent, stats, route, n), flags=FINAL)
            return
        if n != streamed:
            sender.send(self._response("", stats, route, n))
        sender.send(flags=FINAL)

    def _count(self, text):
        """Output tokens of `text` as genai-perf counts them: the target's tokenizer, no special tokens."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def _update_stats(self, stats, resp, model):
        def get(name):
            v = resp.get(name)
            return None if v is None or v.size == 0 else v.reshape(-1)[0].item()

        accepted, drafted = get("total_accepted_draft_tokens"), get("total_draft_tokens")
        if accepted is not None:
            stats["accepted"] = int(accepted)
        if drafted is not None:
            stats["drafted"] = int(drafted)
        if self.mode in CHAIN_MODES:
            al = get("acceptance_length")
            if al is not None:
                stats["acceptance_length"] = float(al)
        else:
            steps = trtllm_steps(stats["drafted"], self.depth[model])
            stats["acceptance_length"] = acceptance_length(stats["accepted"], steps)

    def _detok(self, tokens):
        if not tokens:
            return ""
        res = next(bls("postprocessing", {"TOKENS_BATCH": np.array([[tokens]], np.int32),
                                          "SEQUENCE_LENGTH": np.array([[len(tokens)]], np.int32)}, ["OUTPUT"], False))
        value = res["OUTPUT"].reshape(-1)[0]
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)

    def _piece(self, tokens, sent, final):
        return new_suffix(self._detok(tokens), sent, final)  # an unsettled tail waits for the next step

    def _response(self, text, stats, route, n_tokens):
        return pb_utils.InferenceResponse(output_tensors=[
            out("text_output", np.array([[text.encode("utf-8")]], dtype=object), object),
            out("acceptance_length", [[stats["acceptance_length"]]], np.float32),
            out("num_draft_tokens", [[route["num_draft_tokens"]]], np.int32),
            out("total_accepted_draft_tokens", [[stats["accepted"]]], np.int32),
            out("total_draft_tokens", [[stats["drafted"]]], np.int32),
            out("num_output_tokens", [[n_tokens]], np.int32),
            out("route", np.array([[route["label"].encode("utf-8")]], dtype=object), object),
            out("sampling_fallback", np.array([[route["fallback"].encode("utf-8")]], dtype=object), object)])
