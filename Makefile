# `make run`: set up what is missing, then run a node with its embedded defaults.
# `make test`: the same set-up, then the whole test suite.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test setup kubo java faketime clean

run: setup
	$(VENV)/bin/cairn node start

test: setup
	$(PY) -m pytest -q

setup: $(STAMP) kubo java faketime

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Reinstall only when the pinned set or the project metadata changes.
$(STAMP): $(PY) requirements.lock pyproject.toml
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# Built once into ~/.cache/cairn/kubo/<version>/ (see scripts/setup/kubo.sh for why not `go install`).
kubo:
	@bash scripts/setup/kubo.sh >/dev/null

java:
	@bash scripts/setup/java.sh

# libfaketime, for the determinism property test (tests/integration/test_query_determinism.py).
faketime:
	@bash scripts/setup/faketime.sh

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
