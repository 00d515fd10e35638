"""Which broker coordinates a group or a transactional id, for both front doors.

A key's coordinator is the leader of the coordinator topic's partition the key hashes
to (``__consumer_offsets`` for groups, ``__transaction_state`` for transactional ids),
so every broker answers the same without asking anyone. The topic is created on first
use, as Kafka's broker does (and by every call that needs it: without replication each
broker keeps its own topic list): its configured partition count and compaction, its
replication factor capped to the brokers there are (one without replication).

This module sits below the coordinators: it takes each topic's name, key-to-partition
rule and settings as an ``InternalTopic`` the server builds from them.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from tierlog.api.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    TopicAlreadyExistsError,
)
from tierlog.broker.partitions import Partitions
from tierlog.partition_state.model import NO_LEADER
from tierlog.replication.leadership import partition_leadership
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "Coordinator",
    "CoordinatorLookup",
    "CoordinatorType",
    "CreateTopic",
    "InternalTopic",
    "coordinator_type",
]

log = logging.getLogger(__name__)

# Creates a topic as CreateTopics does: (name, partitions, replication factor, configs);
# TOPIC_ALREADY_EXISTS when another broker was first.
CreateTopic = Callable[[str, int, int, Mapping[str, str]], Awaitable[None]]


class CoordinatorType(enum.IntEnum):
    """Kafka's ``key_type`` of FindCoordinator (share groups, 2, are not served)."""

    GROUP = 0
    TRANSACTION = 1


@dataclass(frozen=True)
class InternalTopic:
    """A coordinator's topic: which partition holds a key, and how the topic is made."""

    name: str
    partition_of: Callable[[str], int]  # raises on a key the coordinator refuses
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@dataclass(frozen=True)
class Coordinator:
    """The broker that coordinates a key: its node id and gRPC address (a Kafka client
    is told its Kafka address, which the listener knows by node id)."""

    node_id: int
    address: str
    partition: TopicPartition


class CoordinatorLookup:
    def __init__(
        self,
        partitions: Partitions[ReplicaManager],
        create_topic: CreateTopic,
        topics: Mapping[CoordinatorType, InternalTopic],
    ):
        self.partitions = partitions
        self.create_topic = create_topic
        self.topics = topics

    async def find(self, key_type: CoordinatorType, key: str) -> Coordinator:
        """The coordinator of ``key``, its topic created first if needed;
        COORDINATOR_NOT_AVAILABLE while the partition has no leader."""
        topic = self._topic(key_type)
        tp = TopicPartition(topic.name, topic.partition_of(key))
        await self._ensure(topic)
        leadership = partition_leadership(self.partitions, tp)
        if leadership.leader_id == NO_LEADER or not leadership.leader_address:
            raise CoordinatorNotAvailableError(f"{tp} has no leader right now; retry")
        return Coordinator(leadership.leader_id, leadership.leader_address, tp)

    async def ensure_offsets_topic(self) -> None:
        """``__consumer_offsets``, created on first use (every group call, and
        AddOffsetsToTxn, which may come before any)."""
        await self._ensure(self._topic(CoordinatorType.GROUP))

    async def ensure_transaction_topic(self) -> None:
        """``__transaction_state``, created on first use (every transaction call)."""
        await self._ensure(self._topic(CoordinatorType.TRANSACTION))

    def _topic(self, key_type: CoordinatorType) -> InternalTopic:
        topic = self.topics.get(key_type)
        if topic is None:
            raise CoordinatorNotAvailableError(f"this broker runs no {key_type.name} coordinator")
        return topic

    async def _ensure(self, topic: InternalTopic) -> None:
        try:
            self.partitions.topics.get(topic.name)
            return
        except TierlogError:
            pass
        replicas = self.partitions.replicas
        factor = 1
        if replicas is not None:  # Kafka's default of 3, on the brokers there are
            factor = min(topic.replication_factor, len(replicas.racks()))
        try:
            await self.create_topic(topic.name, topic.partitions, factor, topic.configs)
            log.info(
                "created %s: %d partitions, replication factor %d",
                topic.name,
                topic.partitions,
                factor,
            )
        except TopicAlreadyExistsError:
            pass  # another broker was first


def coordinator_type(key_type: int) -> CoordinatorType:
    """``key_type`` as a ``CoordinatorType``; INVALID_REQUEST for another."""
    try:
        return CoordinatorType(key_type)
    except ValueError:
        raise InvalidRequestError(
            f"coordinator key type {key_type}: 0 (group) or 1 (transaction)"
        ) from None
