# Two commands set everything up on a fresh machine:
#   make run    install into .venv, then run mean-pipeline on whatever hardware is here
#   make test   install into .venv, then lint and run the tests
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
comma := ,
# GPU machines (nvidia-smi present) also get the GPU stack (cupy, dask-cuda, cudf) built for the
# CUDA their driver runs: the cuda13 or cuda12 extra, as tools/cuda-extra.sh reads it from
# nvidia-smi. An EXTRAS given to make or in the environment wins (e.g. EXTRAS=cuda12,test).
ifeq ($(origin EXTRAS),undefined)
EXTRAS := $(addsuffix $(comma),$(shell $(SHELL) tools/cuda-extra.sh))test
endif
ARGS ?=
# Test processes (pytest-xdist): most tests wait on subprocesses and clusters starting, so two
# overlap well even on two cores; more cores, up to four. Idle processes take queued tests
# from busy ones (worksteal): the slowest tests do not end up queued behind each other.
TEST_PROCESSES ?= $(shell $(PYTHON) -c "import os; print(min(4, max(2, len(os.sched_getaffinity(0)))))")
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
# cupy-cuda12x and cupy-cuda13x (cudf-cu12 and cudf-cu13, ...) install the same modules: a venv
# holding another CUDA's GPU stack (or the old gpu extra's, CUDA 12) is rebuilt, not overlaid.
CUDA_EXTRA := $(firstword $(filter cuda%,$(subst $(comma), ,$(EXTRAS))))

.PHONY: install run test lint bench docs clean

$(STAMP): pyproject.toml
	@for stamp in $(VENV)/.installed-*; do case "$${stamp##*/}" in \
	    *$(CUDA_EXTRA)*) ;; \
	    *gpu*|*cuda1[0-9]*) echo "$(VENV) holds another CUDA's GPU stack: rebuilding it"; \
	        rm -rf $(VENV); break;; \
	esac; done
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

install: $(STAMP)

run: install
	$(PY) cli.py run mean-pipeline $(ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(PY) tools/long_modules.py

test: lint
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist worksteal $(ARGS)

# The benchmarks measure daskgpu against its peers (Polars, DuckDB, fast-histogram, SciPy):
# the bench extra, never part of the install that runs or tests daskgpu.
$(VENV)/.installed-bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[$(EXTRAS),bench]"
	touch $@

bench: $(VENV)/.installed-bench
	$(PY) -m benchmarks.mean $(ARGS)

# The documentation site: docs/ built by MkDocs into site/; --strict fails on a broken link, a
# missing anchor or a page left out of the navigation.
$(VENV)/.installed-docs: $(STAMP)
	$(PY) -m pip install --quiet -e ".[$(EXTRAS),docs]"
	touch $@

docs: $(VENV)/.installed-docs
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache site
