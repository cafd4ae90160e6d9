"""train-draft on a tiny random target: it learns, it is seeded and resumable, and its output is
ModelOpt's EAGLE-3 export (loads into ModelOpt's model, re-exports to the same tensors)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tiny_models import tiny_draft_target
from trtspec.drafts.options import TrainDraftOptions
from trtspec.drafts.train import CHECKPOINT, train_draft

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A near-bigram random Llama (a head can learn it quickly), its tokenizer and 20 prompts."""
    return tiny_draft_target(tmp_path_factory.mktemp("draft_target"))


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTSPEC_CACHE", str(tmp_path / "cache"))


def options(prompts, **kw) -> TrainDraftOptions:
    base = dict(workloads=f"p={prompts}", heldout=4, max_new_tokens=16, epochs=3, batch_size=4, eval_every=4,
                checkpoint_every=2, lr=3e-3, draft_vocab_size=256, device="cpu", eval_k=[1, 3])
    return TrainDraftOptions(**{**base, **kw})


def tensors(out):
    return load_file(str(out / "model.safetensors"))


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_training_lowers_the_loss_and_reports_heldout_al(tiny, tmp_path):
    target, prompts = tiny
    summary = train_draft(target, tmp_path / "head", options(prompts, epochs=6))
    losses = [h["loss"] for h in summary["history"] if h["loss"] is not None]
    assert losses[-1] < losses[0] - 0.05
    assert summary["history"][0]["step"] == 0 and summary["history"][0]["al"]  # the untrained head's point
    last = summary["history"][-1]["al"]
    assert set(last) == {"1", "3"} and all(1.0 <= v <= int(k) + 1 for k, v in last.items())
    assert (tmp_path / "head" / "learning_curve.png").stat().st_size > 0
    assert not (tmp_path / "head.train-run").exists()  # the resumable state is gone once out/ is in place
    assert 0.0 < summary["heldout_vocab_coverage"]["p"] <= 1.0  # 256 of the tiny target's 1000 tokens


def test_same_seed_gives_a_bit_identical_head_and_another_seed_does_not(tiny, tmp_path):
    target, prompts = tiny
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        train_draft(target, tmp_path / name, options(prompts, seed=seed, epochs=2))
    assert same(tensors(tmp_path / "a"), tensors(tmp_path / "b"))
    assert not same(tensors(tmp_path / "a"), tensors(tmp_path / "c"))


def test_resuming_an_interrupted_run_gives_the_uninterrupted_head(tiny, tmp_path):
    target, prompts = tiny
    opts = options(prompts, epochs=2)
    train_draft(target, tmp_path / "whole", opts)
    assert train_draft(target, tmp_path / "split", opts, stop_after_steps=3) is None
    assert (tmp_path / "split.train-run" / CHECKPOINT).is_file() and not (tmp_path / "split").exists()
    summary = train_draft(target, tmp_path / "split", opts)
    assert same(tensors(tmp_path / "whole"), tensors(tmp_path / "split"))
    whole = json.loads((tmp_path / "whole" / "training.json").read_text())
    assert [h["loss"] for h in summary["history"]] == [h["loss"] for h in whole["history"]]


