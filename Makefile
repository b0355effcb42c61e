# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo test test-fast bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,plot]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) tools/demo.py $(DEMO_ARGS)

test: $(STAMP)
	$(PY) -m pytest tests

test-fast: $(STAMP)
	$(PY) -m pytest tests/unit tests/contract

bench: $(STAMP)
	$(PY) tools/bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
