"""A partition change the controller (or a stopping broker) made, and how it is written.

A change is decided on a state read with its partition epoch and written by
compare-and-swap against that epoch: when another writer changed the partition first,
the change is dropped and the caller decides again on a fresh read, as Kafka's
controller does when an AlterPartition loses. The changes of one topic's partitions go
to the store together (``alter_partitions``), a write per part of the topic they touch,
as Kafka's controller batches a broker's leaderships into few metadata records: a
broker's failure costs writes in proportion to the topics it served, not its partitions.
``write_all_decided`` decides a topic's changes on one read, writes them together, and
decides the ones that lost again on a fresh read until every change lands or there is
none left to make.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tierlog.partition_state.model import NO_LEADER, PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import UnknownTopicOrPartitionError

__all__ = [
    "PartitionChange",
    "ProposedChange",
    "write_all_decided",
    "write_changes",
]

log = logging.getLogger(__name__)

LOGGED_ONE_BY_ONE = 16
"""A write of up to this many changes logs each at INFO; a larger one (a broker's
hand-over at thousands of partitions) logs one INFO line of counts and each change at
DEBUG: 4,000 lines took 0.3 s of a stopping broker's CPU, and 1.8 s of its wall time
beside its event loop (docs/BENCHMARKS.md, fix/handover)."""


@dataclass(frozen=True)
class PartitionChange:
    topic: str
    partition: int
    before: PartitionState
    after: PartitionState  # as stored, with its new partition epoch
    cause: str

    def describe(self) -> str:
        """One log line, in the words of Kafka's controller."""
        name, before, after = f"{self.topic}-{self.partition}", self.before, self.after
        isr = f"ISR {list(before.isr)} -> {list(after.isr)}"
        if after.leader == before.leader:
            return (
                f"Changed the ISR of partition {name}: {isr} (leader {after.leader}, "
                f"leader epoch {after.leader_epoch}): {self.cause}"
            )
        was = "no leader" if before.leader == NO_LEADER else f"leader {before.leader}"
        if after.leader == NO_LEADER:
            return (
                f"Partition {name} is offline in leader epoch {after.leader_epoch}: no live "
                f"in-sync replica among {list(after.isr)} (was {was}): {self.cause}"
            )
        return (
            f"Elected leader {after.leader} for partition {name} in leader epoch "
            f"{after.leader_epoch} (was {was}; {isr}): {self.cause}"
        )

    __str__ = describe  # a log line's argument, formatted only when logged


@dataclass(frozen=True)
class ProposedChange:
    """A change decided on ``before`` (read with its partition epoch), not yet written."""

    partition: int
    before: PartitionState
    after: PartitionState
    cause: str


def write_changes(
    store: PartitionStateStore, topic: str, proposed: Sequence[ProposedChange]
) -> list[PartitionChange]:
    """Write the proposed changes of ``topic``'s partitions, each if its partition is
    still at its ``before``'s partition epoch, and log them; the changes that landed.
    One that lost its race (or a topic deleted meanwhile) is left out."""
    if not proposed:
        return []
    wanted = {
        change.partition: (change.before.partition_epoch, change.after) for change in proposed
    }
    try:
        altered = store.alter_partitions(topic, wanted)
    except UnknownTopicOrPartitionError:
        return []  # deleted since it was read: nothing left to decide
    one_by_one = logging.INFO if len(proposed) <= LOGGED_ONE_BY_ONE else logging.DEBUG
    landed = []
    for change in proposed:
        if change.partition in altered.lost:
            log.log(
                one_by_one,
                "Partition %s-%d moved on to partition epoch %d before our change (%s): "
                "deciding again on a fresh read",
                topic, change.partition, altered.lost[change.partition], change.cause,
            )  # fmt: skip
            continue
        stored = altered.stored[change.partition]
        written = PartitionChange(topic, change.partition, change.before, stored, change.cause)
        log.log(one_by_one, "%s", written)
        landed.append(written)
    if one_by_one == logging.DEBUG:
        log.info(
            "Wrote %d change(s) of topic %s's partitions in one batch (%s); %d lost to a "
            "newer partition epoch and decided again; each is logged at DEBUG",
            len(landed), topic, ", ".join(sorted({c.cause for c in proposed})), len(altered.lost),
        )  # fmt: skip
    return landed


def write_all_decided(
    store: PartitionStateStore,
    topic: str,
    partitions: Mapping[int, PartitionState],
    decide: Callable[[int, PartitionState], PartitionState | None],
    cause: str,
) -> list[PartitionChange]:
    """Write what ``decide(partition, state)`` makes of each of ``topic``'s
    ``partitions`` (``None``: nothing to change), in one batch (``write_changes``); the
    partitions whose change lost a race are decided again on a fresh read, in the next
    batch, until none is left. The changes that landed; a partition deleted meanwhile is
    left out, and what ``decide`` raises is the caller's."""
    changes: list[PartitionChange] = []
    while True:
        proposed = [
            ProposedChange(partition, state, after, cause)
            for partition, state in sorted(partitions.items())
            if (after := decide(partition, state)) is not None
        ]
        landed = write_changes(store, topic, proposed)
        changes.extend(landed)
        lost = {change.partition for change in proposed} - {c.partition for c in landed}
        if not lost:
            return changes
        try:
            fresh = store.read_topic(topic)
        except UnknownTopicOrPartitionError:
            return changes
        partitions = {partition: fresh[partition] for partition in lost if partition in fresh}