def test_the_output_is_modelopts_export_as_midlayer_and_loads_into_modelopts_model(tiny, tmp_path):
    from transformers import AutoModelForCausalLM

    from trtspec.drafts import head

    target, prompts = tiny
    opts = options(prompts, epochs=1)
    train_draft(target, tmp_path / "head", opts)
    files = {p.name for p in (tmp_path / "head").iterdir()}
    assert files == {"config.json", "model.safetensors", "training.json", "learning_curve.png"}
    config = json.loads((tmp_path / "head" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["draft_vocab_size"] == 256
    assert config["eagle_config"]["use_aux_hidden_state"] is True
    names = set(tensors(tmp_path / "head"))  # the layer as `midlayer.*`, which TensorRT-LLM 1.2 and main both load
    assert "midlayer.self_attn.q_proj.weight" in names and not any(n.startswith("layers.") for n in names)

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    d2t = tensors(tmp_path / "head")["d2t"]
    head.convert(model, opts, d2t, seed=123)  # other initial weights: everything must come from the file
    head.load_head(model, tmp_path / "head")
    (tmp_path / "again").mkdir()
    head.export(model, tmp_path / "again")
    assert same(tensors(tmp_path / "head"), tensors(tmp_path / "again"))
    assert json.loads((tmp_path / "again" / "config.json").read_text()) == config


def test_a_library_error_names_the_field_and_the_cli_the_flag(tiny, tmp_path, capsys):
    from cli_helpers import run_cli
    from trtspec.errors import TrtspecError

    target, prompts = tiny
    with pytest.raises(TrtspecError, match=r"^draft\.train\.heldout: workload 'p' has 20 prompts"):
        train_draft(target, tmp_path / "head", options(prompts, heldout=20))
    code, _, err = run_cli(capsys, "train-draft", "--target", target, "--out", tmp_path / "head",
                           "--workloads", f"p={prompts}", "--heldout", "20", "--device", "cpu")
    assert code == 2 and err.startswith("error: --heldout: workload 'p' has 20 prompts") and err.count("\n") == 1
    assert not (tmp_path / "head").exists()


def test_a_draft_vocabulary_above_the_targets_is_refused_before_the_target_answers(tiny, tmp_path):
    from trtspec.errors import TrtspecError

    target, prompts = tiny
    with pytest.raises(TrtspecError, match=r"^draft\.train\.draft_vocab_size: 2000 exceeds the target's vocabulary"):
        train_draft(target, tmp_path / "head", options(prompts, draft_vocab_size=2000))
    assert not (tmp_path / "cache" / "draft-data").exists()  # refused before the costly regeneration


def test_a_repeated_request_of_a_heldout_prompt_is_not_trained_on(tiny, tmp_path):
    """A traffic log repeats requests (and workloads can share prompts): a copy of a held-out prompt
    in the training set would make the held-out AL measure answers the head was trained on."""
    from transformers import AutoTokenizer

    from trtspec.drafts.data import split_prompts
    from trtspec.errors import TrtspecError

    target, prompts = tiny
    log = tmp_path / "log.jsonl"
    log.write_text(prompts.read_text() * 2)  # every request logged twice
    tok = AutoTokenizer.from_pretrained(target)
    chosen = split_prompts(options(log, workloads=f"p={log},q={prompts}"), tok)
    held = {tuple(ids) for _, ids, h in chosen if h}
    assert len(held) >= 4 and not [ids for _, ids, h in chosen if not h and tuple(ids) in held]
    assert {n for n, _, h in chosen if not h} == {"p", "q"}
    log.write_text(prompts.read_text().splitlines(keepends=True)[0] * 5)  # one request, five times
    with pytest.raises(TrtspecError, match=r"^draft\.train\.heldout: workload 'p': every prompt not held out"):
        split_prompts(options(log, workloads=f"p={log}"), tok)


def test_workloads_over_the_same_problems_hold_out_the_same_tasks():
    """code-edit quotes HumanEval's canonical solutions: a problem held out under `humaneval` must not
    be trained on under `code-edit` (nor the reverse), as the recipes' workloads would have it."""
    from trtspec.drafts.data import split_prompts
    from trtspec.workloads import load_workloads

    class CharTokenizer:  # each prompt renders to its own ids (its characters)
        chat_template = None

        def __call__(self, text):
            return {"input_ids": [ord(c) for c in text]}

    opts = TrainDraftOptions(workloads="chat=mt-bench,code=humaneval,edit=code-edit", samples=12, heldout=2,
                             max_prompt_tokens=10 ** 6)
    task = {(wl.name, tuple(ord(c) for c in s.prompt)): s.id for wl in load_workloads(opts.workloads, samples=12)
            for s in wl.samples}
    rows = [(name, task[name, tuple(ids)], h) for name, ids, h in split_prompts(opts, CharTokenizer())]
    held = {name: {t for n, t, h in rows if n == name and h} for name in ("code", "edit")}
    assert held["code"] == held["edit"] and len(held["code"]) == 2
    assert not [t for n, t, h in rows if not h and t in held["code"]]
    assert sum(not h for n, _, h in rows if n == "edit") == 10  # nothing else dropped


def test_a_prompt_files_held_out_prompts_do_not_depend_on_where_it_lies(tmp_path):
    """The split ranks a file's prompts by each request, not the path or the whole file: a recipe
    moved with its prompt files, or a log grown by new requests, holds out the same prompts."""
    import json
    import shutil

    from trtspec.drafts.data import split_prompts

    class CharTokenizer:
        chat_template = None

        def __call__(self, text):
            return {"input_ids": [ord(c) for c in text]}

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "log.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(20)))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "c").mkdir()  # the same log, grown by new requests: the old ones keep their place
    (tmp_path / "c" / "log.jsonl").write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(21)))
    held = [[ids for _, ids, h in split_prompts(TrainDraftOptions(workloads=f"p={tmp_path / d / 'log.jsonl'}",
                                                                   heldout=4, max_prompt_tokens=10 ** 6),
                                                CharTokenizer()) if h] for d in ("a", "b", "c")]
    assert held[0] == held[1] and len(held[0]) == 4
    new = tuple(ord(c) for c in "q20")  # only the new request can move in, displacing one old one
    assert {tuple(x) for x in held[2]} - {new} <= {tuple(x) for x in held[0]} and len(held[2]) == 4


