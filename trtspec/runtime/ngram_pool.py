"""The n-gram pool of TensorRT-LLM's NGramPoolManager, in plain Python (rules: runtime/ngram.py).

Standard library only and no package-relative imports: the trtllm-flavor Triton repository ships
this very file next to its spec_decode model (the TensorRT-LLM container has no trtspec), so the
served orchestration drafts with the code the runtime and the profiler run. Settings are checked
by the caller (runtime.ngram.NGramProposer).
"""

from __future__ import annotations


def drop_shorter(kept: list[tuple[int, ...]], length: int) -> list[tuple[int, ...]]:
    """The kept matches after upstream drops those shorter than `length`. Upstream removes them from
    the OrderedSet it is iterating, whose iterator walks a list by index: the match right after a
    removed one shifts into its slot and is never examined, so it stays even when short. That
    leftover is what the pool drafts next when it is the oldest or newest kept, so it is kept here
    too (tests/runtime/test_ngram.py has a sequence where the two differ)."""
    out, skip = [], False
    for m in kept:
        if not skip and len(m) < length:
            skip = True  # removed: the next match is not examined
            continue
        skip = False
        out.append(m)
    return out


class NGramPool:
    """Patterns -> matches (oldest first), and per request where its next scan starts. One pool per
    request is a private pool; one pool for every request is upstream's public pool."""

    def __init__(self, k: int, n: int, keep_all: bool = True, use_oldest: bool = True):
        self.k, self.n, self.keep_all, self.use_oldest = k, n, keep_all, use_oldest
        self.patterns: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        self.scanned: dict = {}  # request key -> index of its sequence the next update starts at

    def _update(self, seq: list[int]) -> None:
        for size in range(min(self.n, len(seq) - 1), 0, -1):
            for i in range(len(seq) - size):
                pattern, match = tuple(seq[i:i + size]), tuple(seq[i + size:i + size + self.k])
                kept = self.patterns.get(pattern)
                if kept is None or (not self.keep_all and len(match) > len(kept[0])):
                    self.patterns[pattern] = [match]
                elif match not in kept:  # drop the kept matches shorter than the new one, append it
                    self.patterns[pattern] = drop_shorter(kept, len(match)) + [match]

    def draft(self, key, seq: list[int], max_len: int) -> list[int]:
        """The draft (possibly empty) for request `key` whose committed sequence is `seq` and which
        ends at `max_len` tokens (prompt + max_new_tokens): update from its unscanned part, then the
        match of the longest pattern ending `seq`, cut so it never reaches the last position."""
        room = max_len - 1 - len(seq)
        if room <= 0:
            return []
        self._update(seq[self.scanned.get(key, 0):])
        self.scanned[key] = max(0, len(seq) - (self.k + self.n - 1))
        for size in range(min(self.n, len(seq) - 1), 0, -1):
            matches = self.patterns.get(tuple(seq[-size:]))
            if matches:
                return list(matches[0 if self.use_oldest else -1][:room])
        return []
