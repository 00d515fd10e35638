"""The partitions this broker serves: from a request's topic and partition to its log.

One lookup order for every call: the topic must exist and have the partition
(UNKNOWN_TOPIC_OR_PARTITION; a bad name is INVALID_TOPIC_EXCEPTION), this broker must
own it (NOT_LEADER_OR_FOLLOWER with the owner), and then its log is the log manager's.
With replication, "own" means "lead", as the replica manager knows from the
partition-state store. A leader epoch the request names is checked before the
ownership (``leader_epoch_check``); without replication the owner's epoch is 0, as
Metadata reports it.

This module sits below replication and the coordinators: it knows the replica manager
only as ``Leaders`` (what a lookup needs of it), so the coordinators read partitions
through it without importing replication, and the server names the concrete type
(``Partitions[ReplicaManager]``) to reach the rest of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar

from tierlog.broker.leader_epoch_check import check_leader_epoch
from tierlog.broker.ownership import Ownership
from tierlog.broker.topics import Topic, TopicStore
from tierlog.storage.errors import TierlogError
from tierlog.storage.log import Log
from tierlog.storage.manager import LogManager
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["UNREPLICATED_LEADER_EPOCH", "Leader", "Leaders", "Partitions"]

UNREPLICATED_LEADER_EPOCH = 0  # an owner without replication (what Metadata reports)


class Leader(Protocol):
    """A partition this broker leads (replication's ``LeaderPartition``)."""

    @property
    def log(self) -> Log: ...

    @property
    def leader_epoch(self) -> int: ...


L = TypeVar("L", bound=Leader, covariant=True)


class Leaders(Protocol[L]):
    """The partitions this broker leads (replication's ``ReplicaManager``)."""

    @property
    def leaders(self) -> Mapping[TopicPartition, L]: ...

    def leader(self, tp: TopicPartition, current_leader_epoch: int = ...) -> L:
        """``tp``'s leadership here, checked against the epoch the caller knows; raises
        NOT_LEADER_OR_FOLLOWER (or an epoch error) when this broker does not lead it."""
        ...


R = TypeVar("R", bound=Leaders[Leader], covariant=True)


class Partitions(Generic[R]):
    def __init__(
        self,
        manager: LogManager,
        topics: TopicStore,
        ownership: Ownership,
        replicas: R | None = None,
    ):
        self.manager = manager
        self.topics = topics
        self.ownership = ownership
        self._replicas = replicas

    @property
    def replicas(self) -> R | None:
        """The replica manager, None without replication. With it, the partition-state
        store says who leads (not ``ownership``)."""
        return self._replicas

    def log(
        self, topic: str, partition: int, current_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    ) -> tuple[TopicPartition, Log]:
        self.topics.check_partition(topic, partition)
        tp = TopicPartition(topic, partition)
        if self.replicas is not None:
            return tp, self.replicas.leader(tp, current_leader_epoch).log
        check_leader_epoch(tp, current_leader_epoch, UNREPLICATED_LEADER_EPOCH)
        self.ownership.check(tp)
        return tp, self.manager.get_log(tp)

    def leader_epoch(self, tp: TopicPartition) -> int | None:
        """The epoch of this broker's leadership of ``tp`` (None: not led here, or its log
        not created here yet). Without replication, the ownership plan's generation."""
        if self.replicas is not None:
            leader = self.replicas.leaders.get(tp)
            return None if leader is None else leader.leader_epoch
        if not self.ownership.owns(tp):
            return None
        try:
            self.manager.get_log(tp)
        except TierlogError:
            return None
        return self.ownership.generation

    def high_watermark(self, tp: TopicPartition, partition_log: Log) -> int:
        """Where consumers' reads end: the high watermark with replication, else the end."""
        return (
            partition_log.log_end_offset if self.replicas is None else partition_log.high_watermark
        )

    def last_stable_offset(self, tp: TopicPartition, partition_log: Log) -> int:
        """Where read_committed reads end: the first offset of the earliest transaction
        still open, never past ``high_watermark``."""
        return partition_log.stable_offset_below(self.high_watermark(tp, partition_log))

    def owned(self, topic: Topic, ownership: Ownership | None = None) -> list[TopicPartition]:
        """The topic's partitions this broker owns (under ``ownership``, else the current)."""
        every = (TopicPartition(topic.name, p) for p in range(topic.partition_count))
        return [tp for tp in every if (ownership or self.ownership).owns(tp)]

    def ensure_logs(self, topic: Topic) -> None:
        """Create the logs of the topic's partitions that this broker owns (blocking)."""
        for tp in self.owned(topic):
            self.manager.get_or_create_log(tp)

    def follow(self, ownership: Ownership) -> None:
        """Switch to a new plan, creating the logs it gives this broker first, so a
        request that finds this broker the owner finds the log too (blocking). Raises,
        switching nothing, when a log cannot be created yet (a tiered one while the
        store is down: it must know where the tier ends)."""
        for topic in self.topics.topics():
            for tp in self.owned(topic, ownership):
                self.manager.get_or_create_log(tp)
        self.ownership = ownership

    def adopt_logs_on_disk(self) -> None:
        """Topics whose partitions are on disk but not in the store join it (blocking)."""
        counts: dict[str, int] = {}
        for tp in self.manager.partitions:
            counts[tp.topic] = max(counts.get(tp.topic, 0), tp.partition + 1)
        for name, count in counts.items():
            self.topics.adopt(name, count)
        for topic in self.topics.topics():
            self.ensure_logs(topic)
