"""Serving rules: what a trtspec repository does with a request, stated once.

Two kinds of readers use the same functions, which is why they live here and nowhere else:
- the python-backend models (generate, spec_decode, cpu_llm), which get this file copied next to
  their model.py (as `serving_rules`) and import it there; in the trtllm flavor they run in the
  TensorRT-LLM Triton container, where trtspec is not installed, so this module imports nothing
  but the standard library (no triton_python_backend_utils, numpy, torch or trtspec);
- trtspec itself (as `trtspec.triton_repo.models.serving_rules`): routing writes the brace syntax
  the models parse, perf predicts a run with the bands the models picked (`label_band`), the
  repository validator checks model parameters with the same parser.

The rules: which tuned band serves a request, the `eagle_choices` brace syntax, request validation,
the accept rule each route runs at temperature > 0 (and top_k/top_p as the engines read them), and
the acceptance counters (acceptance length = tokens per target verification step, bonus included).
"""

import re


# ---- draining (`trtspec serve` and the front model agree on these; see trtspec_triton_common) ----
CONTROL_DIR = "TRTSPEC_CONTROL_DIR"  # environment variable: the directory serve and the stubs share
DRAIN_FILE = "draining"  # created there by serve when it begins to drain
STOP_FILE = "stopping"  # created when the drain period is over, just before Triton's SIGTERM
INFLIGHT_SUFFIX = ".inflight"  # <pool name><suffix>: the front model's in-flight count while draining


class RequestError(ValueError):
    """A request that breaks a serving rule: the models send its message to the client as the
    response error (no traceback), and keep serving."""


# ---- routes ------------------------------------------------------------------------------------
# Modes served by one spec_decode with K per request: a draft model's chain, n-gram drafts (K and
# max_matching_ngram_size per band, no draft model), or (cpu flavor) an EAGLE-3 head's chain.
CHAIN_MODES = ("draft-target", "ngram", "eagle3")


# ---- concurrency bands -----------------------------------------------------------------------
def band_concurrency(band):
    """A band's concurrency, whether the band is tuning.json's object or the routing table's dict."""
    return band["concurrency"] if isinstance(band, dict) else band.concurrency


def pick_band(bands, inflight):
    """The tuned band served with `inflight` requests in flight: the largest band <= inflight,
    else (fewer requests than the smallest band, or a load that is not a fixed concurrency:
    None) the smallest band. None when there are no bands. perf predicts with this rule, so a
    measured run is compared with the number the served setting came from."""
    ordered = sorted(bands, key=band_concurrency)
    if not ordered:
        return None
    fit = [b for b in ordered if inflight is not None and band_concurrency(b) <= inflight]
    return fit[-1] if fit else ordered[0]


# ---- eagle_choices brace syntax ----------------------------------------------------------------
def braces(choices):
    """eagle_choices in the brace syntax the C++ backend parses ("{0}, {0, 1}"; reference §3.5)."""
    return ", ".join("{" + ", ".join(str(i) for i in c) + "}" for c in choices)


def parse_braces(text):
    """The inverse of `braces`, as strict as `csvStrToVecVecInt` (python-list syntax is rejected,
    because the C++ backend silently ignores it and falls back to mc_sim_7b_63)."""
    s = text.strip()
    if not s or s[0] != "{" or s[-1] != "}" or "[" in s or "]" in s:
        raise ValueError(f"expected the brace form '{{0}}, {{0, 1}}', got {text!r}")
    out = []
    for part in re.split(r"\}\s*,\s*\{", s[1:-1]):
        try:
            out.append([int(x) for x in part.split(",")])
        except ValueError:
            raise ValueError(f"bad choice {{{part}}} in {text!r}") from None
    return out


def tree_depth(choices):
    """The tree's depth: the longest path, which is what TRT-LLM counts per step as drafted."""
    return max(len(c) for c in choices)


# ---- request validation ------------------------------------------------------------------------
def output_len(value, name):
    """A requested number of output tokens (`max_tokens`, `request_output_len`) as an int >= 1."""
    if value is None or int(value) < 1:
        raise RequestError(f"{name}: expected >= 1, got {value}")
    return int(value)


