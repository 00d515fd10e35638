"""Fencing by leader epoch: a request names the leader epoch its sender knows (KIP-320).

One check for every request that names one: a follower's replica fetch, a client's
produce, fetch and subscribe. An epoch older than the one this broker knows for the
partition means the sender follows a leader that has since been replaced
(FENCED_LEADER_EPOCH); a newer one means this broker has not learnt the latest state
yet (UNKNOWN_LEADER_EPOCH). Both are retriable: the sender refreshes its metadata and
tries again. As in Kafka, the epoch is checked before the broker's role, so a deposed
leader that has not read the store yet refuses a client that already knows the new
epoch instead of taking its records into a log that will be cut back.
"""

from __future__ import annotations

from tierlog.api.errors import FencedLeaderEpochError, UnknownLeaderEpochError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["check_leader_epoch"]


def check_leader_epoch(tp: TopicPartition, requested: int, known: int) -> None:
    """Refuse a request naming ``requested`` when this broker knows ``known`` for ``tp``.
    A request that names none (``NO_PARTITION_LEADER_EPOCH``, -1: an older client, or one
    that has not learnt the epoch) is not checked, as in Kafka."""
    if requested < 0 or requested == known:
        return
    if requested < known:
        raise FencedLeaderEpochError(
            f"{tp}: leader epoch {requested} is older than the current {known}; "
            "refresh metadata and retry"
        )
    raise UnknownLeaderEpochError(
        f"{tp}: leader epoch {requested} is newer than the {known} this broker knows; retry"
    )
