# Quick start: `make demo` and `make test` each do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) bench/demo.py
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/gemm.py --sizes 512 1024 --demo

test: $(STAMP)
	$(PY) -m pytest tests

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) bench/gemm.py
	$(PY) bench/compile_time.py
	$(PY) bench/models.py --json bench-models.json
	$(PY) bench/ops.py --json bench-ops.json

clean:
	rm -rf $(VENV) build *.egg-info
