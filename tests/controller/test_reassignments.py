"""Reassignment plans started in the store, on both stores."""

from __future__ import annotations

from tests.controller.conftest import OpenStore
from tierlog.controller.reassignments import IN_PROGRESS, reassignment_progress, start_reassignments
from tierlog.partition_state.model import PartitionState
from tierlog.storage.topic_partition import TopicPartition


def test_a_plan_is_started_in_one_write_per_part_of_each_topic(store_at: OpenStore) -> None:
    """A plan moving every partition of two topics (as ``kafka-reassign-partitions``
    makes to empty a broker) widens each topic's replica sets in one batch, a write per
    part touched; before, each partition's state went in a write of its own."""
    store, _, _ = store_at()
    for topic in ("orders", "clicks"):
        store.create_topic(topic, dict.fromkeys(range(20), PartitionState.new((1, 2))))
    plan = {TopicPartition(t, p): (3, 2) for t in ("orders", "clicks") for p in range(20)}
    writes = store.part_writes

    start_reassignments(store, plan, brokers={1, 2, 3})

    assert store.part_writes - writes == 2
    assert set(reassignment_progress(store, plan).values()) == {IN_PROGRESS}
    assert {s.replicas for s in store.read_topic("orders").values()} == {(3, 2, 1)}
