"""The partition plan: stable under scale-up, moves only a leaving broker's partitions."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.operator.assignment import Assignment, plan
from tierlog.sidecar.ownership import Broker, Ownership
from tierlog.storage.checkpoints import TopicPartition


def brokers(count: int) -> dict[int, str]:
    return {node: f"b{node}:9092" for node in range(count)}


def test_new_partitions_go_where_the_sidecars_hash_puts_them() -> None:
    assignment = plan(brokers(3), {"orders": 5, "audit": 2})
    ownership = Ownership(0, tuple(Broker(node, address) for node, address in brokers(3).items()))
    for topic, owners in assignment.topics.items():
        for partition, owner in enumerate(owners):
            assert ownership.owner(TopicPartition(topic, partition)).node_id == owner


def test_scale_up_moves_nothing_and_new_partitions_may_use_new_brokers() -> None:
    before = plan(brokers(2), {"orders": 6})
    after = plan(brokers(4), {"orders": 8}, before)
    assert after.topics["orders"][:6] == before.topics["orders"]
    start = zlib.crc32(b"orders")
    assert after.topics["orders"][6:] == ((start + 6) % 4, (start + 7) % 4)


def test_leaving_brokers_lose_exactly_their_partitions_to_the_least_loaded() -> None:
    before = Assignment(brokers(3), {"t": (0, 1, 2, 2, 2, 0)})
    after = plan(brokers(3), {"t": 6}, before, leaving=[2])
    assert after.topics["t"][:2] == (0, 1)
    assert after.topics["t"][5] == 0
    assert 2 not in after.topics["t"]
    assert sorted(after.topics["t"]).count(0) == 3 and sorted(after.topics["t"]).count(1) == 3
    assert after.brokers == brokers(3)  # leaving brokers stay listed until they are gone


def test_no_staying_broker_is_an_error() -> None:
    with pytest.raises(ValueError, match="no broker"):
        plan(brokers(1), {"t": 1}, leaving=[0])


def test_json_round_trip() -> None:
    assignment = plan(brokers(3), {"orders": 4})
    assert Assignment.from_json(assignment.to_json()) == assignment
    with pytest.raises(ValueError, match="version"):
        Assignment.from_json('{"version": 9, "brokers": {}, "topics": {}}')


def test_owned_by_lists_a_brokers_partitions() -> None:
    assignment = Assignment(brokers(2), {"a": (0, 1, 0), "b": (1,)})
    assert assignment.owned_by(0) == [("a", 0), ("a", 2)]
    assert assignment.owned_by(1) == [("a", 1), ("b", 0)]


@given(
    counts=st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 20), min_size=1),
    start=st.integers(1, 6),
    end=st.integers(1, 6),
)
def test_every_partition_has_one_staying_owner_and_survivors_keep_theirs(
    counts: dict[str, int], start: int, end: int
) -> None:
    before = plan(brokers(start), counts)
    leaving = range(end, start)
    after = plan(brokers(max(start, end)), counts, before, leaving=leaving)
    for topic, count in counts.items():
        owners = after.topics[topic]
        assert len(owners) == count
        assert all(owner < end for owner in owners)
        for partition, owner in enumerate(before.topics[topic]):
            if owner < end:
                assert owners[partition] == owner
