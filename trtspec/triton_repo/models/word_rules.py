"""Request stopping rules beside serving_rules: stop / bad words in upstream's tensor format, min_tokens
under its 0.x name min_length, log probs.

Standard library only, like serving_rules (shipped next to every model, imported by trtspec's tests).

Upstream's format (preprocessing `_to_word_list_format`, tensorrtllm_backend v0.19.0 and
TensorRT-LLM triton_backend @01259b15, the same): per batch item a [2, N] int32 tensor, row 0 the
words' token ids one after another, row 1 the cumulative end offset of each word; N = the longest
row 0 of the batch (at least 1), row 0 padded with 0 and row 1 with -1. Each word is tokenized
without special tokens; a word that encodes to nothing is skipped. `stop_words_list` and
`bad_words_list` of tensorrt_llm take that tensor; the matching rules are trtspec.runtime.words'.
"""

try:  # a shipped copy: serving_rules lies next to it (the python backend's sys.path)
    from serving_rules import RequestError
except ImportError:  # imported as part of trtspec
    from .serving_rules import RequestError


def word_list_format(items):
    """Upstream's [batch, 2, N] nested lists from per-item lists of token-id sequences."""
    flats, offsets = [], []
    for words in items:
        flat, ends = [], []
        for ids in words:
            if ids:
                flat += [int(t) for t in ids]
                ends.append(len(flat))
        flats.append(flat)
        offsets.append(ends)
    n = max([1] + [len(f) for f in flats])
    return [[f + [0] * (n - len(f)), e + [-1] * (n - len(e))] for f, e in zip(flats, offsets)]


def parse_word_list(rows, name):
    """The token-id sequences of one item's [2, N] tensor (as nested lists; absent or empty: none).
    A malformed tensor is refused naming `name` (stop_words_list / bad_words_list)."""
    if rows is None or not rows or not rows[0]:
        return ()
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise RequestError(f"{name}: expected [2, N] (token ids, then cumulative end offsets padded with -1)")
    ids, ends = [int(t) for t in rows[0]], [int(e) for e in rows[1] if int(e) >= 0]
    out, start = [], 0
    for end in ends:
        if not start < end <= len(ids):
            raise RequestError(f"{name}: offset {end} after {start}; expected increasing offsets within the "
                             f"{len(ids)} token ids")
        out.append(tuple(ids[start:end]))
        start = end
    return tuple(out)


def request_words(get):
    """(stop, bad) sequences of a tensorrt_llm request; get(name) -> the [1, 2, N] array or None."""
    def one(name):
        t = get(name)
        return parse_word_list(None if t is None else t.reshape(-1, 2, t.shape[-1])[0].tolist(), name)
    return one("stop_words_list"), one("bad_words_list")


def ends_with_any(tokens, sequences):
    """Whether `tokens` ends with one of `sequences` (the BLS round loop's view of the executor's
    stop rule). The runtime's own is trtspec.runtime.words.ends_with_stop, on purpose a second copy:
    this file runs in the TensorRT-LLM container without trtspec, and trtspec.runtime may not import
    triton_repo (the import layers). tests/triton_repo/test_word_rules.py checks that they agree."""
    return any(len(tokens) >= len(s) and tuple(tokens[-len(s):]) == tuple(s) for s in sequences)


def min_tokens_or_alias(min_tokens, min_length):
    """The request's min_tokens, given as min_tokens or as min_length: genai-perf 0.0.16 sends the 0.x
    name with --output-tokens-mean-deterministic (trtspec.upstream.triton GENAI_PERF_MIN_TOKENS_INPUT),
    the same setting. Both with different values is refused: which one was meant is unknown."""
    if min_length is None:
        return min_tokens
    if min_tokens is not None and int(min_tokens) != int(min_length):
        raise RequestError(f"min_length: {int(min_length)} differs from min_tokens: {int(min_tokens)} "
                           "(min_length is min_tokens' 0.x name); give one, or both equal")
    return min_length


def check_log_probs(value):
    """return_log_probs is declared so that asking for it gets this error, not Triton's generic one:
    trtspec's models do not return cum_log_probs / output_log_probs. false (or absent) is fine."""
    if value:
        raise RequestError("return_log_probs: not supported by trtspec's generate (no cum_log_probs / "
                         "output_log_probs outputs); leave it unset or false")


def check_llmapi_words(given, min_tokens, min_length=None):
    """The llmapi flavor's model config declares no stop / bad words or min_tokens inputs
    (upstream.triton.LLMAPI_INPUTS): refused when set (`given`: the word inputs the request has),
    not dropped. min_tokens / min_length are the request's own values, so that the refusal names
    the input the client sent (genai-perf sends min_length)."""
    mins = [n for n, v in (("min_tokens", min_tokens), ("min_length", min_length)) if v]
    for name in [*given, *mins]:
        raise RequestError(f"{name}: the llmapi flavor's model takes no {name}; leave it unset")
