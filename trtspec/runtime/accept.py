"""Accept rules: which draft tokens a verify step keeps, and the token it adds after them.

Every rule walks the proposal's tree from the root (a chain is a tree) and returns, per row, the kept
path, the kept draft tokens + one token from the target, and the positions it offered. Which rule a
deployment runs depends on the TensorRT-LLM path (trtspec/upstream/sampling.py, read from its
source); the profile must predict that rule, so each is named and selectable (`accept_rule`):

- greedy: keep the child whose token is the target's argmax; add the argmax. Output = greedy output.
- exact_match (the PyTorch backend's two-model and n-gram paths): the target samples at each node
  (temperature, top-k, top-p); keep the child equal to that sample, at the first miss emit the
  sample itself. Lossless: each emitted token is a target sample given the emitted prefix. With
  keyed draws (sampling.py) it even emits the plain sampled output, token for token.
- exact_match_resample (engine-flow draft-target without draft logits): the same test against the
  engine kernels' sample (top-p boundary truncated: sampling.kernel_probs), but at the first miss
  TensorRT-LLM emits a FRESH draw from p instead of the sample that missed (the bonus token after a
  full chain is a fresh draw of p too). LOSSY: the rejected draft token d is drawn again with
  probability p(d), so P(emit d) = p(d)(2 - p(d)) at top_p 1.
- rejection_sampling (draft-target with draft logits; chains only): keep d_i when u < p(d_i)/q(d_i),
  p the target's and q the draft's filtered distribution at that position; at the first rejection
  emit a sample of norm(max(0, p - q)), after a full chain a sample of p. Lossless (Leviathan et al.
  2023, Chen et al. 2023): P(emit x) = min(p, q)(x) + (1 - sum min(p, q)) * norm(max(0, p - q))(x)
  = p(x). q is what the draft really sampled from: its filtered distribution when it sampled, the
  one-hot of its choice when it drafted greedily (then P(keep d) = p(d), as for exact match).
- typical_acceptance (EAGLE engines with greedy_sampling off, as TensorRT-LLM's kernel does it):
  p = softmax(logits / T) (no top-k / top-p), tokens below min(eps, alpha * exp(-H(p))) masked out
  and the rest renormalised; then exact match against one sample per node of that masked
  distribution. LOSSY: the masked tail is never emitted (tests/runtime/test_accept.py measures how
  far the output distribution moves).

Devices: the greedy rule reads only the argmax of each entry off the device; the sampling rules
read the logits to the host once per step (float64 filtering and keyed draws run there, the same
arithmetic on every device).

At temperature 0 (or top_k 1) every rule is the greedy rule (the same function), so greedy outputs
and their golden tests do not depend on the rule named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch

from ..errors import TrtspecError
from ..options import Sampling
from ..upstream import sampling as upstream
from .sampling import ACCEPT, RESIDUAL, TARGET, draw, kernel_probs, probs, uniform
from .speculative import Acceptance, AcceptRule, Proposal
from .tree import Tree

RULES = tuple(r.name for r in upstream.ACCEPT_RULES)  # greedy first


@dataclass(frozen=True)
class Key:
    """Where a row's draws come from: its seed, and the output position of the token its root's
    distribution gives (so node depth d samples output position `position + d`)."""
    seed: int
    position: int


def _walk(tree: Tree, drafted: list[int], choose: Callable[[int], tuple[int | None, int]]) -> Acceptance:
    """Follow `choose(node) -> (child kept or None, token emitted if none)` from the root."""
    path, node = [0], 0
    while True:
        child, token = choose(node)
        if child is None:
            break
        path.append(child)
        node = child
    offered = len(path) - 1 + (1 if tree.children[node] else 0)
    return Acceptance(path, [drafted[n - 1] for n in path[1:]] + [token], offered)


def accept_greedy(proposal: Proposal, target_logits: torch.Tensor, keys: list[Key] | None = None) -> list[Acceptance]:
    """Walk the tree from the root, following the child whose token is the target's argmax."""
    want = target_logits.argmax(-1).tolist()  # [b'][N+1]: the target's next token after each entry
    drafted = proposal.tokens.tolist()
    out = []
    for b in range(len(want)):
        tree = proposal.tree_for(b)

        def choose(node: int, b=b, tree=tree) -> tuple[int | None, int]:
            kid = next((c for c in tree.children[node] if drafted[b][c - 1] == want[b][node]), None)
            return kid, want[b][node]
        out.append(_walk(tree, drafted[b], choose))
    return out


class ExactMatch:
    """Keep the child equal to the target's sample at each node; at a miss emit that sample."""
    name = upstream.EXACT_MATCH.name

    def __init__(self, sampling: Sampling):
        self.sampling = sampling

    def node_probs(self, logits: torch.Tensor) -> torch.Tensor:
        return probs(logits, self.sampling)

    def on_miss(self, logits: torch.Tensor, sample: int, key: Key, position: int) -> int:
        """The token emitted where the walk stops after drafting (a miss, or the bonus after a full
        path): the sample itself."""
        return sample

    def __call__(self, proposal: Proposal, target_logits: torch.Tensor, keys: list[Key]) -> list[Acceptance]:
        drafted, target_logits = proposal.tokens.tolist(), target_logits.cpu()
        out = []
        for b, key in enumerate(keys):
            tree = proposal.tree_for(b)

            def choose(node: int, b=b, key=key, tree=tree) -> tuple[int | None, int]:
                p = self.node_probs(target_logits[b, node])
                position = key.position + tree.depth[node]
                token = draw(p, uniform(key.seed, position, TARGET))
                kid = next((c for c in tree.children[node] if drafted[b][c - 1] == token), None)
                if kid is None and (node or tree.children[node]):  # a miss, or the bonus after drafts
                    token = self.on_miss(target_logits[b, node], token, key, position)
                return kid, token
            out.append(_walk(tree, drafted[b], choose))
        return out


