"""A member's reconciliation toward its target: revoke first at its epoch, then take the
target's epoch and the partitions nobody else holds."""

from __future__ import annotations

import uuid

import pytest

from tierlog.api.errors import FencedMemberEpochError
from tierlog.coordinator.assignment import EMPTY_ASSIGNMENT, Assignment, TopicIdPartition
from tierlog.coordinator.consumer_group_records import MemberState
from tierlog.coordinator.current_assignment import MemberAssignment, reconcile

T = uuid.UUID(int=7)


def tps(*partitions: int) -> Assignment:
    return frozenset(TopicIdPartition(T, p) for p in partitions)


def nobody(_tp: TopicIdPartition) -> str | None:
    return None


def test_a_new_member_takes_its_target_and_the_targets_epoch() -> None:
    after = reconcile("a", MemberAssignment(0, 0), 3, tps(0, 1), nobody, EMPTY_ASSIGNMENT)
    assert after == MemberAssignment(3, 0, MemberState.STABLE, tps(0, 1))


def test_a_stable_member_at_the_targets_epoch_is_left_alone() -> None:
    stable = MemberAssignment(3, 2, MemberState.STABLE, tps(0, 1))
    assert reconcile("a", stable, 3, tps(5), nobody, None) is stable


def test_partitions_taken_away_are_revoked_first_at_the_same_epoch() -> None:
    stable = MemberAssignment(3, 2, MemberState.STABLE, tps(0, 1, 2))
    after = reconcile("a", stable, 4, tps(0, 5), nobody, tps(0, 1, 2))
    assert after == MemberAssignment(3, 2, MemberState.UNREVOKED_PARTITIONS, tps(0), tps(1, 2))


def test_the_member_waits_until_it_no_longer_reports_the_revoked_partitions() -> None:
    waiting = MemberAssignment(3, 2, MemberState.UNREVOKED_PARTITIONS, tps(0), tps(1, 2))
    assert reconcile("a", waiting, 4, tps(0, 5), nobody, tps(0, 1)) is waiting
    assert reconcile("a", waiting, 4, tps(0, 5), nobody, None) is waiting
    after = reconcile("a", waiting, 4, tps(0, 5), nobody, tps(0))
    assert after == MemberAssignment(4, 3, MemberState.STABLE, tps(0, 5))


def test_a_partition_another_member_holds_stays_unreleased_until_it_is_let_go() -> None:
    holders = {TopicIdPartition(T, 5): "b"}
    member = MemberAssignment(3, 2, MemberState.STABLE, tps(0))
    after = reconcile("a", member, 4, tps(0, 5, 6), holders.get, tps(0))
    assert after == MemberAssignment(4, 3, MemberState.UNRELEASED_PARTITIONS, tps(0, 6))
    # Still held: nothing changes.
    assert reconcile("a", after, 4, tps(0, 5, 6), holders.get, tps(0, 6)) == after
    holders.clear()
    done = reconcile("a", after, 4, tps(0, 5, 6), holders.get, tps(0, 6))
    assert done == MemberAssignment(4, 3, MemberState.STABLE, tps(0, 5, 6))


def test_its_own_pending_partitions_are_not_unreleased_to_itself() -> None:
    holders = {TopicIdPartition(T, 1): "a"}
    member = MemberAssignment(3, 2, MemberState.STABLE, tps(0))
    after = reconcile("a", member, 4, tps(0, 1), holders.get, tps(0))
    assert after.state == MemberState.STABLE and after.assigned == tps(0, 1)


def test_an_unknown_state_fences_a_member_that_still_owns_partitions() -> None:
    odd = MemberAssignment(3, 2, MemberState.UNKNOWN, tps(0))
    with pytest.raises(FencedMemberEpochError):
        reconcile("a", odd, 4, tps(0), nobody, tps(0))
    after = reconcile("a", odd, 4, tps(0), nobody, EMPTY_ASSIGNMENT)
    assert after.state == MemberState.STABLE and after.member_epoch == 4
