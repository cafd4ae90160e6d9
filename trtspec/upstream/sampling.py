"""TensorRT-LLM 1.2.x at temperature > 0: which rule accepts a draft token on each deployment path.

A profile must predict the rule the deployment really runs, so each rule and each path is stated
here once, with the source it was read from (`NVIDIA/TensorRT-LLM:<path>`, function, `@commit` as
the source index stores it). The index does not tie those commits to release tags: the versions read
are 1.x-era ones, but that each equals the 1.2.1 release is unverified. Since 1.x the Triton
backend lives in TensorRT-LLM's `triton_backend/` (tensorrtllm_backend branch r26.03 @9736c4d only
pins `TENSORRTLLM_REPO_TAG=release/1.2`). Nothing here was run on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AcceptRule:
    """How a drafted token d is checked against the target distribution p at one position.

    `lossless`: the emitted tokens follow the target's own (tempered, top-k/top-p masked) sampling
    distribution. `p_accept`: P(accept d) for a greedy (one-hot) draft, what a one-pass profiler needs.
    """

    name: str
    lossless: bool
    p_accept: str
    source: str


GREEDY = AcceptRule(
    "greedy", False, "1[d == argmax(target logits)]; temperature, top-k, top-p ignored",
    "cpp/tensorrt_llm/plugins/eaglePlugin/eagleSampleAndAcceptDraftTokensPlugin.cpp enqueueType "
    "(GREEDY_SAMPLING input -> samplePrimeHeadTokens, top-1; else doTypicalAcceptance)")
# The target samples s ~ p at each draft position; accept iff d == s; at the first mismatch s itself
# is emitted (lossless). PyTorch TorchSampler._process_draft_tokens_greedy (sampler.py @00026bd1).
EXACT_MATCH = AcceptRule("exact_match", True, "p(d)", "tensorrt_llm/_torch/pyexecutor/sampler.py @00026bd1")
# Engine flow without draft logits: accept iff d == s (s: the top-k/top-p kernel's multinomial draw,
# `outputIdCurrentStep`), but on rejection the emitted token is a FRESH draw from p (multinomialSampling
# runs the top-p kernel at top_p=1 on the masked target probs with the advanced curand state), not s.
# So P(emit d at the first rejected position) = p(d)(2 - p(d)): not lossless. The issue text says
# "the target's sample is emitted"; the source says otherwise. Layer @1d263f15, kernels @2931b93f.
# s follows the kernels' draw (ENGINE_TOP_P_TRUNCATES below); the fresh draw follows the masked,
# renormalised p. After all K drafts are kept the bonus token is a fresh draw too:
# acceptDraftTokensKernel (@2931b93f) sets batchIsAccepted false at step == numDraftTokens, so
# multinomialSampling runs on the masked target probs; only a step with no draft tokens
# (numDraftTokens 0: returnAllSelectedTokens off) emits the kernels' draw itself.
EXACT_MATCH_RESAMPLE = AcceptRule(
    "exact_match_resample", False, "p(d), the kernels' top-p boundary draw (ENGINE_TOP_P_TRUNCATES)",
    "cpp/tensorrt_llm/layers/externalDraftTokensLayer.cpp forwardAsync @1d263f15")
# --- How the engine's (C++ runtime's) sampling kernels draw a token at top_p < 1 -------------------
# samplingTopPKernels.cu topPSsampling ("With P in (0.0; 1.0] we draw a random number P' in range
# (0.0; P]"; also the randNumS2 draw that gives the layer's outputIdCurrentStep = s) and
# samplingTopKKernels.cu topKStage2Sampling (randNum = curand_uniform * topP * sum of the top-k):
# walk the tokens by descending probability and return the first whose inclusive cumulative
# probability reaches P'. The kept set is transformers' (the tokens ranked above reach less than
# top_p), but the boundary token only gets top_p minus the mass ranked above it and nothing is
# renormalised: P(x) = (min(c(x), top_p) - min(c(x) - p(x), top_p)) / top_p, c the cumulative
# probability. E.g. p = (.5, .3, .2), top_p .6: (.833, .167, 0), not (.625, .375, 0). Read at
# samplingTopKKernels.cu @3c44cb97 and the 1.x topPSsampling with returnAllSelectedTokens (commit not
# named by the index). maskTargetLogitsKernel and the multinomial resample (top_p 1) use the kept set
# renormalised instead; the PyTorch backend renormalises (sampling_utils.top_k_top_p_sampling_batch).
# With top_k set too (the layer runs only the top-k kernel then, topPs = the request's top_p,
# logitsHasProbs): a 1.x topKStage2Sampling with returnAllSelectedTokens / strictTopPBoundary
# (default true, the layer @1d263f15 leaves it) / outputIdCurrentStep (commit not named by the
# index) walks the top-k by descending probability, draws s with randNum2 = u * top_p * (sum of the
# top-k), and ends the selected set at the first token whose cumulative mass reaches top_p * sum:
# the same law, over the top-k renormalised (kernel_probs), and the same kept set (probs). (An
# intermediate externalDraftTokensKernels.cu, @04a2cacb, took s from a random prefix instead.)
ENGINE_TOP_P_TRUNCATES = True
# Accept iff p(d) > u * q(d), u ~ U(0,1) per position (curand, request seed); on rejection sample
# from norm(max(0, p - q)); after K accepted the bonus token is sampled from p. p and q are defined
# per path below. Engine: acceptDraftTokensKernel @2931b93f; PyTorch: get_rejected_indices,
# sample_rejected (accept prob min(1, p/q)) @00026bd1.
REJECTION = AcceptRule(
    "rejection_sampling", True, "min(1, p(d)/q(d)); = p(d) for a one-hot q; 1 - TV(p, q) for d ~ q",
    "cpp/tensorrt_llm/kernels/speculativeDecoding/externalDraftTokensKernels.cu acceptDraftTokensKernel @2931b93f")
# Typical acceptance (Medusa): see TYPICAL_* below. Lossy by construction (masks low-p tokens).
TYPICAL = AcceptRule(
    "typical_acceptance", False, "p'(d), p' = p masked below min(eps, alpha*exp(-H(p))), renormalised",
    "cpp/tensorrt_llm/kernels/speculativeDecoding/common.cu typicalAcceptanceSampling @2a9abd95")
ACCEPT_RULES = (GREEDY, EXACT_MATCH, EXACT_MATCH_RESAMPLE, REJECTION, TYPICAL)

# --- Typical acceptance, EAGLE-1/2 engines (common.cu @2a9abd95 maskLogitsBasedOnEntropyKernel) --
# Per tree node: p = softmax(target logits / T) (no top-k/top-p: the plugin gets only temperature,
# threshold and alpha); H = -sum p ln(p + EPSILON) (natural log; decodingCommon.cu addBiasSoftMax
# outputEntropy); tokens with p < min(eps, alpha * exp(-H)) get logit -FLT_MAX; renormalise;
# one multinomial sample per node; the longest tree path where each draft token equals the node's
# sample is accepted and the samples along it are emitted (acceptDraftTokensByIdsWithPaths).
TYPICAL_DEFAULT_POSTERIOR_THRESHOLD = 0.09  # eps; runtime/eagleBuffers.h mDefaultPosteriorThreshold @2a9abd95
TYPICAL_ALPHA_EXPONENT = 0.5  # alpha = eps ** 0.5 per request (eagleBuffers.cpp setPosteriorThresholds, sqrt)
# EagleConfig::checkPosteriorValue: 0 <= eps < 1 (executor/decodingConfig.cpp @97e36d0b).
TYPICAL_POSTERIOR_THRESHOLD_RANGE = (0.0, 1.0)
TYPICAL_ARGMAX_BELOW_TEMPERATURE = 1e-6  # T < 1e-6: the node sample is the argmax (top_p 0)
# The EPSILON of that entropy: addBiasSoftMax's `EPSILON`, 1e-6 for float logits (1e-3 for half);
# read in a 1.x decodingCommon.cu with outputEntropy (commit not named by the index). It weighs a
# large vocabulary's tail: H is lower than the exact entropy, so the threshold is higher.
TYPICAL_ENTROPY_EPSILON = 1e-6

# --- EAGLE-1/2 engine configuration -----------------------------------------------------------
# executor.h EagleConfig(eagle_choices=None, greedy_sampling=True, posterior_threshold=None,
# use_dynamic_tree=False, dynamic_tree_max_top_k=None); greedy_sampling is per executor
# (eagleBuffers.cpp: decodingConfig.getEagleConfig()), the threshold may be per request.
EAGLE_GREEDY_SAMPLING_DEFAULT = True
# LLM API TensorRT backend EagleDecodingConfig fields (docs llm-api/reference, 1.x) and run.py,
# whose ModelRunnerCpp sets greedy_sampling = (eagle_posterior_threshold is None).
EAGLE_TYPICAL_FIELDS = ("greedy_sampling", "posterior_threshold")
# Triton: model_instance_state.cc getExecutorConfigFromParams (@0c8de69a) and the python
# tensorrt_llm/1/model.py get_decoding_config build EagleConfig(eagle_choices) only, and no request
# tensor carries an EAGLE config: through Triton an EAGLE engine always runs GREEDY, whatever the
# request's temperature (the target's argmax tokens are returned).
EAGLE_TRITON_PARAMETERS = ("eagle_choices",)

# --- Draft-target engines with draft logits (use_draft_logits) ---------------------------------
# p = softmax(masked(T-scaled target logits)): PenaltyLayer applies temperature (and penalties) to
# the runtime logits, maskTargetLogitsKernel sets tokens outside the top-k/top-p set to -inf.
# q = softmax(draft_logits) exactly as supplied: NO temperature, top-k or top-p (acceptDraftTokens,
# biasSoftmaxParams without temperatures). So the orchestrator must send the distribution the draft
# really sampled from (logits / T, masked tokens very negative). The stock BLS sends the draft
# engine's raw generation_logits (pre-temperature, inferred) after sampling the draft with the
# request's params (triton_decoder.py @07f3e442), so it is lossy at T != 1 or with top-k/top-p.
DRAFT_LOGITS_INPUT = "draft_logits"  # [num_draft_tokens, vocab] per request, dtype ${logits_datatype}
DRAFT_TOKENS_INPUT = "draft_input_ids"
# Constant threshold c instead of u (accept iff p > c q); executor checks 0 < c <= 1
# (ExternalDraftTokensConfig ctor, decodingConfig.cpp @97e36d0b); comments say "only used for testing".
DRAFT_ACCEPTANCE_THRESHOLD_INPUT = "draft_acceptance_threshold"
DRAFT_ACCEPTANCE_THRESHOLD_RANGE = (0.0, 1.0)  # (0, 1]
# The draft engine must return generation logits: built with this flag, requested per call with
# return_generation_logits (examples/draft_target_model/README, run_dtm_ngram.py asserts it on both).
# 1.x trtllm-build warns the flag is deprecated ("Use --output_generation_logits at runtime"), but the
# C++ executor refuses return_generation_logits when it enqueues a request ("gather_generation_logits
# must be enabled in ExecutorConfig"; file path not pinned) unless the engine flag OR ExecutorConfig's
# gatherGenerationLogits is set (batch_manager trtGptModelInflightBatcher.h getGatherGenerationLogits),
# and the Triton template has no key for the latter (upstream.triton): the engine flag is what works.
DRAFT_LOGITS_BUILD_FLAG = "--gather_generation_logits"
DRAFT_LOGITS_REQUEST_FLAG = "return_generation_logits"
BLS_DRAFT_LOGITS_SWITCH = "use_draft_logits"  # tensorrt_llm_bls input (decode.py _spec_generate @4db68284)

# --- PyTorch / LLM-API backend ----------------------------------------------------------------
# Two-model paths draft greedily: DecodingBaseConfig._allow_greedy_draft_tokens = True (llm_args.py,
# 1.x) and the sampler uses a one-hot draft distribution when py_draft_use_greedy_sampling.
# TorchSampler.process_draft_tokens: rejection sampling iff the request is non-greedy AND draft
# logits are attached; otherwise exact match (NGram never attaches logits). With a one-hot draft
# both give P(accept d) = p(d) and the same emitted distribution. Whether 1.2.1's DraftTarget
# drafter attaches logits: unverified (it does not change the profile).
# One-model EAGLE-3: argmax regardless of temperature unless this prototype flag (default False,
# TensorRT-LLM PR 9885, merged 2025-12-12) is set: then the target samples, the draft stays argmax,
# exact match. Present in 1.2.1: UNVERIFIED (the 1.2.0rc5 backend release, 2025-12-10, predates the
# merge; whether release/1.2 picked it up is unknown). Later main: `use_rejection_sampling` (PR 12588) and
# per-request auto-detection making this flag a no-op (PR 14745, 2026-06).
LLMAPI_ADVANCED_SAMPLING_FIELD = "allow_advanced_sampling"
LLMAPI_ADVANCED_SAMPLING_DEFAULT = False


@dataclass(frozen=True)
class PathRule:
    """The rule a deployment path runs at T > 0, and when. `draft`: how the draft token is chosen."""

    path: str
    flavor: str | None  # the trtspec Triton flavor serving it; None: no flavor reaches it
    mode: str  # profile mode: "draft-target" | "eagle"
    rule: str  # an AcceptRule name
    condition: str
    draft: str  # "greedy" | "sampled with the request's params" | "tree top-k"


PATH_RULES = (
    PathRule("engine-draft-target", "trtllm", "draft-target", EXACT_MATCH_RESAMPLE.name,
             "no draft_logits sent (default; also n-gram drafts)",
             "stock BLS: sampled with the request's params; trtspec's orchestrator chooses"),
    PathRule("engine-draft-target-logits", "trtllm", "draft-target", REJECTION.name,
             "draft_logits sent; draft engine built with --gather_generation_logits", "sampled"),
    PathRule("engine-eagle-triton", "trtllm", "eagle", GREEDY.name,
             "always through Triton (EagleConfig(eagle_choices): greedy_sampling=True)", "tree top-k"),
    PathRule("engine-eagle-typical", None, "eagle", TYPICAL.name,
             "executor/run.py with greedy_sampling=False; not reachable through Triton", "tree top-k"),
    PathRule("llmapi-two-model", "llmapi", "draft-target", EXACT_MATCH.name,
             "DraftTarget / NGram / EAGLE-3 two-model, T > 0 (rejection_sampling if draft logits "
             "attached: same P(accept) with a greedy draft)", "greedy"),
    PathRule("llmapi-eagle3-one-model", "llmapi", "eagle", GREEDY.name,
             "allow_advanced_sampling False (default); True -> exact_match", "greedy"),
)

# --- min_tokens: the end id may not end a request before min_tokens generated tokens ---------------
# Triton `min_tokens` -> executor SamplingConfig minTokens, which must be >= 0 (samplingConfig.cpp
# checkMinTokens, commit not named by the index) -> the decoder's minLength.
# Engine flow: PenaltyLayer::forwardAsync (cpp/tensorrt_llm/layers/penaltyLayer.cpp @05316d33) runs
# batchApplyPenalty (cpp/tensorrt_llm/kernels/penaltyKernels.cu: @249d93d5, and the 1.x version with
# FinishedState and the end id > -1 check, commit not named by the index), which sets the logit of
# the request's ONE end id (endIds[slot]; no other eos id of the model) to the most negative float
# while sequenceLength - inputLength < minLength, i.e. while fewer than min_tokens tokens have been
# generated. So output index i (0-based) is masked iff i < min_tokens: the step producing index
# min_tokens - 1 is masked, the prompt does not count, and nothing is masked when end_id is -1. The
# decoder's sampling layers read the masked logits; EAGLE engines accept inside the engine
# (eagleSampleAndAcceptDraftTokensPlugin), and whether min_tokens reaches that path is UNVERIFIED.
# Steps of several tokens (tokensPerStep): the kernel compares the step's one sequenceLength for all
# of its tokens, so a verify step starting below min_tokens masks all its positions, also those past
# min_tokens. That draft-token verification runs this layer with tokensPerStep > 1 is INFERRED (read,
# not run). PyTorch backend, 1.x TorchSampler._apply_min_length_penalty (_torch/pyexecutor/sampler.py
# @00026bd1): verified position s masks py_end_id iff get_num_tokens(beam) + s < min_length, and
# get_num_tokens counts prompt + generated tokens (LlmRequest.h): there the prompt counts. Later main
# (sampler/token_ban.py; tests/unittest/_torch/sampler/test_token_ban.py @23843b57) subtracts the
# prompt: position s is masked iff generated + s < min_length, per position.
# trtspec's runtime (runtime/decode.py) masks per verified position, output index < min_tokens (the
# engine's rule for one-token steps, later main's for verify steps), so speculation stays lossless
# with respect to the masked target; it masks every id the request stops on, which is the request's
# one end_id whenever the request names one.

# --- Where a request's sampling settings go, per path -------------------------------------------
# tensorrt_llm model inputs (utils.cc -> executor SamplingConfig; the BLS forwards the same values
# to the draft and the target engine: triton_decoder.py _get_llm_tensors_from_request @07f3e442).
TRTLLM_SAMPLING_INPUTS = {"temperature": "temperature", "top_k": "runtime_top_k", "top_p": "runtime_top_p",
                          "seed": "seed"}
# tensorrt_llm_bls inputs (same file's name_map keys).
BLS_SAMPLING_INPUTS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "seed": "seed"}
# A request's seed takes the whole uint64 range: the executor SamplingConfig's randomSeed is
# RandomSeedType = std::uint64_t (cpp/include/tensorrt_llm/executor/types.h @a98a9061), and the
# tensorrt_llm / ensemble `seed` input is TYPE_UINT64 (trtspec.upstream.triton).
SEED_LIMIT = 2 ** 64  # seeds are 0 .. SEED_LIMIT - 1
# Penalties (tensorrt_llm inputs) and the values that turn them off: the executor SamplingConfig's
# defaults (repetitionPenalty 1, presencePenalty 0, frequencyPenalty 0; cpp/include/tensorrt_llm/
# executor/executor.h). The llmapi model takes sampling_param_presence_penalty and
# _frequency_penalty, no repetition penalty and no end_id (its config.pbtxt, v0.19 template).
PENALTY_OFF = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
# end_id -1 stops on no token: a request without an end id decodes with end id -1
# (batch_manager: `mEndId.value_or(-1)`), the stop-criteria kernel finishes a row when a token equals
# its end id, which no token id does, and samplingTopKKernels.cu topKStage1 says so in a comment
# (an end id of -1: generation does not stop on any token). So -1 runs a request to its length.
END_ID_NONE = -1
# llmapi model inputs -> tensorrt_llm.SamplingParams(temperature, top_k, top_p, seed)
# (triton_backend/all_models/llmapi/tensorrt_llm/1/helpers.py get_sampling_params_from_request @0df60f9a).
LLMAPI_SAMPLING_INPUTS = {k: f"sampling_param_{k}" for k in ("temperature", "top_k", "top_p", "seed")}

# --- Stop words and bad words (a request's stop_words_list / bad_words_list) --------------------
# Stop: after each token the PyTorch sampler adds (one at a time, accepted drafts included) the
# request ends when its whole sequence (prompt + output: LlmRequest.get_tokens) ends with one of the
# stop words; the token that completes it stays in the output (TorchSampler._meet_stop_token_criteria
# and _handle_stop_criteria, tensorrt_llm/_torch/pyexecutor/sampler.py, 1.x). Bad words: the last
# token of a word is banned wherever the tokens before it end with the word's others (as
# transformers' bad_words_ids, which trtspec's tests compare with); TensorRT-LLM's kernel for it was
# not read here: UNVERIFIED. Both lists reach the executor as one [2, N] int32 tensor per request:
# the words' ids one after another, then each word's cumulative end offset (ids padded with 0,
# offsets with -1; preprocessing _to_word_list_format, tensorrtllm_backend v0.19.0 and TensorRT-LLM
# triton_backend @01259b15).
