# memfold: two commands. `make demo` runs the main job, `make test` the whole suite.
# `make check` is the fast tier: unit and contract suites, no Kafka broker, no browser.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test check lint install lock broker-start broker-stop bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -c constraints.txt
	touch $(STAMP)

install: $(STAMP)

# Re-resolve the dependencies to their newest versions in a scratch venv and record them in constraints.txt.
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip
	.venv-lock/bin/python -m pip install --quiet -e '.[dev]'
	{ sed -n '1,2p' constraints.txt; .venv-lock/bin/python -m pip freeze --all --exclude-editable | grep -v '^pip=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .venv-lock

demo: $(STAMP)
	$(VENV)/bin/memfold demo

# import-linter reads packages from disk; the editable install maps memfold.* onto the top-level folders,
# so the contracts are checked over a tree of links laid out as installed.
IMPORT_TREE := build/import-tree
LAYERS      := core projections streams engine service cli client adapters

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) tools/function_imports.py
	rm -rf $(IMPORT_TREE) && mkdir -p $(IMPORT_TREE)/memfold
	ln -s "$(CURDIR)/memfold/__init__.py" $(IMPORT_TREE)/memfold/__init__.py
	for d in $(LAYERS); do ln -s "$(CURDIR)/$$d" $(IMPORT_TREE)/memfold/$$d; done
	cd $(IMPORT_TREE) && PYTHONPATH=. $(CURDIR)/$(VENV)/bin/lint-imports $(CURDIR)/.importlinter

test: $(STAMP) lint
	deploy/kafka/local-broker.sh fetch
	deploy/browser/ensure-chromium.sh
	$(PY) -m pytest -p no:cacheprovider -n 2 --dist loadgroup

check: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -q -n 2 -m "not kafka" tests/unit tests/contract

bench: $(STAMP)
	$(PY) benchmarks/ingest_and_read.py

broker-start: $(STAMP)
	deploy/kafka/local-broker.sh start

broker-stop:
	deploy/kafka/local-broker.sh stop

clean:
	rm -rf $(VENV) .memfold build dist *.egg-info
