"""Fixtures every test folder can use (each folder's own conftest adds its own)."""

import os

import pytest

# A test process holds gRPC clients and servers, and forks children with a
# ``preexec_fn`` (PySpark's JVM gateway among them): with gRPC's fork handlers on (grpcio's
# default), the child restarts gRPC's poller, ``subprocess`` closes the poller's epoll fd
# before the ``exec``, and the child aborts (``epoll_wait error: Bad file descriptor``,
# grpc/grpc#43055; a full run of the suite lost its Spark session so). Every child here
# execs at once, the case gRPC's switch is for. grpcio reads it on import: set before any
# test imports it.
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

# tests/support/s3_fixtures.py: MinIO; tests/support/kube.py: ``control_plane``, one
# etcd + kube-apiserver for the session; tests/support/spark.py: ``spark``, the one
# SparkSession of the run.
pytest_plugins = ["tests.support.s3_fixtures", "tests.support.kube", "tests.support.spark"]


# The session fixtures that start a tool compiled from Go source (MinIO; etcd and
# kube-apiserver). A test using one, directly or through other fixtures, is marked
# ``go_tools``: ``make test`` runs it once the compiles are done and runs the others while
# they go on. A test that reaches such a tool another way (``request.getfixturevalue``,
# helm) carries the mark itself; TIERLOG_WITHOUT_COMPILED_TOOLS makes a forgotten mark
# fail in the early run every time.
GO_TOOL_FIXTURES = frozenset({"minio", "control_plane"})


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if GO_TOOL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.go_tools)
