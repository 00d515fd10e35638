"""A broker stopping on SIGTERM hands its leaderships over before it goes.

Kafka's controlled shutdown: rather than let its partitions go leaderless until its
lease expires, the stopping broker moves each leadership it holds to another live ISR
member and leaves the ISRs it is in (``elections.hand_over``), each a compare-and-swap.
A change that loses a race is decided again on a fresh read: a shutdown should leave no
partition behind because a follower shrank its ISR at the same moment.
"""

from __future__ import annotations

from collections.abc import Set
from functools import partial

from tierlog.controller.changes import PartitionChange, write_decided
from tierlog.controller.elections import hand_over
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import UnknownTopicOrPartitionError

__all__ = ["hand_over_leaderships"]


def hand_over_leaderships(
    store: PartitionStateStore, broker: int, live: Set[int]
) -> list[PartitionChange]:
    """Move ``broker``'s leaderships to live ISR members and take it out of every ISR it
    can leave; the changes made. ``live`` are the brokers that may take over."""
    cause = f"controlled shutdown of broker {broker}"
    decide = partial(hand_over, broker=broker, live=live)
    changes = []
    for topic in store.list_topics():
        try:
            partitions = store.read_topic(topic)
        except UnknownTopicOrPartitionError:
            continue  # deleted since it was listed
        for partition, state in sorted(partitions.items()):
            change = write_decided(store, topic, partition, state, decide, cause)
            if change is not None:
                changes.append(change)
    return changes