def check_positions(prompt_len, output_len, max_positions):
    """Refuse a request the model's positions cannot hold (prompt + output tokens) before any KV
    cache is allocated (the cpu flavor preallocates both: max_tokens 10^9 would end in an allocator
    error, a prompt past the trained positions be served as noise). max_positions 0: no bound."""
    if not max_positions:
        return
    if prompt_len >= max_positions:
        raise RequestError(f"input_ids: the prompt has {prompt_len} tokens; the model has {max_positions} "
                           "positions (max_position_embeddings), which leaves no room for output")
    if prompt_len + output_len > max_positions:
        raise RequestError(f"max_tokens: {output_len} output tokens after a {prompt_len}-token prompt exceed the "
                           f"model's {max_positions} positions (max_position_embeddings); ask for at most "
                           f"{max_positions - prompt_len}")


def check_limits(prompt_len, output_len, limits):
    """Refuse, in `generate` before any model is called, a request beyond the repository's limits
    (routing `limits`, written from the engines' build config or the checkpoints' positions by
    trtspec.triton_repo.repo): max_input_len prompt tokens, max_seq_len prompt + output tokens.
    An absent limit is not checked (llmapi: the LLM API checks its own)."""
    max_input, max_seq = (limits or {}).get("max_input_len"), (limits or {}).get("max_seq_len")
    if max_input and prompt_len > max_input:
        raise RequestError(f"text_input: the prompt has {prompt_len} tokens; this repository serves at most "
                           f"max_input_len={max_input}")
    if max_seq and prompt_len + output_len > max_seq:
        raise RequestError(f"max_tokens: {output_len} output tokens after a {prompt_len}-token prompt exceed this "
                           f"repository's max_seq_len={max_seq}; ask for at most {max(max_seq - prompt_len, 0)}")


def one_row(batch_rows, name):
    """A request carries one prompt: a batch of several rows in one request is refused rather than
    answered for its first row only (each prompt is its own request, and they batch in flight)."""
    if batch_rows > 1:
        raise RequestError(f"{name}: {batch_rows} rows in one request; send one prompt per request")


def draft_len(value, max_draft_len):
    """num_draft_tokens as an int in [0, max_draft_len] (max_draft_len 0: no upper bound)."""
    k = int(value or 0)
    if k < 0 or (max_draft_len and k > max_draft_len):
        raise RequestError(f"num_draft_tokens: {k} is outside [0, max_draft_len={max_draft_len}]")
    return k


def ngram_size(value, drafters, k):
    """max_matching_ngram_size of a request as an int >= 1, or None (the spec_decode's model drafts).
    drafters: what this spec_decode drafts with ({"model"}, {"ngram"} or both: a repository that
    serves each workload its own drafter, trtspec/tuning/choose.py). A request with the size drafts
    n-grams; without it, the model. Required where n-gram drafting is all there is (k > 0;
    routing writes it into every n-gram band), refused where there is no n-gram drafting."""
    if value is None:
        if "model" not in drafters and k:
            raise RequestError("max_matching_ngram_size: required with num_draft_tokens > 0 (n-gram drafting)")
        return None
    if "ngram" not in drafters:
        raise RequestError("max_matching_ngram_size: this spec_decode drafts with a draft model, not n-grams")
    n = int(value)
    if n < 1:
        raise RequestError(f"max_matching_ngram_size: {n} is below 1")
    return n if k else None


# ---- the calibration sweep (`trtspec perf --sweep`, trtspec/perf/sweep.py) ------------------------
# Request parameters (not inputs: no model config changes, so every repository serves them) that
# replace the route's tuned setting for one request, so a client can measure every setting the
# repository serves: K (and an n-gram route's matching size) where K is a per-request setting
# (draft-target, n-gram, EAGLE-3 chains), else the name of a served model (EAGLE profiles, llmapi).
SWEEP_K = "trtspec_num_draft_tokens"
SWEEP_NGRAM = "trtspec_max_matching_ngram_size"
SWEEP_MODEL = "trtspec_route_model"


