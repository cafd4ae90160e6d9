"""The numbers of a quality report: logit RMSE, top-1 agreement and perplexity pooled over the
teacher-forced sequences of one workload, and the acceptance length of a pair (via the profiler).

Standard errors are over prompts (the tokens of one prompt are correlated: one early divergence
shifts all that follow): top-1 agreement and AL are ratio estimators pooled over prompts
(tuning.acceptance.ratio_se), and the quantized - reference AL delta is paired, both pairs having
run the same prompts (tuning.acceptance.paired_ratio_delta_se)."""

from __future__ import annotations

import math

import torch

from ..tuning.acceptance import chain_accepted, chains_of, ratio_se, summarize, tokens_steps
from ..tuning.profile import profile_prompts


@torch.inference_mode()
def teacher_forced_logits(decoder, seq: list[int]) -> torch.Tensor:
    logits, _ = decoder.forward(torch.tensor([seq]), decoder.new_cache(1, len(seq)))
    return logits[0].float()


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> float:
    return float(-torch.log_softmax(logits.double(), -1).gather(-1, targets[:, None]).sum())


class PooledMetrics:
    """Pooled sums over all samples of one workload."""

    def __init__(self):
        self.sq = 0.0
        self.max_abs = 0.0
        self.n_logits = 0
        self.agree = self.positions = 0
        self.agree_prompt = self.positions_prompt = 0
        self.per_prompt: list[tuple[int, int]] = []  # (agreeing, generated positions) of each prompt
        self.per_prompt_prompt: list[tuple[int, int]] = []  # the same over its prompt positions
        self.nll = {"prompt": [0.0, 0.0], "continuation": [0.0, 0.0]}  # [ref, quant]
        self.ntok = {"prompt": 0, "continuation": 0}

    def add(self, lr: torch.Tensor, lq: torch.Tensor, seq: list[int], prompt_len: int) -> None:
        tokens = torch.tensor(seq)
        P, L = prompt_len, len(seq)
        gen = slice(P - 1, L - 1)  # positions predicting the continuation tokens s[P..L-1]
        if L > P:
            d = (lq[gen] - lr[gen]).double()
            self.sq += float((d * d).sum())
            self.max_abs = max(self.max_abs, float(d.abs().max()))
            self.n_logits += d.numel()
            agree = int((lq[gen].argmax(-1) == lr[gen].argmax(-1)).sum())
            self.agree += agree
            self.positions += L - P
            self.per_prompt.append((agree, L - P))
            for i, lg in enumerate((lr, lq)):
                self.nll["continuation"][i] += _nll(lg[gen], tokens[P:])
            self.ntok["continuation"] += L - P
        if P > 1:
            pr = slice(0, P - 1)
            agree = int((lq[pr].argmax(-1) == lr[pr].argmax(-1)).sum())
            self.agree_prompt += agree
            self.positions_prompt += P - 1
            self.per_prompt_prompt.append((agree, P - 1))
            for i, lg in enumerate((lr, lq)):
                self.nll["prompt"][i] += _nll(lg[pr], tokens[1:P])
            self.ntok["prompt"] += P - 1

    def result(self) -> dict:
        def ppl(kind):
            n = self.ntok[kind]
            if not n:
                return {"tokens": 0, "reference": None, "quantized": None, "ratio": None}
            r, q = (math.exp(x / n) for x in self.nll[kind])
            return {"tokens": n, "reference": r, "quantized": q, "ratio": q / r}

        return {"positions": self.positions,
                "logit_rmse": math.sqrt(self.sq / self.n_logits) if self.n_logits else None,
                "logit_max_abs": self.max_abs if self.n_logits else None,
                "top1_agreement": self.agree / self.positions if self.positions else None,
                "top1_agreement_se": ratio_se(self.per_prompt),
                "top1_agreement_prompt": self.agree_prompt / self.positions_prompt if self.positions_prompt else None,
                "top1_agreement_prompt_se": ratio_se(self.per_prompt_prompt),
                "perplexity": {"prompt": ppl("prompt"), "continuation": ppl("continuation")}}


def pair_acceptance(models, prompts, max_new_tokens: int, max_k: int):
    """(mode, per-workload summary, profiles) of a pair, or None when the models have no drafter."""
    if models.draft is None and models.eagle is None:
        return None
    mode = "eagle" if models.eagle is not None else "draft-target"
    profiles = profile_prompts(models, prompts, max_new_tokens, max_k)
    return mode, summarize(mode, _samples(mode, profiles), max_k), profiles


def al_counts(mode: str, profiles, k: int, max_k: int) -> list[tuple[int, int]]:
    """Each prompt's (tokens, steps) at draft length k, the terms of its pooled AL (summarize's)."""
    return [tokens_steps(chain_accepted(c, k)) for c in chains_of(mode, _samples(mode, profiles), max_k)]


def _samples(mode: str, profiles) -> list:
    """What the profiler recorded per prompt: EAGLE rank paths, else the chain's match lengths."""
    return [p.rank_paths if mode == "eagle" else p.match_lengths for p in profiles]

