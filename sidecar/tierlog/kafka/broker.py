"""The broker as the Kafka handlers see it: the core's pieces and the listener's names."""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.broker.fetch import FetchReader
from tierlog.broker.partitions import Partitions
from tierlog.broker.produce import Appender
from tierlog.broker.producer_ids import ProducerIdManager
from tierlog.coordinator.coordinator import GroupCoordinator
from tierlog.replication.coordinator_lookup import CoordinatorLookup
from tierlog.replication.replica_manager import ReplicaManager

__all__ = ["KafkaBroker"]


@dataclass(frozen=True)
class KafkaBroker:
    partitions: Partitions[ReplicaManager]
    appender: Appender
    reader: FetchReader
    producer_ids: ProducerIdManager  # idempotent producers' ids (transactional ones: later)
    # Where Kafka clients reach this broker (``advertised.listeners``' Kafka entry).
    advertised_host: str
    advertised_port: int
    # The most a Fetch answer carries per partition when the client asks for more.
    fetch_max_bytes: int
    # Which broker coordinates a group or a transactional id (FindCoordinator).
    coordinators: CoordinatorLookup
    # Committed offsets and KIP-848 groups (OffsetCommit, OffsetFetch, heartbeats).
    groups: GroupCoordinator

    @property
    def node_id(self) -> int:
        return self.partitions.ownership.node_id

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        """Where Kafka clients reach broker ``node_id`` (host, port); None when this
        broker does not know (it knows only its own address so far)."""
        if node_id == self.node_id:
            return self.advertised_host, self.advertised_port
        return None

    @property
    def cluster_id(self) -> str:
        return self.partitions.manager.config.cluster_id
