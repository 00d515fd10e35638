# The two entry points of the README. Both set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint types unit unit-no-go-tools unit-go-tools tools fetched-tools compiled-tools bench stubs crds cluster cluster-tools cluster-down e2e

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# The JVM side of the Spark source (tierlog.pipeline.jars): rebuilt when its sources change.
SPARK_JAR := pipeline/tierlog/pipeline/jars/tierlog-spark.jar
$(SPARK_JAR): $(STAMP) pipeline/jvm/pom.xml $(shell find pipeline/jvm/src -type f)
	$(BIN)/python -m tierlog.pipeline.jars
	touch $@

## demo: the main job: a sidecar on a fresh temp dir, driven through the client, a topic offloaded to its tier and read back
demo: $(STAMP) $(SPARK_JAR)
	$(BIN)/tierlog demo

## test: every check: lint, types, unit, integration and interop tests, then the e2e tests on a one-node cluster
# Stage by stage (tests/tools/stages.py), with the time of each printed at the end. The
# tools compiled from Go source (then the e2e stage's) build in the background at the
# lowest CPU priority while lint, types and the unit tests that need none of them run;
# the unit tests that do (marked go_tools) wait for them (docs/BENCHMARKS.md, cold run).
test: $(STAMP)
	$(BIN)/python tests/tools/stages.py '&compiled-tools,cluster-tools' fetched-tools \
		lint types unit-no-go-tools wait:compiled-tools unit-go-tools e2e

tools: $(STAMP)
	$(BIN)/python tests/tools/bootstrap.py

fetched-tools: $(STAMP)
	$(BIN)/python tests/tools/bootstrap.py --fetched

compiled-tools: $(STAMP)
	$(BIN)/python tests/tools/bootstrap.py --compiled

## cluster: a one-node Kubernetes here (docs/KUBERNETES.md); eval "$$(make -s cluster)" sets KUBECONFIG, TIERLOG_IMAGE, PATH
cluster: $(STAMP) cluster-tools
	$(BIN)/python -m tests.support.cluster up

# Progress to stderr: `make -s cluster`'s stdout carries only the export lines.
cluster-tools: $(STAMP)
	$(BIN)/python tests/tools/bootstrap.py --cluster >&2

## cluster-down: stop the node and remove its state
cluster-down: $(STAMP)
	$(BIN)/python -m tests.support.cluster down

## e2e: the end-to-end tests on the one-node cluster (started and stopped unless one runs)
e2e: $(STAMP) cluster-tools
	$(BIN)/pytest -m e2e tests/e2e

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

types: $(STAMP)
	$(BIN)/mypy

# Two pytest-xdist workers, each taking a whole test file at a time (its module-scoped
# brokers stay in one process): most tests wait on brokers, elections and deadlines,
# and those waits overlap. The slowest tests are listed at the end.
UNIT_PYTEST = $(BIN)/pytest -n 2 --dist loadfile --durations=30

unit: $(STAMP) $(SPARK_JAR)
	$(UNIT_PYTEST)

# make unit in two parts: make test runs the first while the Go tools compile.
unit-no-go-tools: $(STAMP) $(SPARK_JAR)
	TIERLOG_WITHOUT_COMPILED_TOOLS=1 $(UNIT_PYTEST) -m 'not e2e and not go_tools'

unit-go-tools: $(STAMP) $(SPARK_JAR)
	$(UNIT_PYTEST) -m 'go_tools and not e2e'

bench: $(STAMP) $(SPARK_JAR)
	$(BIN)/python tests/benchmarks/storage_bench.py

## stubs: regenerate the committed gRPC stubs (sidecar/tierlog/api/v1) from proto/
stubs: $(STAMP)
	$(BIN)/python -m tierlog.api.generate

## crds: rewrite the CRD YAML (charts/tierlog/files/crds, deploy/base/crds) from tierlog.operator.crds
crds: $(STAMP)
	$(BIN)/python -m tierlog.operator.crds
