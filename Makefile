# memfold: two commands. `make demo` runs the main job, `make test` the whole suite.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint install broker-start broker-stop bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/memfold demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP) lint
	deploy/kafka/local-broker.sh fetch
	$(PY) -m pytest -p no:cacheprovider

bench: $(STAMP)
	$(PY) benchmarks/ingest_and_read.py

broker-start: $(STAMP)
	deploy/kafka/local-broker.sh start

broker-stop:
	deploy/kafka/local-broker.sh stop

clean:
	rm -rf $(VENV) .memfold build dist *.egg-info
