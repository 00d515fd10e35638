"""Both partition-state stores, so every contract test runs against each: a directory
here, and a namespace of the session's real API server (tests/support/kube.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.kube import ControlPlane
from tests.support.state_stores import open_store
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
) -> Callable[..., tuple[PartitionStateStore, str, str]]:
    """A function opening a fresh store of this parameter's kind: (store, kind, where).
    Each call on a kind returns a new store object over the same state."""
    kind = str(request.param)
    if kind == "local":
        where = str(tmp_path / "state")
    else:
        plane: ControlPlane = request.getfixturevalue("control_plane")
        where = f"{plane.kubeconfig} {plane.create_namespace('state')} demo"

    def open_it(clock: Clock | None = None) -> tuple[PartitionStateStore, str, str]:
        return open_store(kind, where, clock or Clock()), kind, where

    return open_it
