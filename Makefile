# Every target uses the project's virtualenv; `.ci/run` creates it on a fresh clone.
PY := .venv/bin/python
SCRIPTS := $(wildcard components/scripts/*.sh) $(wildcard e2e/*.sh)

.PHONY: check test test-engine lint preview graph box box-down bench

check: lint test

test:
	$(PY) -m pytest

# The real pulumi CLI, a real Kubernetes control plane and the kubernetes provider plugin, built
# (or found cached) by e2e/build-engine.sh; each test in a network namespace of its own, which
# needs root (or user namespaces) and iproute2.
test-engine:
	built="$$(e2e/build-engine.sh control-plane plugins)" && \
	env $$built $(PY) -m pytest -m engine

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

# The lab in a box, whole (e2e/box.py): the stand-ins in a network namespace of their own and the
# whole program's `pulumi up` against them; the box stays up, with the outputs and how to reach
# it printed, until `make box-down`. Needs what test-engine needs.
BOX_DIR ?= .box

box:
	built="$$(e2e/build-engine.sh control-plane plugins)" && \
	env $$built $(PY) -m e2e.box up $(BOX_DIR)

box-down:
	$(PY) -m e2e.box down $(BOX_DIR)

# The first `pulumi up` on an empty box, the no-op second one and a k3s bump: wall times, and what
# the last two made the box do (SSH sessions, chart-repository requests, Proxmox VE writes,
# Kubernetes writes).
bench:
	built="$$(e2e/build-engine.sh control-plane plugins)" && \
	env $$built $(PY) -m e2e.box bench "$$(mktemp -d)"
