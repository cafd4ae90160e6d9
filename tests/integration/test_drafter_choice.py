"""The drafter choice end to end on CPU: a recipe offering a draft model and n-gram drafting ->
`trtspec run` (convert, profile each drafter, tune, choose, cpu-flavor repository) -> tritonserver
-> tritonclient gRPC streaming requests to `generate`.

On triton_fixtures.choice_pair the draft model is right everywhere but costs a step, and n-gram
drafts are free but right only where the answer repeats the prompt (`edit`), so the tuner gives
`chat` the draft model and `edit` n-gram drafting. Served: each workload's text is exactly the
target's greedy text, its route names the drafter (`edit@1:K=..:ngram:n=..`), and the acceptance
length it reports is the one trtspec.runtime measures for that drafter and setting. Slow: the
pipeline (~30 s) and a tritonserver start (~15 s).
"""

from __future__ import annotations

import json

import pytest
import yaml

from serve_helpers import request, start_cli, stop_cli, text_of, value
from triton_fixtures import choice_pair
from trtspec.pipeline.runner import run_recipe
from trtspec.runtime.generate import load_models, stream_request
from trtspec.tuning.tuning_schema import load_tuning

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
MAX_TOKENS = 20


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("choice").resolve()
    pair, prompts = choice_pair(d)
    for name, texts in prompts.items():
        (d / f"{name}.jsonl").write_text("".join(json.dumps({"prompt": t, "id": f"{name}{i}"}) + "\n"
                                                 for i, t in enumerate(texts)))
    recipe = {"target": "hf", "draft": {"hf": "draft_hf"}, "ngram": True, "dtype": "float32",
              "workloads": {"chat": "chat.jsonl", "edit": "edit.jsonl"},
              "profile": {"samples": 6, "max_new_tokens": MAX_TOKENS, "max_k": 4, "ngram_sizes": [2, 3]},
              "tune": {"cost": "cpu", "concurrency_bands": [1]}, "triton": {"flavor": "cpu"}}
    (d / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    run_recipe(d / "recipe.yaml", d / "out", until="triton")
    repo = d / "out" / "triton-repo"
    proc, ports = start_cli(repo, d / "server.log")
    yield {"url": f"127.0.0.1:{ports['grpc']}", "out": d / "out", "prompts": prompts,
           "models": load_models(d / "out" / "checkpoint", tokenizer=True)}
    stop_cli(proc, repo)


def runtime(models, text: str, band):
    """The target's greedy text, and trtspec.runtime's AL for the band's drafter and setting."""
    tok = models.tokenizer
    ids, eos = tok.encode(text), (tok.eos_token_id,)
    greedy = [t for p in stream_request(models, ids, MAX_TOKENS, "greedy", eos_ids=eos) for t in p.tokens]
    mode = "ngram" if band.drafter == "ngram" else "draft-target"
    pieces = list(stream_request(models, ids, MAX_TOKENS, mode, draft_len=band.draft_len, eos_ids=eos,
                                 ngram_size=band.max_matching_ngram_size))
    assert [t for p in pieces for t in p.tokens] == greedy
    return tok.decode(greedy, skip_special_tokens=True), pieces[-1].stats.acceptance_length


def test_the_tuner_gives_each_workload_its_drafter(served):
    t = load_tuning(served["out"] / "tuning.json")
    chat, edit = t.workloads["chat"].bands[0], t.workloads["edit"].bands[0]
    assert chat.speculate and chat.drafter is None and edit.speculate and edit.drafter == "ngram"
    assert (served["out"] / "tuning-draft-target.json").is_file() and (served["out"] / "tuning-ngram.json").is_file()
    assert t.choice.drafters["draft-target"].served and t.choice.drafters["ngram"].served


def test_each_workload_is_served_by_its_drafter_with_the_target_greedy_text(served):
    t = load_tuning(served["out"] / "tuning.json")
    for workload, texts in served["prompts"].items():
        band = t.workloads[workload].bands[0]
        for text in texts[:2]:
            pieces, last = request(served["url"], text, workload, max_tokens=MAX_TOKENS)
            want, al = runtime(served["models"], text, band)
            assert text_of(pieces) == want
            assert value(last, "num_draft_tokens") == band.draft_len
            suffix = f":ngram:n={band.max_matching_ngram_size}" if band.drafter == "ngram" else ""
            assert value(last, "route") == f"{workload}@1:K={band.draft_len}{suffix}"
            assert value(last, "acceptance_length") == pytest.approx(al, rel=1e-6)
