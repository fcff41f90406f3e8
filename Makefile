# Two commands do all the set-up on a fresh machine with only python3:
#   make lab   -> bootstraps .venv, installs, opens JupyterLab on notebooks/
#   make test  -> bootstraps .venv, installs, runs every test (lint, types, pytest, notebooks)
#   make model -> bootstraps .venv, builds the local model server (llama-server + SmolLM2-135M) into
#                 ~/.cache/harness-lab-model (once; needs cmake and a C++ compiler); the `model` tests use it
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Keep Jupyter's config, runtime and data dirs out of ~ during tests and in the lab.
SCRATCH := $(CURDIR)/.scratch
# The local model's cache (make model) is outside the repository, where ~ says; the scratch HOME of the tests
# must not move it into .scratch/, so they are told where it is.
MODEL_CACHE := $(or $(HARNESS_LAB_MODEL_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/harness-lab-model)
JUPYTER_ENV := HOME=$(SCRATCH)/home JUPYTER_PLATFORM_DIRS=1 JUPYTER_CONFIG_DIR=$(SCRATCH)/jupyter-config \
               HARNESS_LAB_MODEL_CACHE=$(MODEL_CACHE)

.PHONY: lab test lint experiment bench clean model

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[lab,test]'
	$(BIN)/python -m ipykernel install --prefix $(VENV) --name python3 --display-name "Python 3 (harness-lab)" >/dev/null
	touch $(STAMP)

lab: $(STAMP)
	mkdir -p $(SCRATCH)/home $(SCRATCH)/jupyter-config
	# saving a lesson keeps its stored form where a run changed only volatile values (no git churn)
	ln -sf $(CURDIR)/notebooks/jupyter_server_config.py $(SCRATCH)/jupyter-config/jupyter_server_config.py
	$(JUPYTER_ENV) $(BIN)/jupyter lab --notebook-dir=notebooks --ip 127.0.0.1 $(if $(filter 0,$(shell id -u)),--allow-root,)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: $(STAMP) lint
	mkdir -p $(SCRATCH)/home
	$(JUPYTER_ENV) $(BIN)/python -m pytest
	# the committed lessons' stored outputs, re-executed and compared (volatile values sanitized)
	$(JUPYTER_ENV) $(BIN)/python -m pytest -p no:cacheprovider --nbval notebooks/ --nbval-sanitize-with notebooks/nbval_sanitize.cfg

model: $(STAMP)
	HARNESS_LAB_MODEL_CACHE=$(MODEL_CACHE) $(BIN)/harness-lab model build

experiment: $(STAMP)
	$(BIN)/harness-lab experiment --output results/experiment

clean:
	rm -rf $(VENV) $(SCRATCH) build dist *.egg-info
