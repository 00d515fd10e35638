"""Both partition-state stores, so every contract test runs against each: a directory
here, and a namespace of the session's real API server (tests/support/kube.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.kube import ControlPlane
from tests.support.state_stores import open_store
from tierlog.partition_state.kube_watch import WATCH_THREAD
from tierlog.partition_state.store import PartitionStateStore


class Clock:
    """Time the test moves by hand: leases record it."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["local", pytest.param("kube", marks=pytest.mark.go_tools)])
def store_at(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., tuple[PartitionStateStore, str, str]]]:
    """A function opening a fresh store of this parameter's kind: (store, kind, where).
    Each call on a kind returns a new store object over the same state. Every store it
    opened is closed at the end (on Kubernetes, its watch), and a watch of the test's
    own making still running then fails the test: it would outlive the API server and
    log each refused reconnection until the session ends."""
    kind = str(request.param)
    if kind == "local":
        where = str(tmp_path / "state")
    else:
        plane: ControlPlane = request.getfixturevalue("control_plane")
        where = f"{plane.kubeconfig} {plane.create_namespace('state')} demo"
    opened: list[PartitionStateStore] = []
    watching_before = set(_watches())

    def open_it(clock: Clock | None = None) -> tuple[PartitionStateStore, str, str]:
        opened.append(open_store(kind, where, clock or Clock()))
        return opened[-1], kind, where

    yield open_it
    for store in opened:
        store.close()
    left = set(_watches()) - watching_before
    assert not left, f"{len(left)} store watch(es) left running: close() the store"


def _watches() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == WATCH_THREAD]
