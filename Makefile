# sepbench: `make demo` runs the quickest meaningful experiment, `make test` the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: demo test bench bench-full clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python requirements.txt requirements-dev.txt pyproject.toml
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

demo: $(STAMP)
	$(BIN)/python -m sepbench.demo

test: $(STAMP)
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y chromium; } \
		|| echo "note: the report's browser test needs Debian's chromium (apt-get install -y chromium)"
	$(BIN)/python -m pytest -q -n 2

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py --quick

bench-full: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache sepbench.db*
