"""The options of `trtspec train-draft`: one model, the recipe section `draft: {train: {...}}`, the
argument of trtspec.drafts.train.train_draft and the source of the CLI flags (trtspec/options.py).

Light: pydantic only, so `trtspec --help` reads the defaults without importing torch or ModelOpt."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from ..options import StageOptions
from ..tuning.options import distinct_positive


SELF = "self"  # the workload name of the prompts the target writes itself (self_prompts)


def device_type(device: str) -> str:
    """Where a head with this `device` option is trained and its target answers: cpu or cuda (auto:
    cuda when torch sees one). Part of the head's cache key (cache.head_key) and of the derive stage's
    hash: the target answers in another dtype there, so the head differs."""
    import torch  # lazy: this module is read by `trtspec --help`

    return "cuda" if device == "cuda" or (device == "auto" and torch.cuda.is_available()) else "cpu"


class TrainDraftOptions(StageOptions):
    """How an EAGLE-3 head is trained for a target (trtspec.drafts)."""
    section = "draft.train"
    workloads: str = Field("chat=mt-bench", min_length=1,
                           description="Prompt sets the target answers (NAME=SOURCE list: packaged sets or "
                                       "JSONL/CSV traffic logs), as for `trtspec profile`.")
    samples: Optional[int] = Field(None, ge=2, description="Prompts per workload (seeded sample); null: all.")
    heldout: int = Field(8, ge=1, description="Prompts per workload held out of training to measure AL(K).")
    self_prompts: int = Field(0, ge=0, description="More prompts the target writes itself (Magpie: sampled after "
                              "its chat template's user header), trained on as workload 'self', never held out: "
                              "data beyond the prompt sets, as many as the budget allows.")
    max_new_tokens: int = Field(256, ge=2, description="Length of the target's regenerated greedy responses.")
    max_prompt_tokens: int = Field(512, ge=1, description="Prompts are cut to their last tokens beyond this.")
    regen_batch_size: int = Field(8, ge=1, description="Prompts the target answers at once (batched greedy).")
    num_layers: int = Field(1, ge=1, le=8, description="Decoder layers of the EAGLE-3 head.")
    intermediate_size: Optional[int] = Field(None, ge=1, description="MLP width of the head; null: the target's.")
    draft_vocab_size: Optional[int] = Field(None, ge=2, description="Draft vocabulary (the most frequent tokens "
                                            "of the training responses, ModelOpt's d2t mapping); null: the "
                                            "target's whole vocabulary.")
    ttt_steps: int = Field(3, ge=1, le=8, description="ModelOpt's training-time-test steps (draft positions "
                           "trained per sample).")
    loss_on_prompt: bool = Field(False, description="Train on prompt positions too, not only on response "
                                 "positions: ModelOpt's EAGLE-3 loss is a soft label against the target's own "
                                 "next-token distribution, valid at every position, and the target's forward over "
                                 "the prompt is computed (and paid for) either way.")
    epochs: int = Field(4, ge=1, description="Passes over the training responses.")
    batch_size: int = Field(4, ge=1, description="Sequences per optimizer step.")
    lr: float = Field(1e-3, gt=0.0, lt=1.0, allow_inf_nan=False, description="AdamW learning rate.")
    eval_every: int = Field(50, ge=1, description="Optimizer steps between held-out AL(K) measurements.")
    checkpoint_every: int = Field(50, ge=1, description="Optimizer steps between resumable checkpoints.")
    eval_k: list[int] = Field([1, 2, 3, 4], min_length=1, description="Draft lengths K whose held-out AL(K) "
                              "is reported.")
    seed: int = Field(0, ge=0, lt=2 ** 63, description="Seed of prompt choice, split, data order and init.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where the target and head run "
                                                   "(auto: cuda when available).")
    threads: Optional[int] = Field(None, ge=1, description="torch CPU threads; null: torch's default.")

    @field_validator("eval_k")
    @classmethod
    def _eval_k(cls, v: list[int]) -> list[int]:
        return distinct_positive(v, "[1, 2, 3]")

    @model_validator(mode="after")
    def _self_is_reserved(self):
        """The self-written prompts train as workload SELF; a named workload of that name would be
        mixed into them (and never held out), so it is refused."""
        from ..errors import TrtspecError
        from ..workloads.spec import parse_workload_specs

        try:
            names = [s.name for s in parse_workload_specs(self.workloads)] if self.self_prompts and self.workloads else []
        except TrtspecError as e:
            raise ValueError(f"workloads: {e}") from None
        if SELF in names:
            raise ValueError(f"workloads: the name {SELF!r} is reserved for the self_prompts prompts "
                             "when self_prompts > 0; give that workload another NAME=")
        return self

    def shaping(self) -> dict:
        """The options the trained head's weights depend on (not how often or at which K it is measured,
        where or how fast): what its resumable checkpoints are valid for (train.fingerprint)."""
        return self.model_dump(exclude={"eval_every", "checkpoint_every", "eval_k", "device", "threads"})

    def written(self) -> dict:
        """shaping() and how the held-out AL(K) is measured (eval_k, eval_every): what the head's
        directory holds (training.json's history, learning_curve.png) depends on both, so the head
        cache key and the derive stage hash take this; the checkpoint takes shaping() (the weights
        do not depend on how often they are measured)."""
        return self.shaping() | {"eval_k": self.eval_k, "eval_every": self.eval_every}


class TrainDraftStage(TrainDraftOptions):
    """The recipe section `draft: {train: {...}}`: TrainDraftOptions, trained on the recipe's own
    workloads unless `workloads` names others, optionally with one more head per workload."""
    workloads: Optional[str] = Field(None, min_length=1, description="Prompt sets the target answers (NAME=SOURCE "
                                     "list); null: the recipe's workloads.")
    per_workload: bool = Field(False, description="Train a head per workload too (on that workload's prompts "
                               "alone), besides the general head: each is profiled on every workload and the "
                               "tuner routes a workload to its best head (tune.memory_budget_gib counts each).")
    threads: Optional[int] = Field(None, ge=1, description="torch CPU threads; null: the recipe's `threads`.")

    @field_validator("num_layers")
    @classmethod
    def _profiled(cls, v: int) -> int:
        """A recipe profiles its heads with trtspec's runtime, which executes one-layer EAGLE-3 heads:
        a deeper one would train (hours) and then fail at the profile stage."""
        if v != 1:
            raise ValueError(f"{v}: a recipe profiles its heads with trtspec's runtime, which executes one-layer "
                             "EAGLE-3 heads only (train deeper ones with `trtspec train-draft`)")
        return v

    def head_options(self, workloads: str, threads: int | None, general: bool = True) -> TrainDraftOptions:
        """The TrainDraftOptions of one head, trained on `workloads` (NAME=SOURCE list). A per-workload
        head (`general` False) learns that workload alone: without the target's self-written prompts."""
        base = self.model_dump(exclude={"per_workload", "workloads", "threads"})
        if not general:
            base["self_prompts"] = 0
        return TrainDraftOptions(**base, workloads=workloads, threads=self.threads or threads)
