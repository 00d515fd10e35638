"""The partition plan: stable under scale-up; a leaving broker's partitions are released to
nobody, then handed over once it is drained."""

from __future__ import annotations

import json
import zlib
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.broker.ownership import Broker, Ownership, parse_assignment
from tierlog.operator.assignment import NO_OWNER, Assignment, hand_over, plan, stamped
from tierlog.storage.topic_partition import TopicPartition


def brokers(count: int) -> dict[int, str]:
    return {node: f"b{node}:9092" for node in range(count)}


def test_new_partitions_go_where_the_sidecars_hash_puts_them() -> None:
    assignment = plan(brokers(3), {"orders": 5, "audit": 2})
    ownership = Ownership(0, tuple(Broker(node, address) for node, address in brokers(3).items()))
    for topic, owners in assignment.topics.items():
        for partition, owner in enumerate(owners):
            assert ownership.owner(TopicPartition(topic, partition)) == Broker(
                owner, f"b{owner}:9092"
            )


def test_scale_up_moves_nothing_and_new_partitions_may_use_new_brokers() -> None:
    before = plan(brokers(2), {"orders": 6})
    after = plan(brokers(4), {"orders": 8}, before)
    assert after.topics["orders"][:6] == before.topics["orders"]
    start = zlib.crc32(b"orders")
    assert after.topics["orders"][6:] == ((start + 6) % 4, (start + 7) % 4)


def test_leaving_brokers_release_exactly_their_partitions_to_nobody() -> None:
    before = Assignment(brokers(3), {"t": (0, 1, 2, 2, 2, 0)})
    after = plan(brokers(3), {"t": 6}, before, leaving=[2])
    assert after.topics["t"] == (0, 1, NO_OWNER, NO_OWNER, NO_OWNER, 0)
    assert after.released == {"t": {2: 2, 3: 2, 4: 2}}
    assert after.unowned() == [("t", 2), ("t", 3), ("t", 4)]
    assert after.brokers == brokers(3)  # leaving brokers stay listed until they are gone
    # planning again keeps them released: only hand_over gives them owners
    assert plan(brokers(3), {"t": 6}, after, leaving=[2]) == after
    assert plan(brokers(3), {"t": 6}, after) == after


def test_hand_over_waits_for_the_releasing_broker_to_be_drained() -> None:
    released = plan(brokers(3), {"t": 6}, Assignment(brokers(3), {"t": (0, 1, 2, 2, 2, 0)}), [2])
    assert hand_over(released, staying=[0, 1]) == released
    handed = hand_over(released, staying=[0, 1], drained=[2])
    assert handed.topics["t"][:2] == (0, 1) and handed.topics["t"][5] == 0
    assert sorted(handed.topics["t"]).count(0) == 3 and sorted(handed.topics["t"]).count(1) == 3
    assert handed.released == {} and handed.unowned() == []


def test_a_called_off_release_goes_back_to_the_releasing_broker() -> None:
    released = plan(brokers(3), {"t": 3}, Assignment(brokers(3), {"t": (2, 0, 2)}), [2])
    assert hand_over(released, staying=[0, 1, 2]).topics["t"] == (2, 0, 2)


def test_no_staying_broker_is_an_error() -> None:
    with pytest.raises(ValueError, match="no broker"):
        plan(brokers(1), {"t": 1}, leaving=[0])


def test_json_round_trip() -> None:
    assignment = plan(brokers(3), {"orders": 4})
    assert Assignment.from_json(assignment.to_json()) == assignment
    released = plan(brokers(3), {"orders": 4}, assignment, leaving=[assignment.topics["orders"][0]])
    assert Assignment.from_json(released.to_json()) == released
    # what the sidecars read: NO_OWNER for a released partition
    assert NO_OWNER in json.loads(released.to_json())["topics"]["orders"]
    with pytest.raises(ValueError, match="version"):
        Assignment.from_json('{"version": 9, "brokers": {}, "topics": {}}')


NOW_MS = 1_764_000_000_000


def test_a_plan_keeps_its_generation_until_it_changes() -> None:
    first = stamped(plan(brokers(2), {"orders": 4}), None, NOW_MS)
    assert first.generation == NOW_MS
    written = Assignment.from_json(first.to_json())  # as the next pass reads it back
    assert written.generation == NOW_MS
    again = stamped(plan(brokers(2), {"orders": 4}, written), written, NOW_MS + 5000)
    assert again == first  # the same document: the ConfigMap and the brokers keep it

    grown = stamped(plan(brokers(3), {"orders": 4}, written), written, NOW_MS + 5000)
    assert grown.generation == NOW_MS + 5000
    assert json.loads(grown.to_json())["generation"] == NOW_MS + 5000


def test_a_changed_plan_is_newer_even_when_the_clock_is_behind() -> None:
    written = stamped(plan(brokers(2), {"orders": 4}), None, NOW_MS)
    behind = stamped(plan(brokers(2), {"orders": 6}, written), written, NOW_MS - 60_000)
    assert behind.generation == NOW_MS + 1


def test_a_plan_from_before_generations_reads_as_the_oldest() -> None:
    document = '{"version": 1, "brokers": {"0": "b0:9092"}, "topics": {"orders": [0]}}'
    old = Assignment.from_json(document)
    assert old.generation == 0
    assert stamped(old, old, NOW_MS).generation == 0  # unchanged: not rewritten
    assert stamped(plan(brokers(2), {"orders": 1}, old), old, NOW_MS).generation == NOW_MS


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
    released = plan(brokers(max(start, end)), counts, before, leaving=leaving)
    after = hand_over(released, staying=range(end), drained=leaving)
    for topic, count in counts.items():
        for partition, owner in enumerate(before.topics[topic]):
            if owner < end:  # it stays: never released, never moved
                assert released.topics[topic][partition] == owner
                assert after.topics[topic][partition] == owner
            else:  # released by its owner, unowned until handed over
                assert released.topics[topic][partition] == NO_OWNER
                assert released.holder(topic, partition) == owner
        owners = after.topics[topic]
        assert len(owners) == count
        assert all(0 <= owner < end for owner in owners)


def test_kafka_addresses_are_part_of_the_plan_and_the_brokers_read_them() -> None:
    kafka = {0: "b0:19092", 1: "b1:19092"}
    listed = Assignment(brokers(2), {"orders": (0, 1)}, kafka_brokers=kafka)
    assert Assignment.from_json(listed.to_json()) == listed
    assert '"kafka_brokers"' not in Assignment(brokers(2), {}).to_json()
    ownership = parse_assignment(listed.to_json(), 1)
    assert [(b.node_id, b.address, b.kafka_address) for b in ownership.brokers] == [
        (0, "b0:9092", "b0:19092"),
        (1, "b1:9092", "b1:19092"),
    ]


def test_racks_are_part_of_the_plan() -> None:
    brokers = {0: "b0:9092", 1: "b1:9092"}
    zoned = Assignment(brokers, {"orders": (0, 1)}, racks={0: "zone-a", 1: "zone-b"})
    assert Assignment.from_json(zoned.to_json()) == zoned
    assert '"racks"' not in Assignment(brokers, {}).to_json()  # older brokers' documents
    first = stamped(zoned, None, 1000)
    moved = replace(zoned, racks={0: "zone-a", 1: "zone-c"})
    assert stamped(moved, first, 1000).generation == first.generation + 1
    assert stamped(zoned, first, 5000).generation == first.generation
