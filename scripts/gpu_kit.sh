#!/usr/bin/env bash
# Packs what issue 16's GPU checks need on a lent H100 (the workplace's `device` tool) into .gpu/
# (ignored by git), so that a session that has one spends its 30 device-minutes measuring, not
# setting up. Run here, where pip reaches PyPI; then, on the device, scripts/gpu_checks.sh.
#
# Why these files: the device image (KINDS.md, 2026-11) has Python 3.12, torch 2.11 + CUDA,
# transformers 5.17, numpy 2, pytest, rich, typer, pyyaml, safetensors, scipy, matplotlib; no
# pydantic, ModelOpt, gguf or omegaconf, and nothing can be fetched there. We pin transformers 4.57.6
# (5.x drops rope_theta from ModelOpt's export), which wants huggingface-hub < 1 and tokenizers <= 0.23.0,
# so those travel too and shadow the image's (gpu_checks.sh puts them first on PYTHONPATH).
# SmolLM2's GGUF (98 MB) is larger than one call may carry (64 MiB with the working tree), so it
# travels in three parts over three calls of one warm lease (a warm machine keeps what earlier calls
# brought; it is given back after 30 s idle, so the calls must follow each other at once):
#
#   run(carry=[".gpu/whl", ".gpu/smol.ac", ".gpu/smol.sha256"], command="bash scripts/gpu_checks.sh env")
#   run(carry=[".gpu/smol.aa"], command="bash scripts/gpu_checks.sh")            # receives a part
#   run(carry=[".gpu/smol.ab"], command="bash scripts/gpu_checks.sh tests")      # all parts: SmolLM2 too
#   run(command="bash scripts/gpu_checks.sh profile cost")                       # ~8 min, 8B-shaped
#   run(command="bash scripts/gpu_checks.sh compile")
#   run(command="bash scripts/gpu_checks.sh train")                              # again if cut short
#
# Without the GGUF parts every check still runs on random-weight models (SmolLM2's are skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
KIT=.gpu
rm -rf "$KIT" && mkdir -p "$KIT/whl"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform any)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d "$KIT/whl" pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection gguf==0.19.0 \
    transformers==4.57.6 huggingface-hub==0.36.2 tokenizers==0.22.2 nvidia-modelopt==0.47.0 omegaconf==2.3.0 \
    "pulp<4"
# omegaconf's antlr4 runtime exists only as an sdist: build its (pure-Python) wheel here
"$PY" -m pip wheel -q --no-deps -w "$KIT/whl" antlr4-python3-runtime==4.9.3
# the wheels must install for the device's Python, offline, as gpu_checks.sh installs them
"$PY" -m pip install -q --dry-run --no-index --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" --target "$KIT/dry" "$KIT"/whl/*.whl
rm -rf "$KIT/dry"
gguf=$("$PY" -c "from trtspec.checkpoints.default_model import gguf_path; print(gguf_path())")
split -b 38M "$gguf" "$KIT/smol."
sha256sum "$gguf" | cut -d' ' -f1 > "$KIT/smol.sha256"
du -sh "$KIT"/whl "$KIT"/smol.a?
