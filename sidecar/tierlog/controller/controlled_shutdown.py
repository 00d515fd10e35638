"""A broker stopping on SIGTERM hands its leaderships over before it goes.

Kafka's controlled shutdown: rather than let its partitions go leaderless until its
lease expires, the stopping broker moves each leadership it holds to another live ISR
member and leaves the ISRs it is in (``elections.hand_over``), each a compare-and-swap,
a topic's in one batch.
A change that loses a race is decided again on a fresh read: a shutdown should leave no
partition behind because a follower shrank its ISR at the same moment.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from tierlog.controller.changes import PartitionChange, ProposedChange, write_changes
from tierlog.controller.elections import hand_over
from tierlog.partition_state.model import PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import UnknownTopicOrPartitionError

__all__ = ["hand_over_leaderships"]


def hand_over_leaderships(
    store: PartitionStateStore, broker: int, live: Set[int]
) -> list[PartitionChange]:
    """Move ``broker``'s leaderships to live ISR members and take it out of every ISR it
    can leave; the changes made. ``live`` are the brokers that may take over. A topic's
    hand-overs are written in one batch (``write_changes``)."""
    changes = []
    for topic in store.list_topics():
        try:
            partitions = store.read_topic(topic)
        except UnknownTopicOrPartitionError:
            continue  # deleted since it was listed
        changes.extend(_hand_over_topic(store, topic, partitions, broker, live))
    return changes


def _hand_over_topic(
    store: PartitionStateStore,
    topic: str,
    partitions: Mapping[int, PartitionState],
    broker: int,
    live: Set[int],
) -> list[PartitionChange]:
    cause = f"controlled shutdown of broker {broker}"
    changes: list[PartitionChange] = []
    while True:
        proposed = [
            ProposedChange(partition, state, after, cause)
            for partition, state in sorted(partitions.items())
            if (after := hand_over(state, broker, live)) is not None
        ]
        landed = write_changes(store, topic, proposed)
        changes.extend(landed)
        if len(landed) == len(proposed):
            return changes
        # Other changes won some races: decide those partitions again on what they left.
        done = {change.partition for change in landed}
        lost = {change.partition for change in proposed} - done
        try:
            fresh = store.read_topic(topic)
        except UnknownTopicOrPartitionError:
            return changes
        partitions = {partition: fresh[partition] for partition in lost if partition in fresh}
