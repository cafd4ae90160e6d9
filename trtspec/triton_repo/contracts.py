"""The models of a generated repository, their tensors, and who calls whom with what.

One table for the generator (configs are rendered from it), the validator (wiring checks read the
`calls` recorded in `trtspec-repo.json` and compare them with the configs actually on disk) and
the python-backend sources under `models/` (which use the same literal names; the end-to-end
tests are what proves the two agree).

Graph (draft-target):
    generate --> preprocessing                        (tokenize; non-decoupled)
             --> spec_decode [decoupled, streaming]   (K = the workload's tuned num_draft_tokens)
                   --> tensorrt_llm_draft             (trtllm flavor: BLS, K tokens per round)
                   --> tensorrt_llm                   (trtllm flavor: BLS, draft_input_ids -> verify)
             --> postprocessing                       (detokenize the tokens so far, per piece)
Graph (n-gram): as draft-target without tensorrt_llm_draft: spec_decode drafts from a per-request
    n-gram pool (runtime/ngram_pool.py, shipped next to it) and sends the drafts to tensorrt_llm.
Graph (EAGLE): generate --> preprocessing --> tensorrt_llm_<profile> (routed by workload) --> postprocessing

Why our own `spec_decode` and `generate` instead of upstream's `tensorrt_llm_bls`: upstream's BLS
refuses streaming with draft tokens, takes K per request from the client, and reports acceptance for
the last round only (reference triton.md §3.2, §3.2.4). Ours streams, takes K from the tuning by
workload, and sums acceptance over all rounds.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from ..upstream.triton import GENAI_PERF_MIN_TOKENS_INPUT, TENSORRT_LLM_INPUTS, TENSORRT_LLM_OUTPUTS, Tensor
from .models.serving_rules import CHAIN_MODES

PREPROCESSING = "preprocessing"
POSTPROCESSING = "postprocessing"
TENSORRT_LLM = "tensorrt_llm"
TENSORRT_LLM_DRAFT = "tensorrt_llm_draft"
SPEC_DECODE = "spec_decode"
GENERATE = "generate"

# Model names we write: lowercase letters, digits and underscores (valid directory names everywhere,
# no shell or URL quoting needed, no clash with Triton's hidden-file rules).
MODEL_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,99}$")


def sanitize(name: str) -> str:
    """A safe model-name fragment from a free-form name (an EAGLE profile like 'c1-p0')."""
    s = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return s or "profile"


def _upstream(names: tuple[str, ...], table: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    by = {t.name: t for t in table}
    return tuple(by[n] for n in names)


def _opt(name: str, dtype: str, dims=(1,)) -> Tensor:
    return Tensor(name, dtype, tuple(dims), None, True)


PRE_INPUTS = (Tensor("QUERY", "TYPE_STRING", (1,)), Tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", (1,)),
              _opt("BAD_WORDS_DICT", "TYPE_STRING", (-1,)), _opt("STOP_WORDS_DICT", "TYPE_STRING", (-1,)),
              _opt("END_ID", "TYPE_INT32"), _opt("PAD_ID", "TYPE_INT32"))
PRE_OUTPUTS = (Tensor("INPUT_ID", "TYPE_INT32", (-1,)), Tensor("REQUEST_INPUT_LEN", "TYPE_INT32", (1,)),
               Tensor("BAD_WORDS_IDS", "TYPE_INT32", (2, -1)), Tensor("STOP_WORDS_IDS", "TYPE_INT32", (2, -1)),
               Tensor("REQUEST_OUTPUT_LEN", "TYPE_INT32", (1,)), Tensor("OUT_END_ID", "TYPE_INT32", (1,)),
               Tensor("OUT_PAD_ID", "TYPE_INT32", (1,)))
POST_INPUTS = (Tensor("TOKENS_BATCH", "TYPE_INT32", (-1, -1)), Tensor("SEQUENCE_LENGTH", "TYPE_INT32", (-1,)))
POST_OUTPUTS = (Tensor("OUTPUT", "TYPE_STRING", (-1,)),)

# The front model: upstream BLS/ensemble user-facing names (text_input, max_tokens, stream, top_k,
# top_p, ...), so genai-perf's tensorrtllm payloads work unchanged, plus `workload`.
SAMPLING = ("temperature", "top_k", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed")
# front-model name -> tensorrt_llm input name (the BLS mapping, reference §4.3)
SAMPLING_TO_TRTLLM = {"temperature": "temperature", "top_k": "runtime_top_k", "top_p": "runtime_top_p",
                      "repetition_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
                      "frequency_penalty": "frequency_penalty", "seed": "seed"}
GENERATE_INPUTS = (
    Tensor("text_input", "TYPE_STRING", (1,)), Tensor("max_tokens", "TYPE_INT32", (1,)),
    _opt("stream", "TYPE_BOOL"), _opt("workload", "TYPE_STRING"),
    # false: no drafting for this request (draft-target sends K=0, the plain target), so `trtspec perf
    # --baseline` measures speculation off through the same repository; EAGLE engines always draft.
    _opt("speculation", "TYPE_BOOL"),
    # genai-perf 0.0.16's tensorrtllm payload always carries exclude_input_in_output=true, and
    # perf_analyzer refuses an input the model does not declare; generate never echoes the prompt.
    _opt("exclude_input_in_output", "TYPE_BOOL"),
    _opt("temperature", "TYPE_FP32"), _opt("top_k", "TYPE_INT32"), _opt("top_p", "TYPE_FP32"),
    _opt("repetition_penalty", "TYPE_FP32"), _opt("presence_penalty", "TYPE_FP32"),
    _opt("frequency_penalty", "TYPE_FP32"), _opt("seed", "TYPE_UINT64"),
    _opt("end_id", "TYPE_INT32"), _opt("pad_id", "TYPE_INT32"),
    # upstream's ensemble / tensorrt_llm_bls names (1.x: min_tokens, not v0.19's min_length): the words
    # are tokenized by preprocessing into stop_words_list / bad_words_list (upstream's [2, N] format).
    _opt("min_tokens", "TYPE_INT32"), _opt("bad_words", "TYPE_STRING", (-1,)),
    _opt("stop_words", "TYPE_STRING", (-1,)),
    # min_tokens under its 0.x name, which genai-perf's `--output-tokens-mean-deterministic` sends
    # (upstream.triton); generate refuses a request giving both with different values (word_rules)
    _opt(GENAI_PERF_MIN_TOKENS_INPUT, "TYPE_INT32"),
    # declared so that a request asking for log probs is refused by name (models/word_rules.py),
    # not with Triton's generic unexpected-input error; false is accepted
    _opt("return_log_probs", "TYPE_BOOL"),
)
GENERATE_OUTPUTS = (
    Tensor("text_output", "TYPE_STRING", (-1,)), Tensor("acceptance_length", "TYPE_FP32", (1,)),
    Tensor("num_draft_tokens", "TYPE_INT32", (1,)), Tensor("total_accepted_draft_tokens", "TYPE_INT32", (1,)),
    Tensor("total_draft_tokens", "TYPE_INT32", (1,)), Tensor("num_output_tokens", "TYPE_INT32", (1,)),
    Tensor("route", "TYPE_STRING", (1,)),
    # "greedy" when a sampled request was decoded greedily (EAGLE routes; serving_rules), else ""
    Tensor("sampling_fallback", "TYPE_STRING", (1,)),
)

# The orchestration model takes tensorrt_llm's own request tensors (same names, dtypes, dims), plus K.
_PASS = ("input_ids", "input_lengths", "request_output_len", "end_id", "pad_id", "stop_words_list", "bad_words_list",
         "streaming", "temperature", "runtime_top_k", "runtime_top_p", "repetition_penalty", "min_tokens",
         "presence_penalty", "frequency_penalty", "seed")
SPEC_INPUTS = _upstream(_PASS, TENSORRT_LLM_INPUTS) + (Tensor("num_draft_tokens", "TYPE_INT32", (1,), ()),)
# n-gram: the band's max_matching_ngram_size travels with K (optional: absent = upstream's default)
NGRAM_SPEC_INPUTS = SPEC_INPUTS + (_opt("max_matching_ngram_size", "TYPE_INT32"),)
# several EAGLE-3 heads: the drafter name of the head a route drafts with (absent: the general head)
HEAD_SPEC_INPUT = _opt("draft_head", "TYPE_STRING")
SPEC_OUTPUTS = _upstream(("output_ids", "sequence_length"), TENSORRT_LLM_OUTPUTS) + (
    Tensor("acceptance_length", "TYPE_FP32", (1,)), Tensor("total_accepted_draft_tokens", "TYPE_INT32", (1,)),
    Tensor("total_draft_tokens", "TYPE_INT32", (1,)), Tensor("num_draft_tokens", "TYPE_INT32", (1,)),
    Tensor("verify_steps", "TYPE_INT32", (1,)),
)

# cpu flavor: the subset of tensorrt_llm's tensors the other models (and a direct client) use.
CPU_LLM_INPUTS = _upstream(_PASS + ("draft_input_ids", "exclude_input_in_output",
                                    "return_perf_metrics", "return_num_input_tokens", "return_num_output_tokens",
                                    "beam_width", "stop"), TENSORRT_LLM_INPUTS)
CPU_LLM_OUTPUTS = _upstream(("output_ids", "sequence_length", "acceptance_rate", "total_accepted_draft_tokens",
                             "total_draft_tokens", "num_input_tokens", "num_output_tokens"), TENSORRT_LLM_OUTPUTS)


@dataclass
class Call:
    """One BLS call made by `caller`. `sends` maps each callee input to where its value comes from:
    '<model>.input.<name>' / '<model>.output.<name>' (a tensor of another config, passed on as is) or
    'const:<DataType>:<dims>' (built by the caller, e.g. 'const:TYPE_INT32:1')."""
    caller: str
    callee: str
    decoupled: bool  # exec(decoupled=...) used by the caller; must match the callee's policy
    sends: dict[str, str] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _sampling_sends() -> dict[str, str]:
    return {SAMPLING_TO_TRTLLM[s]: f"{GENERATE}.input.{s}" for s in SAMPLING}


def calls(mode: str, llm_models: list[str], bls_spec_decode: bool, draft_logits: bool = False,
          route_inputs: tuple[str, ...] = ()) -> list[Call]:
    """Every BLS call of a repository: mode draft-target | ngram | eagle3 (the chain modes, served
    by spec_decode) | eagle; llm_models = the tensorrt_llm* models generate routes to (EAGLE
    profiles); bls_spec_decode: spec_decode calls the engines through BLS (trtllm flavor) instead of
    running them in-process (cpu flavor); draft_logits: at temperature > 0 the draft samples with
    the request's settings and returns its generation logits, and the target gets draft_logits
    (models/spec_decode.py); route_inputs: what the routes' bands send spec_decode beside K
    (max_matching_ngram_size: an n-gram band in a draft-target repository; draft_head: a band of
    another EAGLE-3 head), always max_matching_ngram_size in an n-gram repository."""
    pre = Call(GENERATE, PREPROCESSING, False,
               {"QUERY": f"{GENERATE}.input.text_input", "REQUEST_OUTPUT_LEN": f"{GENERATE}.input.max_tokens",
                "END_ID": f"{GENERATE}.input.end_id", "PAD_ID": f"{GENERATE}.input.pad_id",
                "BAD_WORDS_DICT": f"{GENERATE}.input.bad_words", "STOP_WORDS_DICT": f"{GENERATE}.input.stop_words"},
               ["INPUT_ID", "REQUEST_INPUT_LEN", "OUT_END_ID", "OUT_PAD_ID", "BAD_WORDS_IDS", "STOP_WORDS_IDS"])
    request = {"input_ids": f"{PREPROCESSING}.output.INPUT_ID",
               "input_lengths": f"{PREPROCESSING}.output.REQUEST_INPUT_LEN",
               "request_output_len": f"{GENERATE}.input.max_tokens",
               "end_id": f"{PREPROCESSING}.output.OUT_END_ID", "pad_id": f"{PREPROCESSING}.output.OUT_PAD_ID",
               "stop_words_list": f"{PREPROCESSING}.output.STOP_WORDS_IDS",
               "bad_words_list": f"{PREPROCESSING}.output.BAD_WORDS_IDS", "min_tokens": f"{GENERATE}.input.min_tokens",
               "streaming": "const:TYPE_BOOL:1", **_sampling_sends()}
    out: list[Call] = [pre]
    if mode in CHAIN_MODES:
        settings = {"num_draft_tokens": "const:TYPE_INT32:1"}
        if mode == "ngram" or "max_matching_ngram_size" in route_inputs:
            settings["max_matching_ngram_size"] = "const:TYPE_INT32:1"
        if "draft_head" in route_inputs:
            settings["draft_head"] = "const:TYPE_STRING:1"
        out.append(Call(GENERATE, SPEC_DECODE, True, {**request, **settings}, [t.name for t in SPEC_OUTPUTS]))
        producers = [SPEC_DECODE]
        if bls_spec_decode:
            engine_request = {"input_ids": f"{SPEC_DECODE}.input.input_ids",
                              "input_lengths": f"{SPEC_DECODE}.input.input_lengths",
                              "request_output_len": "const:TYPE_INT32:1",
                              "end_id": f"{SPEC_DECODE}.input.end_id", "pad_id": f"{SPEC_DECODE}.input.pad_id",
                              "streaming": "const:TYPE_BOOL:1", "exclude_input_in_output": "const:TYPE_BOOL:1"}
            sampling = {n: f"{SPEC_DECODE}.input.{n}" for n in SAMPLING_TO_TRTLLM.values()}
            draft_sends, draft_reads = dict(engine_request), ["output_ids", "sequence_length"]
            # the request's stopping rules go to the target (min_tokens less what earlier rounds emitted)
            rules = {"stop_words_list": f"{SPEC_DECODE}.input.stop_words_list",
                     "bad_words_list": f"{SPEC_DECODE}.input.bad_words_list", "min_tokens": "const:TYPE_INT32:1"}
            target_sends = {**engine_request, **sampling, **rules, "draft_input_ids": "const:TYPE_INT32:-1"}
            if draft_logits:
                draft_sends.update(sampling, return_generation_logits="const:TYPE_BOOL:1")
                draft_reads.append("generation_logits")
                target_sends["draft_logits"] = "const:TYPE_FP32:-1,-1"
            if mode == "draft-target":
                out.append(Call(SPEC_DECODE, TENSORRT_LLM_DRAFT, True, draft_sends, draft_reads))
            out.append(Call(SPEC_DECODE, TENSORRT_LLM, True, target_sends, ["output_ids", "sequence_length"]))
    else:
        producers = list(llm_models)
        for m in llm_models:
            out.append(Call(GENERATE, m, True, {**request, "exclude_input_in_output": "const:TYPE_BOOL:1",
                                                "return_perf_metrics": "const:TYPE_BOOL:1"},
                            ["output_ids", "sequence_length", "total_accepted_draft_tokens", "total_draft_tokens"]))
    for p in producers:
        out.append(Call(GENERATE, POSTPROCESSING, False,
                        {"TOKENS_BATCH": f"{p}.output.output_ids", "SEQUENCE_LENGTH": f"{p}.output.sequence_length"},
                        ["OUTPUT"]))
    return out
