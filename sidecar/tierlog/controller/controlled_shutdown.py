"""A broker stopping on SIGTERM hands its leaderships over before it goes.

Kafka's controlled shutdown: rather than let its partitions go leaderless until its
lease expires, the stopping broker moves each leadership it holds to another live ISR
member and leaves the ISRs it is in (``elections.hand_over``), each a compare-and-swap,
a topic's in one batch.
A change that loses a race is decided again on a fresh read: a shutdown should leave no
partition behind because a follower shrank its ISR at the same moment.
"""

from __future__ import annotations

from collections.abc import Set

from tierlog.controller.changes import PartitionChange, write_all_decided
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
    hand-overs are written in one batch (``write_all_decided``)."""
    cause = f"controlled shutdown of broker {broker}"

    def hand_over_here(_partition: int, state: PartitionState) -> PartitionState | None:
        return hand_over(state, broker, live)

    changes = []
    for topic in store.list_topics():
        try:
            partitions = store.read_topic(topic)
        except UnknownTopicOrPartitionError:
            continue  # deleted since it was listed
        changes.extend(write_all_decided(store, topic, partitions, hand_over_here, cause))
    return changes
