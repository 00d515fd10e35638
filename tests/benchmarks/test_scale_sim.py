"""The scale simulation's quick mode (``scale_sim --quick``) on both stores: what it
measures holds the invariants docs/SCALE.md builds on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.benchmarks.scale_sim import (
    KUBE_OBJECT_LIMIT_BYTES,
    parse_args,
    run_scenario,
    settings_of,
)
from tests.support.kube import ControlPlane
from tests.support.state_stores import open_store
from tierlog.partition_state.store import PartitionStateStore
from tierlog.tools.progress import no_progress


@pytest.fixture(params=["local", pytest.param("kube", marks=pytest.mark.go_tools)])
def fresh_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, PartitionStateStore]]:
    """A fresh store of each kind, closed at the end (on Kubernetes, its watch)."""
    kind = str(request.param)
    if kind == "local":
        store = open_store(kind, str(tmp_path / "state"))
    else:
        plane: ControlPlane = request.getfixturevalue("control_plane")
        store = open_store(kind, f"{plane.kubeconfig} {plane.create_namespace('scale')} sim")
    yield kind, store
    store.close()


def test_a_failed_broker_is_absorbed_in_batches_and_no_object_nears_the_limit(
    fresh_store: tuple[str, PartitionStateStore],
) -> None:
    kind, store = fresh_store
    args = parse_args(["--quick"])
    settings = settings_of(args)
    (brokers,), (partitions,) = args.brokers, args.partitions

    figures = run_scenario(store, kind, brokers, partitions, settings, no_progress)

    assert figures.victim_led > 0
    # An idle poll reads the journal of changes and the leases, a first one every part.
    assert figures.poll_reads == 2 < figures.first_poll_reads
    assert figures.unled_after_failure == 0  # every partition it led is led again
    assert figures.unled_after_return == 0
    # A third of the limit: a part holds PARTITIONS_PER_PART partitions of any size.
    assert 0 < figures.largest_object_bytes < KUBE_OBJECT_LIMIT_BYTES // 3
    # Batches: the failover writes each topic's part at most once, and the return one
    # batch per leader and topic, not one write per partition.
    assert 0 < figures.failover_writes <= figures.topics
    assert figures.isr_expansions > figures.isr_expansion_writes
    assert figures.isr_expansion_writes <= (brokers - 1) * figures.topics
    assert 0 < figures.preferred_writes <= figures.topics