class ExactMatchResample(ExactMatch):
    """TensorRT-LLM's engine flow without draft logits: the sample is the kernels' draw, a miss
    emits a fresh draw of the masked, renormalised p (lossy), and so does the bonus token after a
    fully accepted chain (acceptDraftTokensKernel marks step == numDraftTokens not accepted, so the
    multinomial resample runs); a step with no draft emits the kernels' draw itself."""
    name = upstream.EXACT_MATCH_RESAMPLE.name

    def node_probs(self, logits: torch.Tensor) -> torch.Tensor:
        return kernel_probs(logits, self.sampling)

    def on_miss(self, logits: torch.Tensor, sample: int, key: Key, position: int) -> int:
        return draw(probs(logits, self.sampling), uniform(key.seed, position, RESIDUAL))


class TypicalAcceptance(ExactMatch):
    """Exact match against the entropy-masked target distribution (lossy; module docstring)."""
    name = upstream.TYPICAL.name

    def __init__(self, sampling: Sampling, posterior_threshold: float = upstream.TYPICAL_DEFAULT_POSTERIOR_THRESHOLD):
        super().__init__(sampling)
        lo, hi = upstream.TYPICAL_POSTERIOR_THRESHOLD_RANGE
        if not lo <= posterior_threshold < hi:
            raise TrtspecError(f"posterior_threshold: expected in [{lo}, {hi}), got {posterior_threshold}")
        self.threshold = posterior_threshold
        self.alpha = posterior_threshold ** upstream.TYPICAL_ALPHA_EXPONENT
        self.tempered = Sampling(temperature=sampling.temperature)  # the plugin gets no top-k / top-p

    def node_probs(self, logits: torch.Tensor) -> torch.Tensor:
        p = probs(logits, self.tempered)
        entropy = -float((p * (p + upstream.TYPICAL_ENTROPY_EPSILON).log()).sum())
        p = p.masked_fill(p < min(self.threshold, self.alpha * math.exp(-entropy)), 0.0)
        return p / p.sum()


class RejectionSampling:
    """Keep d_i with probability min(1, p(d_i) / q(d_i)); chains only (module docstring)."""
    name = upstream.REJECTION.name

    def __init__(self, sampling: Sampling):
        self.sampling = sampling

    def __call__(self, proposal: Proposal, target_logits: torch.Tensor, keys: list[Key]) -> list[Acceptance]:
        drafted, target_logits = proposal.tokens.tolist(), target_logits.cpu()
        if proposal.logits is not None:
            proposal = replace(proposal, logits=proposal.logits.cpu())
        out = []
        for b, key in enumerate(keys):
            tree = proposal.tree_for(b)
            if any(len(c) > 1 for c in tree.children):
                raise TrtspecError("rejection_sampling: needs a chain of draft tokens (draft-target), not a tree")

            def choose(node: int, b=b, key=key, tree=tree) -> tuple[int | None, int]:
                p = probs(target_logits[b, node], self.sampling)
                position = key.position + tree.depth[node]
                if not tree.children[node]:  # past the last draft: the bonus token is a sample of p
                    return None, draw(p, uniform(key.seed, position, TARGET))
                child = tree.children[node][0]
                d = drafted[b][child - 1]
                q = self._draft_probs(proposal, b, child, d, p.shape[-1])
                if q[d] > 0 and uniform(key.seed, position, ACCEPT) * q[d] < p[d]:
                    return child, d
                residual = (p - q).clamp(min=0.0)
                return None, draw(residual if residual.sum() > 0 else p, uniform(key.seed, position, RESIDUAL))
            out.append(_walk(tree, drafted[b], choose))
        return out

    def _draft_probs(self, proposal: Proposal, b: int, node: int, token: int, vocab: int) -> torch.Tensor:
        """q of a node: the draft's filtered distribution if it sampled, else the one-hot of its token.
        A draft vocabulary shorter than the target's (padding) has q = 0 beyond its end."""
        q = torch.zeros(vocab, dtype=torch.float64)
        if proposal.sampled and proposal.logits is not None:
            dq = probs(proposal.logits[b, node - 1], self.sampling)
            q[:dq.shape[-1]] = dq[:vocab]
        else:
            q[token] = 1.0
        return q


def accept_rule(name: str, sampling: Sampling) -> AcceptRule:
    """The rule `name` (one of RULES) at `sampling`; greedy settings give the greedy rule whatever
    the name. Errors name the field `accept_rule`."""
    if name not in RULES:
        raise TrtspecError(f"accept_rule: {name!r} is not one of {', '.join(RULES)}")
    if sampling.greedy:
        return accept_greedy
    if name == upstream.GREEDY.name:
        raise TrtspecError(f"accept_rule: greedy cannot accept at {sampling.label()} "
                           f"(use one of {', '.join(RULES[1:])}, or temperature 0)")
    rule = {r.name: r for r in (ExactMatch, ExactMatchResample, RejectionSampling, TypicalAcceptance)}[name]
    return rule(sampling)
