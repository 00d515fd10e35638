"""Partition states keep Kafka's invariants, and their documents round-trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.partition_state.model import (
    LEGACY_TOPIC_ID,
    NO_LEADER,
    PartitionState,
    StatePart,
    TopicLayout,
    part_from_json,
    part_to_json,
    replica_assignment,
    replication_factor,
)
from tierlog.storage.errors import KafkaStorageError


@pytest.mark.parametrize(
    ("replicas", "leader", "isr", "problem"),
    [
        ((), NO_LEADER, (), "no replicas"),
        ((1, 1), 1, (1,), "a replica listed twice"),
        ((1, 2), 1, (1, 3), "an in-sync replica that is not a replica"),
        ((1, 2), 2, (1,), "a leader outside the ISR"),
        ((1, -2), 1, (1,), "a negative broker id"),
    ],
)
def test_a_state_that_breaks_an_invariant_cannot_exist(
    replicas: tuple[int, ...], leader: int, isr: tuple[int, ...], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        PartitionState(replicas, leader, 0, isr)


def test_an_election_bumps_the_leader_epoch_and_an_isr_change_does_not() -> None:
    state = PartitionState.new((1, 2, 3))
    assert (state.leader, state.leader_epoch, state.isr) == (1, 0, (1, 2, 3))
    shrunk = state.with_isr((1, 3))
    assert (shrunk.leader, shrunk.leader_epoch) == (1, 0)
    elected = shrunk.with_leader(3)
    assert (elected.leader, elected.leader_epoch, elected.isr) == (3, 1, (1, 3))
    offline = elected.with_leader(NO_LEADER, isr=())
    assert (offline.leader, offline.leader_epoch) == (NO_LEADER, 2)


@st.composite
def _states(draw: st.DrawFn) -> PartitionState:
    replicas = tuple(draw(st.lists(st.integers(0, 50), min_size=1, max_size=5, unique=True)))
    isr = tuple(draw(st.lists(st.sampled_from(replicas), unique=True)))
    leader = draw(st.sampled_from((*isr, NO_LEADER)))
    return PartitionState(
        replicas, leader, draw(st.integers(0, 2**31)), isr, draw(st.integers(0, 2**31))
    )


@given(st.dictionaries(st.integers(0, 1000), _states(), max_size=8), st.integers(1, 5))
def test_a_part_document_round_trips(partitions: dict[int, PartitionState], index: int) -> None:
    topic_id = "0123456789abcdef" * 2
    head = StatePart(topic_id, 0, partitions, TopicLayout(topic_id, 1001, 1000))
    part = StatePart(topic_id, index, partitions)
    assert part_from_json(part_to_json(head), "here") == head
    assert part_from_json(part_to_json(part), "here") == part


def test_a_version_1_document_reads_as_a_head_holding_every_partition() -> None:
    """What one object per topic (files) or per cluster (a ConfigMap key) held before
    parts: read as it is, its head range covering all its partitions."""
    partitions = {p: PartitionState.new((1, 2)) for p in range(1500)}
    old = json.dumps(
        {
            "version": 1,
            "partitions": {
                str(p): {"replicas": [1, 2], "leader": 1, "leaderEpoch": 0, "isr": [1, 2],
                         "partitionEpoch": 0}
                for p in partitions
            },
        }
    )  # fmt: skip
    head = part_from_json(old, "here")
    assert head == StatePart(
        LEGACY_TOPIC_ID, 0, partitions, TopicLayout(LEGACY_TOPIC_ID, 1500, 1500)
    )


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"version": 3, "partitions": {}}',
        '{"version": 2, "topicId": "../x", "part": 1, "partitions": {}}',
        '{"version": 2, "topicId": "' + "a" * 32 + '", "part": 0, "partitions": {}}',
        '{"version": 1, "partitions": {"0": {"replicas": [1]}}}',
        '{"version": 1, "partitions": {"0": {"replicas": ["1"], "leader": 1, "leaderEpoch": 0,'
        ' "isr": [1], "partitionEpoch": 0}}}',
        '{"version": 1, "partitions": {"0": {"replicas": [1], "leader": 2, "leaderEpoch": 0,'
        ' "isr": [1], "partitionEpoch": 0}}}',
    ],
)
def test_a_damaged_document_is_refused_naming_where_it_is(text: str) -> None:
    with pytest.raises(KafkaStorageError, match="ConfigMap x"):
        part_from_json(text, "ConfigMap x")


def test_a_topics_replication_factor_is_what_its_partitions_will_have() -> None:
    """The target of a reassignment under way: its leaving replicas do not count."""
    moving = PartitionState(
        (4, 5, 1, 2), 1, 0, (1, 2, 4, 5), adding_replicas=(4, 5), removing_replicas=(1, 2)
    )
    growing = PartitionState((1, 2, 3), 1, 0, (1, 2), adding_replicas=(3,))
    assert replication_factor({0: PartitionState.new((1, 2)), 1: moving}) == 2
    assert replication_factor({0: PartitionState.new((1, 2)), 1: growing}) == 3
    assert replication_factor({}) is None


def test_a_topics_assignment_is_where_its_partitions_replicas_will_be() -> None:
    """By partition, the preferred leader first, a reassignment under way as its target."""
    moving = PartitionState(
        (4, 5, 1, 2), 1, 0, (1, 2, 4, 5), adding_replicas=(4, 5), removing_replicas=(1, 2)
    )
    assert replica_assignment({1: moving, 0: PartitionState.new((2, 0))}) == ((2, 0), (4, 5))
    assert replica_assignment({}) == ()
