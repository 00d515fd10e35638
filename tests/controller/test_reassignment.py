"""Reassignment as Kafka's (KIP-455), pure: widen the replicas to target | current, wait
for the target in the ISR, then narrow to the target, electing from it if the leader
leaves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.api.errors import InvalidReplicaAssignmentError
from tierlog.controller.reassignment import (
    complete_reassignment,
    original_replicas,
    start_reassignment,
)
from tierlog.partition_state.model import NO_LEADER, PartitionState

EVERYONE = frozenset(range(10))


def test_starting_lists_target_then_leaving_and_keeps_the_leader_and_its_epoch() -> None:
    state = PartitionState((0, 1, 2), 0, 4, (0, 1, 2), partition_epoch=9)
    moving = start_reassignment(state, (1, 2, 3))
    assert moving.replicas == (1, 2, 3, 0)
    assert (moving.adding_replicas, moving.removing_replicas) == ((3,), (0,))
    assert (moving.leader, moving.leader_epoch, moving.isr) == (0, 4, (0, 1, 2))
    assert moving.target_replicas == (1, 2, 3)
    assert original_replicas(moving) == (1, 2, 0)


def test_nothing_completes_while_an_adding_replica_is_out_of_the_isr() -> None:
    moving = start_reassignment(PartitionState.new((0, 1, 2)), (1, 2, 3))
    assert complete_reassignment(moving, EVERYONE) is None


def test_once_the_target_is_in_sync_a_leaving_leader_hands_over_to_the_target() -> None:
    moving = start_reassignment(PartitionState.new((0, 1, 2)), (1, 2, 3))
    caught_up = moving.with_isr((0, 1, 2, 3))
    done = complete_reassignment(caught_up, EVERYONE)
    assert done is not None
    assert (done.replicas, done.isr, done.leader) == ((1, 2, 3), (1, 2, 3), 1)
    assert done.leader_epoch == caught_up.leader_epoch + 1
    assert not done.reassigning


def test_a_staying_leader_keeps_its_epoch_when_the_set_narrows() -> None:
    moving = start_reassignment(PartitionState.new((0, 1, 2)), (0, 2, 3))
    done = complete_reassignment(moving.with_isr((0, 1, 2, 3)), EVERYONE)
    assert done is not None
    assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((0, 2, 3), (0, 2, 3), 0, 0)


def test_the_new_leader_is_the_first_live_target_replica() -> None:
    moving = start_reassignment(PartitionState.new((0, 1, 2)), (1, 2, 3)).with_isr((0, 1, 2, 3))
    done = complete_reassignment(moving, frozenset({0, 2, 3}))
    assert done is not None and done.leader == 2
    assert complete_reassignment(moving, frozenset({0})) is None  # nobody to lead: wait


def test_a_new_target_replaces_the_one_under_way_measured_from_the_original() -> None:
    moving = start_reassignment(PartitionState.new((0, 1, 2)), (1, 2, 3))
    again = start_reassignment(moving, (2, 4))
    assert again.replicas == (2, 4, 1, 0)
    assert (again.adding_replicas, again.removing_replicas) == ((4,), (1, 0))
    assert 3 not in again.isr


def test_the_original_replicas_as_target_cancel_the_reassignment() -> None:
    state = PartitionState.new((0, 1, 2))
    moving = start_reassignment(state, (1, 2, 3)).with_isr((0, 1, 2, 3))
    cancelled = start_reassignment(moving, (0, 1, 2))
    assert cancelled == state
    assert complete_reassignment(cancelled, EVERYONE) is None


def test_cancelling_moves_leadership_off_a_withdrawn_adding_replica() -> None:
    moving = start_reassignment(PartitionState.new((0, 1)), (2, 1)).with_isr((0, 1, 2))
    led_by_new = moving.with_leader(2)
    cancelled = start_reassignment(led_by_new, (0, 1))
    assert (cancelled.replicas, cancelled.leader, cancelled.isr) == ((0, 1), 0, (0, 1))
    assert cancelled.leader_epoch == led_by_new.leader_epoch + 1
    alone = moving.with_leader(2, isr=(2,))
    with pytest.raises(InvalidReplicaAssignmentError, match="no in-sync replica"):
        start_reassignment(alone, (0, 1))


@pytest.mark.parametrize("target", [(), (1, 1), (1, -1)])
def test_a_target_that_cannot_be_is_refused_by_name(target: tuple[int, ...]) -> None:
    with pytest.raises(InvalidReplicaAssignmentError):
        start_reassignment(PartitionState.new((0, 1)), target)


def test_an_offline_partition_completes_and_stays_offline_for_the_elections() -> None:
    moving = start_reassignment(PartitionState.new((0, 1)), (1, 2)).with_isr((0, 1, 2))
    offline = moving.with_leader(NO_LEADER)
    done = complete_reassignment(offline, frozenset())
    assert done is not None and (done.leader, done.replicas, done.isr) == (
        NO_LEADER,
        (1, 2),
        (1, 2),
    )


@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True),
    st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True),
    st.sets(st.integers(0, 6)),
)
def test_a_move_keeps_every_invariant_and_ends_on_the_target(
    current: list[int], target: list[int], live: set[int]
) -> None:
    state = PartitionState.new(tuple(current))
    moving = start_reassignment(state, target)
    assert set(moving.replicas) == set(current) | set(target)
    assert moving.leader == state.leader and set(moving.isr) == set(state.isr)
    synced = moving.with_isr(moving.replicas)
    done = complete_reassignment(synced, live)
    if not moving.reassigning:
        # The same brokers: only their order (the preferred leader) changes, at once.
        assert done is None and moving.replicas == tuple(target)
        return
    if done is None:
        assert moving.reassigning and not (set(target) & live) and state.leader not in target
        return
    assert done.replicas == tuple(target) and done.isr == tuple(target)
    assert done.leader in target
