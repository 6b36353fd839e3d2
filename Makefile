# Every target runs in the project's virtualenv, `.venv`, which the first one you type makes
# (from requirements-dev.txt, which includes requirements.txt). `make venv` installs the pins
# again, after a `git pull` that changed them; `.ci/run` does that first.
PY := .venv/bin/python
# A file that only requirements-dev.txt installs: a venv made by the README's first run (runtime
# requirements only) gets the development ones too on the first `make check`.
VENV := .venv/bin/pytest
# The shell scripts shellcheck reads: the host scripts, and the test machinery's at any depth of e2e/.
SCRIPTS := $(wildcard components/scripts/*.sh) $(shell find e2e -name '*.sh' 2>/dev/null)

.PHONY: venv check test test-engine lint preview graph box box-shell box-down bench exit-criteria scaling-status

check: lint test

# --no-compile: pip would byte-compile every module of every package (pulumi_kubernetes alone has
# thousands the program never imports); Python compiles what is imported, once, on first use.
venv:
	$(MAKE) $(PY)
	$(PY) -m pip install -q --disable-pip-version-check --no-compile -r requirements-dev.txt

# The run-time requirements alone, as the README's first run installs them: all that the lab's
# own targets (exit-criteria, scaling-status) need. PYTHON is the interpreter the venv is made
# with; macOS's own python3 is 3.9, too old (docs/operations.md, "On a Mac").
PYTHON ?= python3
$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "lab-mgmt needs Python 3.11 or newer, and $(PYTHON) is " + sys.version.split()[0] + ": give make another, for example PYTHON=python3.12 (docs/operations.md, On a Mac)")'
	$(PYTHON) -m venv .venv
	$(PY) -m pip install -q --disable-pip-version-check --no-compile -r requirements.txt

$(VENV):
	$(MAKE) venv

test: $(VENV)
	$(PY) -m pytest

# The real pulumi CLI, a real Kubernetes control plane, the provider plugins and what runs a workload
# cluster for real (the Cluster API core manager, cluster-autoscaler, kube-scheduler), built
# (or found cached) by e2e/engine/build-engine.sh; each test in a network namespace of its own, which
# needs root or user namespaces, and iproute2 (docs/testing.md). The scenarios wait much of their
# time (on a booting guest, a controller, a bound), so ENGINE_WORKERS of them run side by side, each
# scenario's tests on the scenario's worker (tests/conftest.py). Four on two cores since the boxes
# idle cheaper and the scenarios wait more than when three were faster: on 2026-12-05, 11 min 32 s
# with four against 12 min 7 s with three; on 2026-12-06, 12 min 5 s with four against 12 min 55 s
# with five (docs/testing.md, "Where the suite's time goes"). The slowest 25 are listed last.
ENGINE_WORKERS ?= 4

# What the machine must have (packages, Go, user namespaces, disk), checked in seconds before any
# build or virtualenv, with the system's python3 (e2e/engine/preflight.py).
PREFLIGHT := python3 -m e2e.engine.preflight

test-engine:
	$(PREFLIGHT)
	$(MAKE) $(VENV)
	built="$$(e2e/engine/build-engine.sh control-plane plugins workload helm-controller cert-manager operator)" && \
	env $$built $(PY) -m pytest -m engine -n $(ENGINE_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25

lint: $(VENV)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	shellcheck --severity=style $(SCRIPTS)

preview: $(VENV)
	pulumi preview --stack lab --diff

# Phase 1's exit criteria on a workload cluster as it runs (docs/operations.md, "Phase 1's exit
# criteria"): scale-from-zero, 1->3 and back to 0 by its autoscaler, timed, with a report, a
# picture and on failure the autoscaler's log in ~/lab-mgmt-exit-criteria/<time>/, outside the
# clone. EXIT_CRITERIA_FLAGS passes more (--report-dir DIR, --repeat N, --kubeconfig FILE,
# --margin SECONDS). The command exits 0 passed, 1 failed, 2 refused, 3 interrupted or not cleaned
# up; make turns any of the last three into its own 2.
# scaling-status reads what the autoscaler sees and did, and changes nothing. Neither installs the
# development tools, and neither makes the venv before CLUSTER is checked.
CLUSTER_REQUIRED = $(if $(CLUSTER),,$(error CLUSTER is required, for example: make $@ CLUSTER=lab1))

exit-criteria:
	$(CLUSTER_REQUIRED)
	$(MAKE) $(PY)
	$(PY) -m tools.exit_criteria --cluster $(CLUSTER) $(EXIT_CRITERIA_FLAGS)

scaling-status:
	$(CLUSTER_REQUIRED)
	$(MAKE) $(PY)
	$(PY) -m tools.scaling_status --cluster $(CLUSTER) $(SCALING_STATUS_FLAGS)

# docs/graph.md is generated from the program: rewrite it after a change to the graph
# (tests/test_docs.py fails until then).
graph: $(VENV)
	$(PY) tools/graph.py

# The lab in a box, whole (e2e/box/box.py, run by e2e/box/make_box.py): the stand-ins in a
# network namespace of their own and the whole program's `pulumi up` against them; the box stays
# up, with the outputs printed, until `make box-down`. `make box-shell` opens a shell inside it. Needs what test-engine needs.
BOX_DIR ?= .box

box:
	$(PREFLIGHT)
	$(MAKE) $(VENV)
	built="$$(e2e/engine/build-engine.sh control-plane plugins workload)" && \
	env $$built $(PY) -m e2e.box.make_box up $(BOX_DIR)

box-shell: $(VENV)
	$(PY) -m e2e.box.make_box shell $(BOX_DIR)

box-down: $(VENV)
	$(PY) -m e2e.box.make_box down $(BOX_DIR)

# The first `pulumi up` on an empty box, the no-op second one and a k3s bump: wall times, and what
# the last two made the box do (SSH sessions, chart-repository requests, Proxmox VE writes,
# Kubernetes writes); and the no-op against the engine's floor in the same box (e2e/box/management/floor.py:
# a project with the same three plugins and nothing to do), 5 runs of each in turn. Then the
# program's lab1 scaling from zero to one and three and back (e2e/box/workload/lab1_autoscaling.py): when the
# pod went pending, the autoscaler scaled, the Machine and Node came and the pod was scheduled.
bench: $(VENV)
	built="$$(e2e/engine/build-engine.sh control-plane plugins workload)" && \
	env $$built $(PY) -m e2e.box.make_box bench "$$(mktemp -d)"