def test_the_answers_cache_sees_the_tokenizers_eos(tiny, tmp_path):
    """The answers end at the tokenizer's EOS as well as the generation config's (load_target): a
    changed tokenizer EOS must regenerate them, not reuse answers cut at the old one."""
    import shutil
    from collections import Counter

    from trtspec.drafts import data
    from trtspec.drafts.train import load_target

    source, prompts = tiny
    target = shutil.copytree(source, tmp_path / "target")
    opts = options(prompts)

    def answers():
        tok, model, eos = load_target(target, torch.device("cpu"))
        return tok, [e.response for e in data.load_examples(target, model, tok, opts, eos)]

    tok, before = answers()
    common = Counter(t for r in before for t in r[:-1]).most_common(1)[0][0]
    config = json.loads((target / "tokenizer_config.json").read_text())
    (target / "tokenizer_config.json").write_text(json.dumps(config | {"eos_token": tok.convert_ids_to_tokens(common)}))
    _, after = answers()
    assert not [r for r in after if common in r[:-1]]


def test_the_answers_and_written_prompts_are_keyed_by_where_the_target_answers(tiny, monkeypatch):
    """A float32 target on CUDA and on a CPU can answer differently (kernels round differently): the
    caches of its answers and of the prompts it writes must not share entries across device types."""
    from trtspec.drafts import data

    target, prompts = tiny
    keys = []

    def fake_cached(key, field, make, advance=lambda n: None, prefix=""):
        keys.append((field, key))
        return [[2]] * len(key["prompts"]) if field == "responses" else ["t7 t8"] * key["self_prompts"]

    monkeypatch.setattr(data, "cached", fake_cached)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target)
    for device in ("cpu", "meta"):  # meta: a float32 model that is not on the CPU
        model = torch.nn.Linear(1, 1, device=device)
        data.load_examples(target, model, tok, options(prompts, self_prompts=2), {2})
    by_field = {f: [k for g, k in keys if g == f] for f in ("prompts", "responses")}
    for field, (cpu, other) in by_field.items():
        assert cpu["precision"] == other["precision"] == "torch.float32" and cpu != other, field


def test_loss_on_prompt_masks_every_real_prediction_and_never_padding():
    from trtspec.drafts.data import Example
    from trtspec.drafts.train import batch_tensors

    long, short = Example("w", [5, 6, 7], [8, 9, 2], False), Example("w", [5, 6], [8], False)
    off = batch_tensors([long, short], pad=0, device=torch.device("cpu"))["loss_mask"].tolist()
    on = batch_tensors([long, short], pad=0, device=torch.device("cpu"), loss_on_prompt=True)["loss_mask"].tolist()
    # row 0: P=3, T=3 (width 6); row 1: P=2, T=1, then 3 padding positions
    assert off == [[0, 0, 1, 1, 1, 0], [0, 1, 0, 0, 0, 0]]
    assert on == [[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]]


