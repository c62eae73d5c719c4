# Every target creates (once) and reuses a local .venv, and reinstalls the project
# only when pyproject.toml changed, so `make test` alone works on a fresh clone.
# `make demo` installs the library alone (the tutorial needs nothing else); the other
# targets install it with every extra and the test tools (the `dev` extra).
# Packages are installed by uv, which fetches and unpacks them in parallel (the dev extra's
# ~120 packages in about 10 s where pip takes about a minute); pip does it where uv cannot be had.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-library
# an editable install that static tools (mypy, pyright, jedi) see: a path entry, not an import hook
EDITABLE := -e
COMPAT := editable_mode=compat

.PHONY: demo test check bench lint stubs docs clean

$(PY):
	@echo "Creating the virtual environment $(VENV) (once)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv || echo "uv could not be installed: installing with pip"

# install(extras): with uv when the venv has it, else with pip
install = if [ -x $(UV) ]; then $(UV) pip install -q --python $(PY) $(EDITABLE) "$(1)" -C $(COMPAT); \
	else $(PY) -m pip install -q $(EDITABLE) "$(1)" --config-settings $(COMPAT); fi

$(STAMP): pyproject.toml | $(PY)
	@echo "Installing namedarray and its test dependencies into $(VENV) (once, and again when pyproject.toml changes)"
	$(call install,.[dev])
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml | $(PY)
	@echo "Installing namedarray (jax, numpy, optree, opt_einsum) into $(VENV) (once, and again when pyproject.toml changes)"
	$(call install,.)
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) examples/tutorial.py

# Two workers, each taking a whole test module at a time (a fixture built once per module is built once);
# the slowest modules start first (tests/conftest.py says which and why).
WORKERS := -n 2 --dist loadfile --no-loadscope-reorder

test: $(STAMP)
	@echo "Running the test suite on 2 workers (about 10 minutes on 2 cores; a dot per test passed)"
	$(PY) -m pytest $(WORKERS) -q --durations=10 tests

# The quick tier for the edit-test loop: every module but the slowest (marked slow in tests/conftest.py).
check: $(STAMP)
	@echo "Running the quick tier: the suite less its slowest modules (about 1.5 minutes on 2 cores); make test runs all"
	$(PY) -m pytest $(WORKERS) -q -m "not slow" tests

bench: $(STAMP)
	$(PY) benchmarks/run.py

lint: $(STAMP)
	$(PY) -m ruff check namedarray tests benchmarks examples
	$(VENV)/bin/lint-imports

stubs: $(STAMP)
	@echo "Writing the type stubs (namedarray/*.pyi) from the package as it runs"
	$(PY) -m namedarray.surface.stubs

docs: $(STAMP)
	@echo "Building the documentation site into docs/_build/html (warnings are errors)"
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache docs/_build
