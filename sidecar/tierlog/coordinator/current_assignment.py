"""A member's way from its current assignment to its target, one safe step at a time.

The target assignment (``assignors``) says where partitions should be; this module says
what a member may own *now*, so that a partition is never owned by two members: a
member first gives up what its target takes away, at its current epoch, and only after
it reported them gone (they are absent from its heartbeat's owned partitions) does it
move on to the target's epoch and get new partitions; a partition of its target that
another member still holds (assigned or pending revocation) stays *unreleased* and is
handed over on a later heartbeat, once that member let it go.

A member's states (Kafka's ``MemberState``, the ``state`` byte of its record):

- ``STABLE``: it owns what its target at ``member_epoch`` gives it;
- ``UNREVOKED_PARTITIONS``: it must stop consuming ``pending_revocation`` first;
- ``UNRELEASED_PARTITIONS``: at the target's epoch, waiting for partitions of its target
  that others still hold.

Epochs: a member reaching a new target takes the target's epoch, and remembers the one
it had (``previous_member_epoch``) so a heartbeat that crossed the answer is not fenced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tierlog.api.errors import FencedMemberEpochError
from tierlog.coordinator.assignment import EMPTY_ASSIGNMENT, Assignment, TopicIdPartition
from tierlog.coordinator.consumer_group_records import MemberState

__all__ = ["MemberAssignment", "PartitionOwner", "reconcile"]

# The member holding a partition (assigned or pending revocation), None when nobody does.
PartitionOwner = Callable[[TopicIdPartition], str | None]


@dataclass(frozen=True)
class MemberAssignment:
    """What a member owns and at which epoch (its ``CurrentMemberAssignment`` record)."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState = MemberState.STABLE
    assigned: Assignment = EMPTY_ASSIGNMENT
    pending_revocation: Assignment = EMPTY_ASSIGNMENT

    @property
    def held(self) -> Assignment:
        """Every partition the member may still be consuming."""
        return self.assigned | self.pending_revocation


def reconcile(
    member_id: str,
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    owner: PartitionOwner,
    owned: Assignment | None,
) -> MemberAssignment:
    """The member's next assignment, given its target and the partitions it says it
    owns (``owned``; None when the heartbeat left them out)."""
    if current.state == MemberState.STABLE:
        if current.member_epoch == target_epoch:
            return current
        return _next(member_id, current, target_epoch, target, owner)
    if current.state == MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owned & current.pending_revocation:
            return current  # still consuming something it must give up: wait
        return _next(member_id, current, target_epoch, target, owner)
    if current.state == MemberState.UNRELEASED_PARTITIONS:
        return _next(member_id, current, target_epoch, target, owner)
    # A state this coordinator does not know (written by a newer one): start afresh.
    if owned is None or owned:
        raise FencedMemberEpochError(
            f"member {member_id!r} is in an unknown state: it must give up its partitions "
            "and join again"
        )
    return _next(member_id, current, target_epoch, target, owner)


def _next(
    member_id: str,
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    owner: PartitionOwner,
) -> MemberAssignment:
    keep = current.assigned & target
    revoke = current.assigned - target
    wanted = target - current.assigned
    free = frozenset(tp for tp in wanted if owner(tp) in (None, member_id))
    unreleased = bool(wanted - free)
    if revoke:
        # Give up first, at the epoch it has: nothing new until the revocation is seen.
        return MemberAssignment(
            member_epoch=current.member_epoch,
            previous_member_epoch=current.previous_member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=keep,
            pending_revocation=revoke,
        )
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    previous = current.previous_member_epoch
    if target_epoch != current.member_epoch:
        previous = current.member_epoch
    return MemberAssignment(
        member_epoch=target_epoch,
        previous_member_epoch=previous,
        state=state,
        assigned=keep | free,
        pending_revocation=EMPTY_ASSIGNMENT,
    )