def served_models(routing):
    """{model name: its num_draft_tokens} of every model generate can route to (EAGLE profiles,
    llmapi settings); empty for chain repositories (one spec_decode serves every K)."""
    models = {m["model"]: int(m["num_draft_tokens"]) for m in routing.get("models") or []}
    for e in list(routing.get("workloads", {}).values()) + [routing.get("default", {})]:
        if isinstance(e, dict) and "model" in e:
            models.setdefault(e["model"], int(e["num_draft_tokens"]))
    return models


def band_label(workload, concurrency, setting):
    """The route label of a request served by a tuned band: `chat@2:K=3` (a chain: chain_setting),
    `chat@1:tensorrt_llm_c1_p0` (a served model). `workload` is the routing's name for it ("default"
    for a workload the repository does not know)."""
    return f"{workload}@{concurrency}:{setting}"


def chain_setting(k, ngram=None, head=None):
    """A chain's setting as labels name it: `K=3`, then the n-gram drafter's matching size
    (`:ngram:n=2`) or a workload's own EAGLE-3 head (`:head=eagle3-code`) where they apply. Route labels
    (band_label, sweeps) and perf's sweep settings read alike, so results join on them."""
    return f"K={k}" + (f":ngram:n={ngram}" if ngram is not None else "") + (f":head={head}" if head is not None else "")


def chain_route(k, ngram, head, label):
    """The route of a chain request: K, the n-gram size and the head where they apply, its label."""
    route = {"num_draft_tokens": int(k), "label": label}
    if ngram is not None:
        route["max_matching_ngram_size"] = int(ngram)
    if head is not None:
        route["draft_head"] = head
    return route


def label_band(label):
    """(workload, band concurrency, K or None) of a `band_label`; None for a label that names no
    tuned band (speculation off, a sweep, no label): perf reads from it which band served a request."""
    m = re.match(r"([^@:]*)@(\d+):(?:K=(\d+))?", label or "")
    if not m:
        return None
    return m.group(1), int(m.group(2)), None if m.group(3) is None else int(m.group(3))


def sweep_int(value, name):
    """A sweep request parameter as an int. Parameters arrive as strings (a client may send "abc" or
    a double's "3.0"): a bad one is the client's one-line error naming it, not a ValueError from int()."""
    try:
        return int(value)
    except ValueError:
        raise RequestError(f"{name}: expected an integer, got {value!r}") from None


def route_inputs(routing):
    """What the bands of a chain repository's routes send spec_decode beside K (routing._entry's
    optional keys: an n-gram band's matching size, a workload's own EAGLE-3 head; the BLS calls'
    record, contracts.calls); () for EAGLE engines' routes."""
    if routing["mode"] not in CHAIN_MODES:
        return ()
    bands = [e for w in routing["workloads"].values() for e in w] + routing["default"]["bands"]
    return tuple(sorted({k for e in bands for k in ("max_matching_ngram_size", "draft_head") if k in e}))


def swept_route(routing, route, k=None, ngram=None, model=None):
    """The route of a request that carries sweep parameters (strings or None, as request
    parameters arrive); the route unchanged without them. K is range-checked by spec_decode
    (draft_len), the model against the served ones."""
    chain = routing["mode"] in CHAIN_MODES
    if k is not None or ngram is not None:
        if not chain:
            raise RequestError(f"{SWEEP_K}: this {routing['mode']} repository serves its settings as models; "
                               f"choose one with {SWEEP_MODEL}")
        if ngram is not None and routing["mode"] != "ngram" and "max_matching_ngram_size" not in route_inputs(routing):
            raise RequestError(f"{SWEEP_NGRAM}: this {routing['mode']} repository drafts no n-grams")
        k = sweep_int(k, SWEEP_K) if k is not None else route["num_draft_tokens"]
        n = sweep_int(ngram, SWEEP_NGRAM) if ngram is not None else route.get("max_matching_ngram_size")
        head = route.get("draft_head")  # a workload's own EAGLE-3 head drafts its sweep too
        return chain_route(k, n, head, route["label"].split("@")[0] + ":sweep:" + chain_setting(k, n, head))
    if model is not None:
        models = served_models(routing)
        if model not in models:
            raise RequestError(f"{SWEEP_MODEL}: {model!r} is not served here ({', '.join(sorted(models)) or 'none'})")
        return {"model": model, "num_draft_tokens": models[model], "label": f"sweep:{model}"}
    return route


