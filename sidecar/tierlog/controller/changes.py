"""A partition change the controller (or a stopping broker) made, and how it is written.

A change is decided on a state read with its partition epoch and written by
compare-and-swap against that epoch (``alter_partition``): when another writer changed
the partition first, the change is dropped (``None``) and the caller decides again on a
fresh read, as Kafka's controller does when an AlterPartition loses
(``write_decided`` does that until the change lands or there is none to make).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.api.errors import InvalidUpdateVersionError
from tierlog.partition_state.model import NO_LEADER, PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import UnknownTopicOrPartitionError

__all__ = ["PartitionChange", "write_change", "write_decided"]

log = logging.getLogger(__name__)


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


def write_change(
    store: PartitionStateStore,
    topic: str,
    partition: int,
    before: PartitionState,
    after: PartitionState,
    cause: str,
) -> PartitionChange | None:
    """Write ``after`` if the partition is still at ``before``'s partition epoch and log
    it; ``None`` when another change won the race (or the topic was deleted)."""
    try:
        stored = store.alter_partition(topic, partition, before.partition_epoch, after)
    except InvalidUpdateVersionError as lost:
        log.info(
            "Partition %s-%d moved on to partition epoch %d before our change (%s): "
            "deciding again on a fresh read",
            topic, partition, lost.current_epoch, cause,
        )  # fmt: skip
        return None
    except UnknownTopicOrPartitionError:
        return None  # deleted since it was read: nothing left to decide
    change = PartitionChange(topic, partition, before, stored, cause)
    log.info("%s", change.describe())
    return change


def write_decided(
    store: PartitionStateStore,
    topic: str,
    partition: int,
    state: PartitionState,
    decide: Callable[[PartitionState], PartitionState | None],
    cause: str,
) -> PartitionChange | None:
    """Write what ``decide`` makes of ``state``; when another change wins the race,
    decide again on what it left, until a change lands. ``None`` when there is nothing
    to change (or the partition is gone); what ``decide`` raises is the caller's."""
    while (after := decide(state)) is not None:
        change = write_change(store, topic, partition, state, after, cause)
        if change is not None:
            return change
        try:
            state = store.read_topic(topic)[partition]
        except (UnknownTopicOrPartitionError, KeyError):
            return None
    return None