def test_loss_on_prompt_shapes_the_head_its_checkpoint_and_its_cache_key(tiny, tmp_path):
    from trtspec.drafts.cache import head_key
    from trtspec.drafts.train import fingerprint

    target, prompts = tiny
    off, on = options(prompts, epochs=1), options(prompts, epochs=1, loss_on_prompt=True)
    assert head_key(target, off) != head_key(target, on)
    assert fingerprint(off, [], "t") != fingerprint(on, [], "t")
    train_draft(target, tmp_path / "off", off)
    train_draft(target, tmp_path / "on", on)
    assert not same(tensors(tmp_path / "off"), tensors(tmp_path / "on"))


def test_the_head_cache_key_covers_what_the_head_directory_reports_and_nothing_else(tiny):
    """eval_k and eval_every change training.json's held-out AL(K) and the curve: a cached head
    measured at other K must not be returned; checkpoint_every and threads change nothing written."""
    from trtspec.drafts.cache import head_key
    from trtspec.drafts.train import fingerprint

    target, prompts = tiny
    base = options(prompts, epochs=1)
    key = head_key(target, base)
    assert head_key(target, options(prompts, epochs=1, eval_k=[1, 2])) != key
    assert head_key(target, options(prompts, epochs=1, eval_every=5)) != key
    assert head_key(target, options(prompts, epochs=1, checkpoint_every=7, threads=2)) == key
    # the weights do not depend on how they are measured: a cut run resumes at another eval_k
    assert fingerprint(options(prompts, epochs=1, eval_k=[2]), [], "t") == fingerprint(base, [], "t")


def test_a_head_of_two_layers_is_written_as_tensorrt_llms_midlayer_list(tiny, tmp_path):
    """TensorRT-LLM's Eagle3DraftModel holds several layers as the list `midlayer` (`midlayer.{i}.*`;
    main's load_weights maps ModelOpt's `layers.{i}.*` there): `midlayer.*` beside `layers.1.*` loads in
    no version. The runtime refuses such a head by its layer count."""
    import re

    from transformers import AutoModelForCausalLM

    from trtspec.checkpoints.eagle3 import load_eagle3_head
    from trtspec.checkpoints.spec import spec_from_hf
    from trtspec.drafts import head
    from trtspec.errors import TrtspecError

    target, prompts = tiny
    opts = options(prompts, epochs=1, num_layers=2)
    train_draft(target, tmp_path / "head", opts)
    names = set(tensors(tmp_path / "head"))
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    head.convert(model, opts, tensors(tmp_path / "head")["d2t"], seed=123)
    upstream = {re.sub(r"^layers\.(\d+)\.", r"midlayer.\1.", k) for k in model.eagle_module.state_dict()}
    assert names == upstream and "midlayer.1.self_attn.q_proj.weight" in names
    head.load_head(model, tmp_path / "head")  # and back into ModelOpt's module, every tensor
    with pytest.raises(TrtspecError, match="single-layer EAGLE-3 heads only"):
        load_eagle3_head(tmp_path / "head", spec_from_hf(target))


def test_a_cut_run_is_not_resumed_for_another_target_with_the_same_answers(tiny, tmp_path):
    """A fine-tune of the target can answer the prompts alike; its hidden states differ, so a head cut
    while learning the first must not continue on the second: it starts again (as one run would)."""
    import shutil

    from transformers import AutoModelForCausalLM

    from trtspec.drafts.cache import head_key

    target, prompts = tiny
    other = tmp_path / "other"
    shutil.copytree(target, other)
    model = AutoModelForCausalLM.from_pretrained(other, dtype=torch.float32)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(1.001)
    model.save_pretrained(other)
    opts = options(prompts, epochs=1)
    assert head_key(other, opts) != head_key(target, opts)
    assert train_draft(target, tmp_path / "split", opts, stop_after_steps=2) is None
    train_draft(other, tmp_path / "split", opts)
    train_draft(other, tmp_path / "whole", opts)
    answers = [json.loads(p.read_text()) for p in (tmp_path / "cache" / "draft-data").glob("*.json")]
    assert len(answers) == 2 and answers[0] == answers[1]  # the same answers, cached per target
    assert same(tensors(tmp_path / "whole"), tensors(tmp_path / "split"))
