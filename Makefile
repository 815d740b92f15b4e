# `make run`: set up what is missing, say how to put `cairn` on PATH, then run a node with its embedded defaults.
# `make shim`: opt-in, install a `cairn` shim into ~/.local/bin (SHIM_DIR=… elsewhere) that runs this checkout's.
# `make test`: the same set-up, then the format check, the linter and the type checker, then the whole test suite.
# `make lint`: those three tools only. `make lock`: re-resolve both locks with pip-tools (existing pins are kept).
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
STAMP    := $(VENV)/.installed
PIP_LOCK := requirements-pip.lock
COMPILE  := $(VENV)/bin/pip-compile --quiet --generate-hashes --no-emit-index-url --no-emit-find-links

SHIM_DIR ?= $(HOME)/.local/bin
CAIRN    := $(abspath $(VENV))/bin/cairn

.PHONY: run shim test lint setup parts lock kubo java debs faketime chromium clean

run: setup
	@command -v cairn >/dev/null 2>&1 || echo "cairn is not on PATH: run 'make shim' (a cairn shim in $(SHIM_DIR)), or alias cairn=$(CAIRN)"
	$(VENV)/bin/cairn node start

# A two-line script, not a link: it runs this checkout's venv whatever the caller's Python.
shim: setup
	@mkdir -p $(SHIM_DIR)
	@printf '#!/bin/sh\nexec "%s" "$$@"\n' "$(CAIRN)" > $(SHIM_DIR)/cairn
	@chmod 755 $(SHIM_DIR)/cairn
	@echo "installed $(SHIM_DIR)/cairn -> $(CAIRN)"
	@case ":$$PATH:" in *":$(SHIM_DIR):"*) ;; *) echo "$(SHIM_DIR) is not on PATH: add it, e.g. export PATH=\"$(SHIM_DIR):\$$PATH\"";; esac

# Three workers, a test file each at a time (its module fixtures shared as before). On 2 cores the suite is CPU-bound
# and takes about as long as in one process (`pytest -p no:xdist`), but no file's state leaks into most others.
test: lint
	$(PY) -m pytest -q -n 3 --dist loadfile

# Configured in pyproject.toml ([tool.ruff], [tool.mypy]); all three must pass before the suite runs.
lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The parts run side by side (the Kubo build is CPU, the rest mostly downloads); the two Debian packages one after
# the other, since apt holds one lock.
setup:
	@$(MAKE) --no-print-directory -j3 parts

parts: $(STAMP) kubo java debs

debs:
	@bash scripts/setup/faketime.sh
	@bash scripts/setup/chromium.sh

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall only when a lock or the project metadata changes. Every package is hash-checked: first pip, setuptools
# and pip-tools from their own lock, then the resolved set; the project itself last, without dependencies and without
# build isolation (so the pinned setuptools builds it, not whatever PyPI serves that day).
$(STAMP): $(PY) $(PIP_LOCK) requirements.lock pyproject.toml
	$(PY) -m pip install -q --require-hashes -r $(PIP_LOCK)
	$(PY) -m pip install -q --require-hashes -r requirements.lock
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# requirements.lock: pyproject's dependencies and its test extra; requirements-pip.lock: requirements-pip.in.
lock:
	$(COMPILE) --extra test --strip-extras -o requirements.lock pyproject.toml
	$(COMPILE) --allow-unsafe --strip-extras -o $(PIP_LOCK) requirements-pip.in

# Built once into ~/.cache/cairn/kubo/<version>/ (see scripts/setup/kubo.sh for why not `go install`).
kubo:
	@bash scripts/setup/kubo.sh >/dev/null

java:
	@bash scripts/setup/java.sh

# libfaketime, for the determinism property test (tests/integration/test_query_determinism.py).
faketime:
	@bash scripts/setup/faketime.sh

# Debian's chromium, for the web page's browser test (tests/integration/test_web_page.py): Playwright drives it.
chromium:
	@bash scripts/setup/chromium.sh

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
