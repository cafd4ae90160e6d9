"""Per-workload heads through the pipeline (`draft: {train: {per_workload: true}}`): a general head
and one head per workload, each profiled on every workload, the tuner routing each workload to its
best head, and repositories that serve every routed head (cpu flavor: one spec_decode drafting with
the head each request's route names; llmapi: one LLM-API model per (head, K)).

The target is made so that the right head differs by workload: a near-bigram tiny Llama whose
greedy continuation cycles inside one of two disjoint token sets (A = t3..t24, B = t25..t47), and
each workload's prompts end in one set. The heads are the exact bigram head (tiny_models.
bigram_eagle3) restricted to a draft vocabulary: the chat head's is A, the edit head's B, the
general head's half of each. Training is replaced by these heads (drafts.cache.cached_head is
patched): what is tested is the stage, profile, choice and serving path, not how well a tiny head
learns (tests/drafts cover training)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from tiny_models import bigram_eagle3, modelopt_eagle3, near_bigram_target, save_tiny_tokenizer
from trtspec.pipeline.runner import run_recipe
from trtspec.triton_repo.configs import params, parse_text
from trtspec.triton_repo.repo import RepoRequest, make_repository
from trtspec.triton_repo.validate import check_repository
from trtspec.tuning.tuning_schema import load_tuning

pytestmark = pytest.mark.usefixtures("one_torch_thread")

V = 48
A, B = list(range(3, 25)), list(range(25, V))
GENERAL = A[:11] + B[:12]


def two_cycle_target(out):
    """lm_head row j points at the embedding of j's predecessor in its cycle: the greedy
    continuation of a token of A stays in A, of B in B."""
    base = near_bigram_target(out, num_hidden_layers=8, vocab_size=V, num_key_value_heads=4)
    with torch.no_grad():
        e = base.model.embed_tokens.weight
        head = base.lm_head.weight
        head.zero_()
        for cycle in (A, B):
            for i, j in enumerate(cycle):
                pred = cycle[i - 1]
                head[j] = e[pred] / e[pred].norm()
    base.save_pretrained(out, safe_serialization=True)
    return base


def bigram_head(hf, base, out, vocab: list[int]):
    def shape(model):
        ids = torch.tensor(sorted(vocab))
        model.eagle_module.d2t.copy_(ids - torch.arange(len(ids)))
        bigram_eagle3(model, base)
    modelopt_eagle3(hf, out, seed=3, draft_vocab=len(vocab), shape=shape)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("workload_heads")
    base = two_cycle_target(d / "hf")
    save_tiny_tokenizer(d / "hf", vocab_size=V)
    for name, vocab in (("general", GENERAL), ("chat", A), ("edit", B)):
        bigram_head(d / "hf", base, d / "heads" / name, vocab)
    text = lambda ids: " ".join(f"t{i}" for i in ids)
    for name, cycle in (("chat", A), ("edit", B)):
        (d / f"{name}.jsonl").write_text("".join(json.dumps({"prompt": text([cycle[i], cycle[i + 5], cycle[i + 2]])})
                                                 + "\n" for i in range(4)))
    return d


def serve_in_process(p: dict, monkeypatch):
    """spec_decode (the cpu flavor's) set up from its config's parameters, outside a server:
    serve(prompt, head, k) -> (tokens, acceptance length) of one greedy request."""
    import importlib
    import sys

    from triton_repo.test_models_common import HELPER_MODULES, MODELS, Request
    from triton_repo.test_spec_decode import fake_engines

    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_engines([], None))
    monkeypatch.syspath_prepend(str(MODELS))
    for name in (*HELPER_MODULES, "spec_decode"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    mod = importlib.import_module("spec_decode")
    m = mod.TritonPythonModel.__new__(mod.TritonPythonModel)
    m.setup(p)
    assert set(m.heads) == {"eagle3-chat", "eagle3-edit"}

    def serve(prompt, head, k=3):
        req, stats = Request(), mod.Acceptance()
        req.inputs = {}
        tokens = [t for piece in m._runtime(req, prompt, 12, k, None, stats, None, head) for t in piece]
        return tokens, stats.length
    return serve


def fake_cached_head(root):
    """drafts.cache.cached_head as the crafted heads: by the workloads a head is trained on."""
    def cached_head(target, options, console=None):
        names = [e.split("=")[0] for e in options.workloads.split(",")]
        return root / "heads" / (names[0] if len(names) == 1 else "general"), True
    return cached_head


def test_each_workload_is_routed_to_its_own_head_and_every_repository_serves_both(setup, tmp_path, monkeypatch):
    monkeypatch.setattr("trtspec.drafts.cache.cached_head", fake_cached_head(setup))
    recipe = {"target": str(setup / "hf"), "dtype": "float32",
              "draft": {"train": {"per_workload": True, "device": "cpu"}},
              "workloads": {"chat": str(setup / "chat.jsonl"), "edit": str(setup / "edit.jsonl")},
              "profile": {"samples": 4, "max_new_tokens": 16, "max_k": 3},
              "tune": {"cost": "h100", "concurrency_bands": [1]}, "triton": {"flavor": "cpu"}}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    out = tmp_path / "out"
    run_recipe(tmp_path / "recipe.yaml", out, until="triton")
    assert sorted(p.name for p in (out / "draft-heads").iterdir()) == ["chat", "edit"]

    al = {n: json.loads((out / f).read_text())["workloads"] for n, f in
          (("general", "profile.json"), ("chat", "profile-eagle3-chat.json"), ("edit", "profile-eagle3-edit.json"))}
    k3 = lambda head, w: al[head][w]["accept_length_by_k"]["3"]
    assert k3("chat", "chat") > k3("general", "chat") > k3("edit", "chat")  # each head best on its own workload
    assert k3("edit", "edit") > k3("general", "edit") > k3("chat", "edit")

    stages = json.loads((out / "run-manifest.json").read_text())["stages"]  # recorded on the first run
    assert {"profile-eagle3-chat.json", "profile-eagle3-edit.json"} <= {Path(o).name for o in stages["profile"]["outputs"]}
    assert "tuning-eagle3-chat.json" in {Path(o).name for o in stages["tune"]["outputs"]}

    t = load_tuning(out / "tuning.json")
    assert {w: wt.bands[0].drafter for w, wt in t.workloads.items()} == {"chat": "eagle3-chat", "edit": "eagle3-edit"}
    assert set(t.choice.drafters) == {"eagle3", "eagle3-chat", "eagle3-edit"}
    # the general head routes no band here, but the repository loads it with the others (spec_decode's
    # draft_checkpoint, the default route of an unknown workload): it is served and its memory counted
    assert t.choice.drafters["eagle3"].served
    sweep = t.workloads["chat"].bands[0].sweep  # every head's chain, the others' named (plots, default route)
    assert {p.label for p in sweep if p.draft_len} == {None, "eagle3-chat", "eagle3-edit"}
    assert (out / "tuning_plots").is_dir() and "eagle3-chat K=" in run_recipe(tmp_path / "recipe.yaml", out,
                                                                              until="tune", force="tune").rows[-1].note
    head_gib = t.choice.drafters["eagle3-chat"].memory_gib
    assert head_gib > 0 and t.choice.memory_gib == pytest.approx(
        sum(t.choice.drafters[n].memory_gib for n in ("eagle3", "eagle3-chat", "eagle3-edit")))

    repo = out / "triton-repo"
    assert check_repository(repo) == []
    calls = {(c["caller"], c["callee"]): c for c in json.loads((repo / "trtspec-repo.json").read_text())["calls"]}
    assert "draft_head" in calls[("generate", "spec_decode")]["sends"] and ("generate", "postprocessing") in calls
    broken = shutil.copytree(repo, tmp_path / "broken")  # a spec_decode that lost an input generate sends it
    cfg = broken / "spec_decode" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "draft_head"', 'name: "draft_head_renamed"'))
    assert "call generate -> spec_decode: spec_decode has no input 'draft_head'" in "\n".join(check_repository(broken))
    routing = json.loads((repo / "trtspec-repo.json").read_text())["routing"]
    assert routing["workloads"]["chat"][0]["draft_head"] == "eagle3-chat"
    assert routing["workloads"]["edit"][0]["draft_head"] == "eagle3-edit"
    config = parse_text((repo / "spec_decode" / "config.pbtxt").read_text(), "spec_decode")
    assert "draft_head" in {t.name for t in config.input}
    assert json.loads(params(config)["draft_heads"]) == {"eagle3-chat": str((out / "draft-heads" / "chat").resolve()),
                                                         "eagle3-edit": str((out / "draft-heads" / "edit").resolve())}
    served = serve_in_process(params(config), monkeypatch)
    for w, cycle in (("chat", A), ("edit", B)):  # each head drafts on the shared target: same tokens, its own AL
        prompt = [1, cycle[0], cycle[5], cycle[2]]
        own, general = served(prompt, f"eagle3-{w}"), served(prompt, None)
        assert own[0] == general[0] == served(prompt, None, k=0)[0]  # lossless: the target's greedy tokens
        assert own[1] > general[1]

    llm = make_repository(RepoRequest(tuning=out / "tuning.json", flavor="llmapi", ckpt=setup / "hf",
                                      draft_ckpt=out / "draft-head", out=tmp_path / "llmapi"))
    assert check_repository(tmp_path / "llmapi") == []
    routes = json.loads((tmp_path / "llmapi" / "trtspec-repo.json").read_text())["routing"]["workloads"]
    for w in ("chat", "edit"):
        cfg = yaml.safe_load((tmp_path / "llmapi" / routes[w]["model"] / "1" / "model.yaml").read_text())
        assert cfg["speculative_config"]["speculative_model_dir"] == str((out / "draft-heads" / w).resolve())
    assert routes["chat"]["model"] != routes["edit"]["model"] and len(llm.models) >= 3
