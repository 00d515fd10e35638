"""The server-side assignors of KIP-848: ``uniform`` (the default) and ``range``.

The coordinator asks an assignor for the group's *target* assignment whenever the group's
epoch moves past the target's (a member joined, left or changed its subscription, a
topic grew). An assignor is a pure function of the group's members, their subscriptions,
their previous targets and the subscribed topics' partition counts; members then
reconcile toward the target (``current_assignment``), which is where "never two owners"
is kept. An assignor only has to give each subscribed partition to exactly one member
subscribed to its topic.

- ``uniform`` balances the number of partitions per member (within one where the
  subscriptions allow it) and is sticky: a member keeps what it had unless balance needs
  it elsewhere, so when a member joins only the partitions it takes move, each once, and
  when one leaves only its partitions move.
- ``range`` gives each topic's partitions to its subscribers in contiguous ranges, in the
  order of their member ids, the first ``partitions % members`` one partition more: with
  the same subscriptions, members get the same partition numbers of co-partitioned topics
  (a join's inputs), at the price of stickiness.

Rack-aware placement (``rack_id``) is not done: every member is as good as any other.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from tierlog.api.errors import UnsupportedAssignorError
from tierlog.coordinator.assignment import EMPTY_ASSIGNMENT, Assignment, TopicIdPartition

__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNOR",
    "GroupSpec",
    "MemberSpec",
    "PartitionAssignor",
    "RangeAssignor",
    "UniformAssignor",
    "assignor_named",
]


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of a member: its topics and its previous target."""

    subscribed_topic_ids: frozenset[uuid.UUID]
    assigned: Assignment = EMPTY_ASSIGNMENT


@dataclass(frozen=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]
    partition_counts: Mapping[uuid.UUID, int]  # of the subscribed topics that exist

    def partitions_of(self, topic_id: uuid.UUID) -> list[TopicIdPartition]:
        count = self.partition_counts.get(topic_id, 0)
        return [TopicIdPartition(topic_id, partition) for partition in range(count)]

    def subscribers(self, topic_id: uuid.UUID) -> list[str]:
        return sorted(
            member_id
            for member_id, member in self.members.items()
            if topic_id in member.subscribed_topic_ids
        )


class PartitionAssignor(Protocol):
    name: str

    def assign(self, group: GroupSpec) -> dict[str, Assignment]:
        """Every member's target (an empty set for a member with nothing)."""
        ...


class UniformAssignor:
    name = "uniform"

    def assign(self, group: GroupSpec) -> dict[str, Assignment]:
        subscribed = {m: spec.subscribed_topic_ids for m, spec in group.members.items()}
        owned = self._kept(group)
        self._place_unassigned(group, owned, subscribed)
        self._balance(owned, subscribed)
        return {member_id: frozenset(parts) for member_id, parts in owned.items()}

    @staticmethod
    def _kept(group: GroupSpec) -> dict[str, set[TopicIdPartition]]:
        """Each member's previous partitions it still subscribes to and that still exist;
        a partition two previous targets share (never written so) stays with the first."""
        taken: set[TopicIdPartition] = set()
        owned: dict[str, set[TopicIdPartition]] = {}
        for member_id in sorted(group.members):
            spec = group.members[member_id]
            keep = {
                tp
                for tp in spec.assigned
                if tp.topic_id in spec.subscribed_topic_ids
                and tp.partition < group.partition_counts.get(tp.topic_id, 0)
                and tp not in taken
            }
            taken |= keep
            owned[member_id] = keep
        return owned

    @staticmethod
    def _place_unassigned(
        group: GroupSpec,
        owned: dict[str, set[TopicIdPartition]],
        subscribed: Mapping[str, frozenset[uuid.UUID]],
    ) -> None:
        """Each partition nobody keeps goes to its least loaded subscriber."""
        taken = set().union(*owned.values())
        for topic_id in sorted(group.partition_counts):
            candidates = [m for m in sorted(owned) if topic_id in subscribed[m]]
            if not candidates:
                continue
            for tp in group.partitions_of(topic_id):
                if tp in taken:
                    continue
                member_id = min(candidates, key=lambda m: (len(owned[m]), m))
                owned[member_id].add(tp)

    @staticmethod
    def _balance(
        owned: dict[str, set[TopicIdPartition]], subscribed: Mapping[str, frozenset[uuid.UUID]]
    ) -> None:
        """Move partitions from a member with at least two more than another, to it,
        while one can take: each move lowers the sum of squared counts, so it ends. A
        member that received is never a donor afterwards (it stays within one of the
        least loaded), so no partition moves twice."""
        while True:
            move = _find_move(owned, subscribed)
            if move is None:
                return
            donor, receiver, tp = move
            owned[donor].remove(tp)
            owned[receiver].add(tp)


def _find_move(
    owned: dict[str, set[TopicIdPartition]], subscribed: Mapping[str, frozenset[uuid.UUID]]
) -> tuple[str, str, TopicIdPartition] | None:
    by_load = sorted(owned, key=lambda m: (len(owned[m]), m))
    for receiver in by_load:
        for donor in reversed(by_load):
            if len(owned[donor]) < len(owned[receiver]) + 2:
                break
            movable = [tp for tp in owned[donor] if tp.topic_id in subscribed[receiver]]
            if movable:
                return donor, receiver, max(movable)
    return None


class RangeAssignor:
    name = "range"

    def assign(self, group: GroupSpec) -> dict[str, Assignment]:
        owned: dict[str, set[TopicIdPartition]] = {member_id: set() for member_id in group.members}
        for topic_id in sorted(group.partition_counts):
            members = group.subscribers(topic_id)
            if not members:
                continue
            partitions = group.partitions_of(topic_id)
            quota, extra = divmod(len(partitions), len(members))
            start = 0
            for index, member_id in enumerate(members):
                end = start + quota + (1 if index < extra else 0)
                owned[member_id].update(partitions[start:end])
                start = end
        return {member_id: frozenset(parts) for member_id, parts in owned.items()}


ASSIGNORS: dict[str, PartitionAssignor] = {
    assignor.name: assignor for assignor in (UniformAssignor(), RangeAssignor())
}
DEFAULT_ASSIGNOR = "uniform"  # the first of Kafka's group.consumer.assignors


def assignor_named(name: str | None) -> PartitionAssignor:
    """The assignor a member asked for (``server_assignor``), the default for None."""
    assignor = ASSIGNORS.get(name or DEFAULT_ASSIGNOR)
    if assignor is None:
        raise UnsupportedAssignorError(
            f"unknown server assignor {name!r}: one of {', '.join(sorted(ASSIGNORS))}"
        )
    return assignor
