"""Fixtures every test folder can use (each folder's own conftest adds its own)."""

import pytest

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