UNSETTLED = re.compile(r"(?: (?:'[vr]?|n'?)?|['\ufffd])+$")  # see new_suffix


def new_suffix(text, sent, final=True):
    """(what a stream sends next, the text the client has then) given the decoded text so far and
    what the client was sent. Before the final piece, the tail later tokens may still change waits
    (UNSETTLED): an incomplete UTF-8 character (U+FFFD), and what transformers' clean_up_tokenization (on
    in SmolLM2's tokenizer) may rewrite: " '" + "s" -> "'s", " n" + "'t" -> "n't", "x'" + "." -> "x '.".
    Append-only still: text re-segmented anyway stays as the client has it; it gets what lies beyond."""
    text = text if final else UNSETTLED.sub("", text)
    piece = text[len(sent):] if text.startswith(sent) or len(text) > len(sent) else ""
    return piece, sent + piece


def stop_ids(end_id, default):
    """The token ids that end a request: its end_id; none when it is -1 (TensorRT-LLM's "no end
    id": the request runs to its length; upstream.sampling.END_ID_NONE); the model's eos ids
    `default` when it is absent."""
    if end_id is None:
        return default
    if int(end_id) < -1:
        raise RequestError(f"end_id: {int(end_id)}; expected a token id, or -1 for none")
    return () if int(end_id) == -1 else (int(end_id),)


def check_beam_width(value):
    if int(value or 1) != 1:
        raise RequestError("beam_width: the cpu flavor decodes with beam width 1 only")


# name: the value that means "not set" (upstream.sampling.PENALTY_OFF); None: any value is refused
# (end_id: the llmapi model always stops at the model's own end token, so neither another id nor
# TensorRT-LLM's -1, which would run to the length, can be honoured)
LLMAPI_REFUSED = {"end_id": None, "repetition_penalty": 1.0}


def check_llmapi_inputs(get) -> None:
    """generate's inputs the llmapi flavor's model has no input for (it stops at the model's own end
    token and applies presence / frequency penalties only): refused when set, not dropped."""
    for name, unset in LLMAPI_REFUSED.items():
        value = get(name)
        if value is not None and value != unset:
            raise RequestError(f"{name}: the llmapi flavor's model takes no {name} (TensorRT-LLM's llmapi model); "
                               "leave it unset")


def check_min_tokens(value) -> int:
    """The request's min_tokens (absent: 0): it cannot end on an end id before that many generated
    tokens, the end ids' logits being masked until then (TensorRT-LLM's penalty kernel; the rule and
    its source: trtspec.upstream.sampling, "min_tokens"). A length of request_output_len or more
    masks them throughout: the request runs to its length (genai-perf's ignore_eos). Negative is
    refused, as TensorRT-LLM's executor refuses it."""
    m = int(value or 0)
    if m < 0:
        raise RequestError(f"min_tokens: {m}; expected 0 or more (the tokens generated before an end id can end "
                           "the request)")
    return m


