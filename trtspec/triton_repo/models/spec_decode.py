"""spec_decode: draft-target speculative decoding, streamed, with per-request acceptance (trtspec).

Inputs: tensorrt_llm's request tensors (input_ids, input_lengths, request_output_len, end_id,
pad_id, stop_words_list, bad_words_list, min_tokens, streaming, sampling) plus num_draft_tokens (K,
the workload's tuned value; 0 = plain target decoding). The stopping rules go to the target of each
round (bls: min_tokens less the tokens emitted so far; a round ending on a stop word ends the
request) or to trtspec.runtime's loop (trtspec.runtime.words). Outputs: output_ids / sequence_length (the new tokens of each step when
streaming, all of them otherwise; never the end id that ends the request, as TensorRT-LLM's
executor returns none, with either engine: a step that emitted only it sends no tokens, only its
statistics), and running acceptance statistics: acceptance_length (tokens per target verification
step, bonus included; the step that emitted the end id counts), total_accepted_draft_tokens,
total_draft_tokens, num_draft_tokens, verify_steps.

Drafter (`drafter` parameter): "model" (default: a draft model, as below), "ngram": no draft
model, the drafts come from a per-request n-gram pool (ngram_pool.py, trtspec/runtime/ngram_pool.py
shipped as it is next to this file), or "model,ngram": both, chosen per request (the drafter
choice per workload, trtspec/tuning/choose.py): a request with the optional
`max_matching_ngram_size` input drafts n-grams (K = num_draft_tokens), one without it drafts with
the model. With n-gram drafts every round is a verify step, with or
without a draft (AL as trtspec.runtime and the profile count it). total_draft_tokens counts the
draft tokens sent (bls), or the positions offered (trtspec.runtime, which records no more).

Two engines, chosen by the `engine` parameter:
- "bls" (trtllm flavor): each round calls `tensorrt_llm_draft` for up to K tokens, then
  `tensorrt_llm` with them as draft_input_ids and request_output_len = drafts + 1; the target's
  output is the accepted prefix plus its own next token, then what it decodes on to
  request_output_len (as the executor does). Fewer tokens than that means the request ended: the
  executor returns no end id (its sequence length does not count it), so a short answer is how a
  round sees one, as in upstream's BLS (target output equal to the draft's, or no new tokens),
  and the loop stops there. Each verify round (a draft was sent; n-gram: every round after the
  first) is one step of the statistics, counted by trtspec.runtime's rule (`round_accepted`,
  runtime/stats.py counted_step): the round that ends the request accepts at most the tokens it
  emitted, end id included, less one, so a round whose first token was the end id (an empty
  answer) is one step, 0 accepted, its drafts sent; with K = 0 every target token is one step, the
  end id's too. Every round re-sends the whole prefix as a
  new executor request, which KV-cache reuse (enable_kv_cache_reuse on both models) makes cheap.
  Unlike upstream's BLS this streams every round and sums the acceptance over all rounds.
- "trtspec.runtime" (cpu flavor): the same loop in-process on the two TRT-LLM checkpoints with
  trtspec.runtime (one KV cache per request instead of re-sent prefixes; the tensorrt_llm* models
  of the repository stay as they are, callable directly). With `draft_mode` eagle3 the draft is an
  EAGLE-3 head on the target (trtspec/runtime/eagle3.py), K its chain length. More heads on the
  same target (`draft_heads`: {drafter name: directory}, per-workload heads; trtspec/triton_repo/
  heads.py) are loaded beside it, sharing the target, and a request whose route names one in the
  optional `draft_head` input drafts with it (absent: the general head).
Sampling (temperature, runtime_top_k, runtime_top_p, seed per request; serving_rules states which
accept rule each route runs at temperature > 0):
- trtspec.runtime: the `accept_rule` parameter (default exact_match, the PyTorch backend's rule:
  lossless, and with the runtime's keyed draws the output is the plain sampled output of the same
  seed); values are checked by trtspec.options.Sampling and a bad one is a one-line error.
- bls: TensorRT-LLM's executor accepts. Without draft logits (parameter draft_logits false) the
  draft drafts greedily (no sampling settings sent to it: the executor's exact_match_resample keeps
  d with probability p(d), highest for the draft's argmax, and that is what the profile predicts);
  the target gets the request's settings. With draft_logits true (the draft engine built with
  --gather_generation_logits) and a sampled request, the draft samples with the request's settings,
  returns its generation logits, and the target gets draft_logits = the distribution the draft
  sampled from (`draft_distribution`: log-softmax of logits / T, top-k / top-p masked to a very
  negative value), because TensorRT-LLM applies no temperature or filtering to draft_logits; the
  executor then runs rejection sampling. Every round is a new executor request, so each round's
  seed is derived from the request's seed and the round's output position (`round_seed`): the
  same seed gives the same output, and rounds do not repeat each other's random draws.
Concurrency: `max_concurrency` worker threads, one request each (trtspec.runtime engine: torch
intra-op threads `torch_threads`, default 1).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from serving_rules import (Acceptance, RequestError, check_min_tokens, draft_len, engine_top_k_top_p, is_sampled,
                           ngram_size, spec_decode_rule, stop_ids)
from trtspec_triton_common import (FINAL, bls, executor_tokens, is_true, llm_request, load_device, max_positions,
                                   out, scalar, tensor)
from trtspec_triton_pool import PooledModel
from word_rules import ends_with_any, request_words

SAMPLING = ("temperature", "runtime_top_k", "runtime_top_p", "repetition_penalty", "presence_penalty",
            "frequency_penalty", "seed")
SAMPLING_DTYPES = {"runtime_top_k": np.int32, "seed": np.uint64}
MASKED_LOGIT = -1.0e4  # a filtered-out token's draft logit: exp() underflows to 0, finite even in fp16
SEED_SPACE = 2 ** 63


def round_seed(seed, position, draft):
    """The seed of one BLS round's executor request: a splitmix64 mix of the request's seed, the
    output position the round starts at, and which engine (draft or target)."""
    x = (int(seed) * 0x9E3779B97F4A7C15 + int(position) * 2 + int(bool(draft))) % 2 ** 64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2 ** 64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2 ** 64
    return (x ^ (x >> 31)) % SEED_SPACE


def round_accepted(accepted, emitted, last):
    """The draft tokens one BLS round counts as accepted, by trtspec.runtime's rule (trtspec/runtime/
    stats.py counted_step, which the tests hold this to; numpy only, so restated here): `accepted`
    drafts matched the target's answer; the round that ends the request (`last`) counts at most the
    tokens it emitted (`emitted`: the end id included, which no answer holds) less one, as nothing
    after the end is compared, so a round whose first token was the end id counts 0."""
    return accepted if not last or accepted + 1 < emitted else max(0, min(accepted, emitted - 1))


def draft_distribution(logits, temperature, top_k=0, top_p=1.0):
    """draft_logits for TensorRT-LLM: log of the distribution a draft engine samples from, per
    position ([K, V] raw generation logits -> [K, V] float32). Order as TensorRT-LLM's sampling
    layers and trtspec.runtime.sampling.probs (which the tests compare this with): logits / T,
    keep the top_k largest (0 = all), keep the smallest most-likely set reaching top_p; filtered
    tokens get MASKED_LOGIT. numpy only: this runs in the TensorRT-LLM container."""
    z = np.asarray(logits, np.float64) / float(temperature)
    keep = np.ones(z.shape, bool)
    k = int(top_k or 0)
    if 0 < k < z.shape[-1]:
        kth = np.sort(z, axis=-1)[..., -k][..., None]
        keep &= z >= kth
    z = np.where(keep, z, -np.inf)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    if top_p is not None and float(top_p) < 1.0:
        order = np.argsort(-p, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(p, order, -1)
        before = np.cumsum(sorted_p, -1) - sorted_p
        drop = np.zeros_like(keep)
        np.put_along_axis(drop, order, before >= float(top_p), -1)
        keep &= ~drop
    with np.errstate(divide="ignore"):
        logq = np.log(np.where(keep, p, 0.0) / np.where(keep, p, 0.0).sum(-1, keepdims=True))
    return np.where(keep, logq, MASKED_LOGIT).astype(np.float32)


class TritonPythonModel(PooledModel):
    pool_name = "spec_decode"
    drafters = frozenset({"model"})  # setup reads the drafter parameter

    def setup(self, p):
        self.engine = p.get("engine", "bls")
        self.target_model = p.get("target_model", "tensorrt_llm")
        self.draft_model = p.get("draft_model", "tensorrt_llm_draft")
        self.max_draft_len = int(p.get("max_draft_len") or 0)
        self.draft_logits = is_true(p.get("draft_logits"), False)  # bls: send draft_logits (see above)
        self.drafters = frozenset(p.get("drafter", "model").split(","))
        if not self.drafters or not self.drafters <= {"model", "ngram"}:
            raise ValueError(f"spec_decode: drafter {p.get('drafter')!r} is not 'model', 'ngram' or 'model,ngram'")
        self.accept_rule = spec_decode_rule(p.get("accept_rule"))  # trtspec.runtime's rule at T > 0
        self.positions = 0  # bls: the TensorRT-LLM engines refuse what exceeds their limits themselves
        self.heads = {}  # drafter name -> models with that EAGLE-3 head (trtspec.runtime, draft_heads)
        if self.engine == "trtspec.runtime":
            # lazy: only the cpu flavor runs trtspec.runtime; the trtllm container (bls) may have no trtspec
            import torch

            from trtspec.runtime.generate import load_models, with_eagle3_head

            # One request per worker thread; torch's own intra-op threads on top of that oversubscribe
            # a small CPU (measured: SmolLM2 greedy 10x slower with 2 intra-op threads on a busy 2-core box).
            threads = int(p.get("torch_threads") or 1)
            if threads > 0:
                torch.set_num_threads(threads)
            self.draft_mode = p.get("draft_mode") or "draft-target"  # eagle3: draft_checkpoint is an EAGLE-3 head
            if self.draft_mode == "eagle3":
                self.models = load_models(p["target_checkpoint"], tokenizer=False, eagle3_head=p["draft_checkpoint"],
                                          **load_device(p))
            else:
                self.models = load_models(p["target_checkpoint"], p["draft_checkpoint"] or None, tokenizer=False,
                                          **load_device(p))
            self.heads = {n: with_eagle3_head(self.models, d)
                          for n, d in json.loads(p.get("draft_heads") or "{}").items()}
            self.positions = max_positions(p["target_checkpoint"], p["draft_checkpoint"])
        elif self.engine != "bls":
            raise ValueError(f"spec_decode: engine {self.engine!r} is not 'bls' or 'trtspec.runtime'")

    def handle(self, request, sender):
        prompt, n, end_id, streaming = llm_request(request, self.positions)
        k = draft_len(scalar(request, "num_draft_tokens", 0), self.max_draft_len)
        size = ngram_size(scalar(request, "max_matching_ngram_size"), self.drafters, k)
        head = scalar(request, "draft_head")
        if head is not None and head not in self.heads:
            raise RequestError(f"draft_head: {head!r} is not one of this spec_decode's heads "
                               f"({', '.join(sorted(self.heads)) or 'none'})")
        stats = Acceptance()
        steps = self._runtime(request, prompt, n, k, end_id, stats, size, head) if self.engine == "trtspec.runtime" \
            else self._bls(request, prompt, n, k, end_id, stats, size)
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
    def _runtime(self, request, prompt, n, k, end_id, stats, size=None, head=None):
        # lazy: cpu flavor only (see setup)
        from trtspec.runtime.generate import stream_request
        from trtspec.runtime.words import Words
        from trtspec.triton_repo.sampling import request_sampling

        sampling = request_sampling(lambda name: scalar(request, name), engine_top_k_top_p)
        words = Words.of(*request_words(lambda name: tensor(request, name)))
        min_tokens = check_min_tokens(scalar(request, "min_tokens", 0))
        eos = stop_ids(end_id, self.models.eos_ids)
        m = self.heads[head] if head is not None else self.models
        mode = ("ngram" if size is not None else self.draft_mode) if k else "greedy"
        pieces = stream_request(m, prompt, n, mode, draft_len=k or None, eos_ids=eos, sampling=sampling,
                                accept=self.accept_rule, ngram_size=size, min_tokens=min_tokens, words=words)
        for piece in pieces:
            s = piece.stats
            stats.steps, stats.accepted = (len(s.steps) if k else s.target_calls), s.accepted_draft_tokens
            # n-gram drafts vary in length: the runtime records the positions each step offered
            stats.drafted = sum(st.offered for st in s.steps) if size is not None else k * len(s.steps)
            yield executor_tokens(piece)  # as the bls engine's executor: no end id

    # ---- trtllm flavor: BLS calls to the two TensorRT-LLM models ------------------------------
    def _call(self, model, ids, n, end_id, pad_id, extra, logits=False):
        """One non-streaming executor request: (tokens, generation logits [tokens, V] or None)."""
        inputs = {"input_ids": np.array([ids], np.int32), "input_lengths": np.array([[len(ids)]], np.int32),
                  "request_output_len": np.array([[n]], np.int32), "streaming": np.array([[False]], bool),
                  "exclude_input_in_output": np.array([[True]], bool)}
        if end_id is not None:
            inputs["end_id"] = np.array([[end_id]], np.int32)
        if pad_id is not None:
            inputs["pad_id"] = np.array([[pad_id]], np.int32)
        if logits:
            inputs["return_generation_logits"] = np.array([[True]], bool)
        inputs.update(extra)
        tokens, rows = [], []
        outputs = ["output_ids", "sequence_length"] + (["generation_logits"] if logits else [])
        for resp in bls(model, inputs, outputs, True):
            ids_out = resp["output_ids"].reshape(-1)
            length = resp.get("sequence_length")
            k = int(length.reshape(-1)[0]) if length is not None else ids_out.size
            tokens.extend(int(t) for t in ids_out[:k])
            gen = resp.get("generation_logits")
            if gen is not None and gen.size:
                rows.append(gen.reshape(-1, gen.shape[-1])[:k])
        return tokens, (np.concatenate(rows)[:len(tokens)] if rows else None)

    def _sampling(self, request):
        """The request's sampling inputs, and its stop / bad words lists, as tensorrt_llm tensors."""
        sampling = {name: t for name in ("stop_words_list", "bad_words_list") if (t := tensor(request, name)) is not None}
        for name in SAMPLING:
            v = scalar(request, name)
            if v is not None:
                sampling[name] = np.array([[v]], SAMPLING_DTYPES.get(name, np.float32))
        return sampling

    def _plain(self, prompt, n, end, sampling, stats, min_tokens=0, stop=()):
        """No speculation for this workload: stream the target directly. One step per target token,
        and one for the end id when it ended the request (fewer than n tokens, no stop word), which
        the executor does not return: its statistics go out in a last, empty piece."""
        inputs = {"input_ids": np.array([prompt], np.int32), "input_lengths": np.array([[len(prompt)]], np.int32),
                  "request_output_len": np.array([[n]], np.int32), "streaming": np.array([[True]], bool),
                  "exclude_input_in_output": np.array([[True]], bool), **sampling}
        if end is not None:
            inputs["end_id"] = np.array([[end]], np.int32)
        if min_tokens:
            inputs["min_tokens"] = np.array([[min_tokens]], np.int32)
        emitted = []
        for resp in bls(self.target_model, inputs, ["output_ids", "sequence_length"], True):
            ids_out = resp["output_ids"].reshape(-1)
            length = resp.get("sequence_length")
            new = [int(t) for t in ids_out[: int(length.reshape(-1)[0]) if length is not None else ids_out.size]]
            stats.steps += len(new)
            emitted.extend(new)
            if new:
                yield new
        if len(emitted) < n and not (emitted and ends_with_any(prompt + emitted, stop)):
            stats.steps += 1
            yield []

    def _round_inputs(self, sampling, position, draft, sampled):
        """Sampling tensors of one round's engine request: the target always gets the request's
        settings; the draft only when it must sample (draft logits on, sampled request); seeds
        per round (round_seed)."""
        if draft and not (self.draft_logits and sampled):
            return {}
        extra = {k: v for k, v in sampling.items() if not (draft and k.endswith("_words_list"))}
        if sampled:
            seed = int(sampling["seed"].reshape(-1)[0]) if "seed" in sampling else 0
            extra["seed"] = np.array([[round_seed(seed, position, draft)]], np.uint64)
        return extra

    def _bls(self, request, prompt, n, k, end_id, stats, size=None):
        pad_id = scalar(request, "pad_id")
        sampling = self._sampling(request)
        end = int(end_id) if end_id is not None else None
        min_tokens = check_min_tokens(scalar(request, "min_tokens", 0))
        stop = request_words(lambda name: sampling.get(name))[0]
        if k == 0:
            yield from self._plain(prompt, n, end, sampling, stats, min_tokens, stop)
            return
        temperature, top_k, top_p = (scalar(request, x) for x in ("temperature", "runtime_top_k", "runtime_top_p"))
        top_k, top_p = engine_top_k_top_p(top_k, top_p)  # as the engines will sample (draft_logits' q)
        sampled = is_sampled(temperature, top_k)
        with_logits = self.draft_logits and sampled and size is None
        pool = None
        if size is not None:
            from ngram_pool import NGramPool  # shipped next to this file in n-gram repositories

            pool = NGramPool(k, size)  # this request's own pool
        out_tokens = []
        while len(out_tokens) < n:
            left = n - len(out_tokens)
            ids = prompt + out_tokens
            draft, logits = [], None
            if pool is not None:  # the first token is the context phase's, as upstream's NGram does it
                draft = pool.draft(0, ids, len(prompt) + n) if out_tokens else []
            elif left > 1:  # (k > 0: k == 0 decoded plainly above)
                draft, logits = self._call(self.draft_model, ids, min(k, left - 1), end, pad_id,
                                           self._round_inputs(sampling, len(out_tokens), True, sampled), with_logits)
            extra = self._round_inputs(sampling, len(out_tokens), False, sampled)
            if min_tokens > len(out_tokens):  # each round is a new executor request: it owes the rest
                extra["min_tokens"] = np.array([[min_tokens - len(out_tokens)]], np.int32)
            if draft:
                extra["draft_input_ids"] = np.array([draft], np.int32)
                if with_logits:
                    if logits is None or len(logits) < len(draft):
                        raise RuntimeError(f"{self.draft_model}: returned no generation_logits for its draft tokens "
                                           "(draft_logits needs the engine built with --gather_generation_logits)")
                    q = draft_distribution(logits[:len(draft)], temperature, top_k or 0,
                                           1.0 if top_p is None else top_p)
                    extra["draft_logits"] = q[None]
            verify = bool(draft) or (pool is not None and bool(out_tokens))  # n-gram: every round after the first
            asked = len(draft) + 1
            answer = self._call(self.target_model, ids, asked, end, pad_id, extra)[0]
            new = answer[:left]
            out_tokens.extend(new)
            # a stop word the round's last token completes leaves it full length: the next round would go on
            stopped = bool(new) and ends_with_any(prompt + out_tokens, stop)
            ended = len(answer) < asked and not stopped  # short of request_output_len: the end id (module docstring)
            if verify:  # (a short answer may be all accepted drafts: the target's own token was the end id)
                a = 0
                while a < min(len(draft), len(new)) and draft[a] == new[a]:
                    a += 1
                stats.steps += 1  # also a round that answers nothing: its first token was the end id
                stats.accepted += round_accepted(a, len(new) + ended, ended or stopped or len(out_tokens) >= n)
                stats.drafted += len(draft)
            yield new  # empty when the round emitted only the end id: its statistics still go out
            if ended or stopped:
                return
