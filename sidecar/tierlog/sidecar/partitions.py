"""The partitions this broker serves: from a request's topic and partition to its log.

One lookup order for every call: the topic must exist and have the partition
(UNKNOWN_TOPIC_OR_PARTITION; a bad name is INVALID_TOPIC_EXCEPTION), this broker must
own it (NOT_LEADER_OR_FOLLOWER with the owner), and then its log is the log manager's.
With replication, "own" means "lead", as the replica manager knows from the
partition-state store. A leader epoch the request names is checked before the
ownership (``leader_epoch_check``); without replication the owner's epoch is 0, as
Metadata reports it.
"""

from __future__ import annotations

from tierlog.replication.leader import LeaderPartition
from tierlog.replication.leader_epoch_check import check_leader_epoch
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.sidecar.ownership import Ownership
from tierlog.sidecar.topics import Topic, TopicStore
from tierlog.storage.checkpoints import TopicPartition
from tierlog.storage.log import Log
from tierlog.storage.manager import LogManager
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH

__all__ = ["UNREPLICATED_LEADER_EPOCH", "Partitions"]

UNREPLICATED_LEADER_EPOCH = 0  # an owner without replication (what Metadata reports)


class Partitions:
    def __init__(
        self,
        manager: LogManager,
        topics: TopicStore,
        ownership: Ownership,
        replicas: ReplicaManager | None = None,
    ):
        self.manager = manager
        self.topics = topics
        self.ownership = ownership
        # With replication, the partition-state store says who leads (not ``ownership``).
        self.replicas = replicas

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

    def leadership(self, tp: TopicPartition) -> LeaderPartition | None:
        """``tp``'s leadership on this broker (None without replication: the owner alone
        holds the log, and what it appended is committed)."""
        return None if self.replicas is None else self.replicas.leader(tp)

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