# ---- sampling at temperature > 0: the accept rule of each route --------------------------------
# Stated once, here: the models (standard library only) and trtspec (readme, perf) both need it.
# Names are upstream.sampling's AcceptRule names (test_serving_rules checks); each route runs the
# rule of the TensorRT-LLM path it stands for (upstream.sampling.PATH_RULES):
# - spec_decode, cpu flavor (trtspec.runtime in-process): exact_match by default, which is what the
#   PyTorch / LLM-API backend's two-model path runs (lossless: with keyed draws the output equals
#   plain sampling from the target for the same seed); rejection_sampling when the repository is
#   written for draft logits (`accept_rule` parameter). The engine flow it mirrors would run
#   exact_match_resample (lossy) unless draft logits are on.
# - spec_decode, trtllm flavor (BLS to the engines): TensorRT-LLM's executor decides:
#   exact_match_resample without draft logits, rejection_sampling with them (the draft engine built
#   with --gather_generation_logits: the repository then sends draft_logits).
# - tensorrt_llm (cpu flavor) called with draft_input_ids: the engine without draft logits,
#   exact_match_resample.
# - EAGLE (both flavors): greedy. TensorRT-LLM's Triton backend builds EagleConfig(eagle_choices)
#   only, so the engine decodes greedily whatever the request's temperature; `generate` answers a
#   sampled request with the greedy tokens and says so in its `sampling_fallback` output
#   ("greedy"; "" when nothing was changed). Never silently.
# - llmapi: exact_match (two-model) or greedy (one-model EAGLE-3, allow_advanced_sampling off).
GREEDY_RULE = "greedy"
EXACT_MATCH_RULE = "exact_match"
RESAMPLE_RULE = "exact_match_resample"
REJECTION_RULE = "rejection_sampling"
SPEC_DECODE_RULES = (EXACT_MATCH_RULE, RESAMPLE_RULE, REJECTION_RULE)  # a cpu spec_decode may run
SAMPLING_FALLBACK_GREEDY = "greedy"  # generate's `sampling_fallback` when a sampled request was decoded greedily


def engine_top_k_top_p(top_k, top_p):
    """(top_k, top_p) as TensorRT-LLM's sampling layers run them (regularizeTopKTopP, cpp/tensorrt_llm/
    kernels/samplingTopKKernels.h): top_p 0 means greedy (top_k 1) without a top_k, no top-p with one."""
    if top_p is None or float(top_p) != 0.0:
        return top_k, top_p
    return (top_k if top_k else 1), 1.0


def is_sampled(temperature, top_k, top_p=None):
    """Does the request ask for sampling? temperature > 0 unless top_k is 1 after engine_top_k_top_p
    (trtspec.options.Sampling.greedy says the same; absent values are the greedy defaults)."""
    top_k = engine_top_k_top_p(top_k, top_p)[0]
    return temperature is not None and float(temperature) > 0 and (top_k is None or int(top_k) != 1)


def bls_rule(draft_logits):
    """The rule TensorRT-LLM's executor runs for spec_decode's BLS rounds at temperature > 0."""
    return REJECTION_RULE if draft_logits else RESAMPLE_RULE


def spec_decode_rule(value):
    """A cpu spec_decode's `accept_rule` parameter (default exact_match), checked at model load."""
    rule = (value or "").strip() or EXACT_MATCH_RULE
    if rule not in SPEC_DECODE_RULES:
        raise ValueError(f"accept_rule: {rule!r} is not one of {', '.join(SPEC_DECODE_RULES)}")
    return rule


def sampling_fallback(eagle, temperature, top_k, top_p=None):
    """generate's `sampling_fallback` output: "greedy" for a sampled request on an EAGLE route
    (decoded greedily, see above), else ""."""
    return SAMPLING_FALLBACK_GREEDY if eagle and is_sampled(temperature, top_k, top_p) else ""


# ---- acceptance ----------------------------------------------------------------------------------
def acceptance_length(accepted, steps):
    """Tokens per target verification step, the bonus token included: 1 + accepted / steps (1.0
    before the first step). The runtime, the tuner and the served counters all mean this."""
    return 1.0 + accepted / steps if steps else 1.0


def acceptance_rate(accepted, drafted):
    """Accepted / drafted draft tokens, as TRT-LLM's `acceptance_rate` perf metric (0.0 if none)."""
    return accepted / drafted if drafted else 0.0


def trtllm_steps(drafted, depth):
    """Verification steps behind TRT-LLM's total_draft_tokens for an EAGLE tree of `depth`: the
    executor adds min(draft tokens, max path length = depth) per iteration, which is depth."""
    return drafted / depth if drafted else 0


class Acceptance:
    """Running acceptance counters of one request: verification steps, draft tokens offered and
    accepted (TRT-LLM's total_draft_tokens / total_accepted_draft_tokens)."""

    def __init__(self):
        self.steps, self.accepted, self.drafted = 0, 0, 0

    @property
    def length(self):
        return acceptance_length(self.accepted, self.steps)

    @property
    def rate(self):
        return acceptance_rate(self.accepted, self.drafted)

