"""The held-out AL function agrees with ModelOpt's own drafting (pseudo_speculative_generate) and
with the runtime's EAGLE-3 profile of the exported head (what `trtspec profile` measures)."""

from __future__ import annotations

import pytest
import torch

from tiny_models import make_hf_model, scale_layer_outputs
from trtspec.checkpoints.convert import convert_hf
from trtspec.drafts import head, heldout
from trtspec.drafts.data import Example
from trtspec.drafts.options import TrainDraftOptions
from trtspec.runtime.generate import load_models
from trtspec.tuning.profile_pass import eagle3_match_lengths

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def eagle(tmp_path_factory):
    """ModelOpt's EAGLE-3 model on a bigram random Llama, its head trained a little (ModelOpt's forward
    and loss) on the target's greedy continuations of 6 prompts, so that on a 7th its chains match the
    target sometimes and not always. Returns (model, held-out prompt, target directory)."""
    from transformers import AutoModelForCausalLM

    target = tmp_path_factory.mktemp("heldout") / "target"
    scale_layer_outputs(make_hf_model("llama", target), 0.0).save_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    prompts = torch.randint(3, 1001, (7, 4), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        seqs = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=20,
                              do_sample=False, pad_token_id=0)
    head.convert(model, TrainDraftOptions(ttt_steps=3), None, seed=0)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(40):
        loss = model(input_ids=seqs[:6]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), prompts[6].tolist(), target


def greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def test_teacher_forced_chains_equal_modelopts_drafts_from_every_state(eagle):
    eagle, prompt, _ = eagle
    response = greedy(eagle, prompt, 20)
    depth = 3
    ours = heldout.match_lengths(eagle, prompt, response, depth)
    seq, P = prompt + response, len(prompt)
    for t in range(1, len(response)):
        # state t: the target has run over prompt + x_1..x_{t-1}; its token is x_t, the drafts follow
        base_token, drafts = eagle.pseudo_speculative_generate(torch.tensor([seq[:P + t - 1]]), steps=depth)
        assert base_token.item() == seq[P + t - 1]
        m = 0
        while m < depth and t + m + 1 <= len(response) and drafts[0, m].item() == seq[P + t + m]:
            m += 1
        assert ours[t] == m, f"state {t}"
    assert any(ours[1:]) and not all(ours[1:])  # some hits and some misses: the check has teeth


def test_heldout_acceptance_pools_the_steps_of_every_example(eagle):
    """AL(K) = tokens / verify steps over all held-out examples together, each step accepting
    min(match length, K) drafts plus the bonus token and moving on past them (counted here by hand
    from the match lengths, not by tuning.acceptance)."""
    eagle, prompt, _ = eagle
    examples = [Example("chat", p, greedy(eagle, p, 20), True) for p in (prompt, prompt[1:] + prompt[:1])]
    runs = [heldout.match_lengths(eagle, e.prompt, e.response, 3) for e in examples]
    for k in (1, 3):
        tokens = steps = 0
        for m in runs:
            t = 1  # state 0's token is the prefill's; verify steps start at state 1
            while t < len(m):  # the last step emits only the len(m) - t tokens left (runtime/stats.py)
                a = min(m[t], k, len(m) - t - 1)
                tokens, steps, t = tokens + a + 1, steps + 1, t + a + 1
        assert heldout.heldout_acceptance(eagle, examples, [k])[0][k] == pytest.approx(tokens / steps, rel=1e-12)


def test_heldout_chains_equal_the_runtimes_profile_of_the_exported_head(eagle, tmp_path):
    """The training curve's AL is the AL `trtspec profile` reports for the exported head: the runtime
    (TensorRT-LLM's EAGLE-3 forward, on the target's TRT-LLM checkpoint) drafts the same chains."""
    eagle, _, target = eagle
    head.export(eagle, tmp_path / "head")
    convert_hf(target, tmp_path / "ckpt", dtype="float32")
    models = load_models(tmp_path / "ckpt", tokenizer=False, eagle3_head=tmp_path / "head")
    ours, runtime = [], []
    for prompt in torch.randint(3, 1001, (4, 5), generator=torch.Generator().manual_seed(1)).tolist():
        response = greedy(eagle, prompt, 20)
        ours.append(heldout.match_lengths(eagle, prompt, response, 3))
        runtime.append(eagle3_match_lengths(models, [prompt + response], [len(prompt)], 3)[0])
    assert ours == runtime
    assert any(map(any, ours)) and not all(map(all, ours))
