"""Pytest fixtures for tests that need S3: one real MinIO per session, a bucket per test.

Registered for every test folder by ``tests/conftest.py`` (``pytest_plugins``), so the
storage, sidecar and CLI tests share one MinIO process:

- ``minio``: the session's ``MinioServer``; a test may ``stop()``/``kill()`` and
  ``start()`` it (same port, same data); ``s3_bucket`` restarts it if a test left it down;
- ``s3_bucket``: a fresh, empty bucket for this test;
- ``fault_proxy``: a ``FaultProxy`` in front of MinIO, closed after the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fault_proxy import FaultProxy
from tests.support.minio import MinioServer

__all__ = ["fault_proxy", "minio", "s3_bucket"]


@pytest.fixture(scope="session")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """One real MinIO for the session, on a free loopback port."""
    server = MinioServer(tmp_path_factory.mktemp("minio") / "data").start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(minio: MinioServer) -> str:
    """A fresh, empty bucket of the session's MinIO (restarted first if a test left it down)."""
    if not minio.running:  # an earlier test stopped it and failed before restarting it
        minio.start()
    return minio.create_bucket()


@pytest.fixture
def fault_proxy(minio: MinioServer) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of MinIO; point a store's endpoint at ``.url``."""
    proxy = FaultProxy(f"127.0.0.1:{minio.port}")
    yield proxy
    proxy.close()
