"""Fixtures for the CLI tests (the helpers live in ``segments``), and a real sidecar
(``server``: its address) for the data commands."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sidecars import console_script, start_sidecar

from .segments import WrittenLog, write_log

__all__ = ["console_script", "module_server", "server", "written_log"]


@pytest.fixture
def written_log(tmp_path: Path) -> WrittenLog:
    """A closed partition that tierlog wrote: several segments, every codec."""
    return write_log(tmp_path / "topic-0")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A ``tierlog-sidecar`` on a free loopback port: its HOST:PORT."""
    sidecar = start_sidecar(tmp_path / "data")
    try:
        yield sidecar.address
    finally:
        sidecar.kill()


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ``tierlog-sidecar`` for a whole test module whose tests do not disturb each
    other (each on its own topic or group): its HOST:PORT."""
    sidecar = start_sidecar(tmp_path_factory.mktemp("module-server") / "data")
    try:
        yield sidecar.address
    finally:
        sidecar.kill()
