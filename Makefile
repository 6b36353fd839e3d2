# Every target uses the project's virtualenv; `.ci/run` creates it on a fresh clone.
PY := .venv/bin/python
SCRIPTS := $(wildcard components/scripts/*.sh)

.PHONY: check test lint preview graph

check: lint test

test:
	$(PY) -m pytest

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	shellcheck --severity=style $(SCRIPTS)

preview:
	pulumi preview --stack lab --diff

# docs/graph.md is generated from the program: rewrite it after a change to the graph
# (tests/test_docs.py fails until then).
graph:
	$(PY) tools/graph.py
