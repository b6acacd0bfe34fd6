# Two commands set everything up on a fresh machine:
#   make run    install into .venv, then run mean-pipeline on whatever hardware is here
#   make test   install into .venv, then lint and run the tests
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# GPU machines (nvidia-smi present) also get the GPU stack: cupy, dask-cuda, cudf.
EXTRAS ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo gpu,test || echo test)
ARGS ?=
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: install run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

install: $(STAMP)

run: install
	$(PY) cli.py run mean-pipeline $(ARGS)

lint: install
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest $(ARGS)

bench: install
	$(PY) benchmarks/bench_mean.py $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache
