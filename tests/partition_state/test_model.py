"""Partition states keep Kafka's invariants, and their documents round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.partition_state.model import NO_LEADER, PartitionState, topic_from_json, topic_to_json
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


@given(st.dictionaries(st.integers(0, 1000), _states(), max_size=8))
def test_a_topic_document_round_trips(partitions: dict[int, PartitionState]) -> None:
    assert topic_from_json(topic_to_json(partitions), "here") == partitions


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"version": 2, "partitions": {}}',
        '{"version": 1, "partitions": {"0": {"replicas": [1]}}}',
        '{"version": 1, "partitions": {"0": {"replicas": ["1"], "leader": 1, "leaderEpoch": 0,'
        ' "isr": [1], "partitionEpoch": 0}}}',
        '{"version": 1, "partitions": {"0": {"replicas": [1], "leader": 2, "leaderEpoch": 0,'
        ' "isr": [1], "partitionEpoch": 0}}}',
    ],
)
def test_a_damaged_document_is_refused_naming_where_it_is(text: str) -> None:
    with pytest.raises(KafkaStorageError, match="ConfigMap x"):
        topic_from_json(text, "ConfigMap x")
