"""The broker as the Kafka handlers see it: the core's pieces and the listener's names."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from tierlog.broker.fetch import FetchReader
from tierlog.broker.partitions import Partitions
from tierlog.broker.produce import Appender
from tierlog.broker.producer_ids import ProducerIdManager
from tierlog.broker.scram_credentials import ScramCredentials
from tierlog.broker.topic_changes import TopicChanges
from tierlog.controller.leader_elections import AskedPartitions, ElectionType, TopicOutcomes
from tierlog.coordinator.coordinator import GroupCoordinator
from tierlog.coordinator.transaction_coordinator import TransactionCoordinator
from tierlog.coordinator.txn_marker_append import TxnMarkerAppender
from tierlog.kafka.fetch_sessions import FetchSessionCache
from tierlog.kafka.kept_answers import KeptAnswers
from tierlog.kafka.topic_names import TopicNames
from tierlog.replication.coordinator_lookup import CoordinatorLookup
from tierlog.replication.replica_manager import ReplicaManager

__all__ = ["KafkaBroker", "LeaderElector"]

# ElectLeaders made in a replicated cluster's store (``ReplicatedBroker.elect_leaders``).
LeaderElector = Callable[[ElectionType, AskedPartitions | None], Awaitable[list[TopicOutcomes]]]


def _no_controller() -> int | None:
    return None


def _liveness_unknown() -> frozenset[int] | None:
    return None


@dataclass(frozen=True)
class KafkaBroker:
    partitions: Partitions[ReplicaManager]
    appender: Appender
    reader: FetchReader
    producer_ids: ProducerIdManager  # idempotent producers' ids
    # Where Kafka clients reach this broker (``advertised.listeners``' Kafka entry).
    advertised_host: str
    advertised_port: int
    # The most a Fetch answer carries per partition when the client asks for more.
    fetch_max_bytes: int
    # Topic creation, deletion, growth and config changes (the gRPC AdminService's too).
    topic_changes: TopicChanges
    # Which broker coordinates a group or a transactional id (FindCoordinator).
    coordinators: CoordinatorLookup
    # Committed offsets and KIP-848 groups (OffsetCommit, OffsetFetch, heartbeats,
    # TxnOffsetCommit).
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    # Markers appended to partitions led here (WriteTxnMarkers: ``kafka-transactions abort``).
    txn_markers: TxnMarkerAppender
    # Users' SCRAM credentials, in the cluster's store (DescribeUserScramCredentials,
    # AlterUserScramCredentials; the SCRAM logins read the same store).
    scram_credentials: ScramCredentials
    # The broker whose controller decides now (replicated, on one machine), if known.
    controller: Callable[[], int | None] = _no_controller
    # The brokers whose leases are current, where this broker watches them (else None).
    live: Callable[[], frozenset[int] | None] = _liveness_unknown
    # Consumers' incremental fetch sessions (KIP-227), for every connection.
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)
    # Leader elections on demand, with replication (None: each partition has one replica).
    elect_leaders: LeaderElector | None = None
    # Topic names by id, built once per change of the topics.
    topic_names: TopicNames = field(default_factory=TopicNames)
    # Metadata answers, written once per change of the topics or partition states.
    metadata_answers: KeptAnswers = field(default_factory=KeptAnswers)

    @property
    def node_id(self) -> int:
        return self.partitions.ownership.node_id

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        """Where Kafka clients reach broker ``node_id`` (host, port): this broker's own
        advertised address, another's from the cluster's broker list or the operator's
        plan (read anew on each call: a new plan may add brokers); None when unknown."""
        if node_id == self.node_id:
            return self.advertised_host, self.advertised_port
        for broker in self.partitions.ownership.brokers:
            if broker.node_id == node_id and broker.kafka_address is not None:
                host, _sep, port = broker.kafka_address.rpartition(":")
                return host.strip("[]"), int(port)
        return None

    def topic_names_by_id(self) -> Mapping[uuid.UUID, str]:
        """Every topic's name by the id Metadata reports for it."""
        return self.topic_names.by_id(self.partitions.topics, self.partitions.manager.topic_id)

    def known_brokers(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every broker whose Kafka address is known, by id;
        where leases are watched, only the live ones (and this one), as Kafka lists only
        unfenced brokers: a client then never picks a dead one for its next request."""
        ids = sorted({broker.node_id for broker in self.partitions.ownership.brokers})
        live = self.live()
        if live is not None:
            ids = [node_id for node_id in ids if node_id in live or node_id == self.node_id]
        return [
            (node_id, *address)
            for node_id in ids
            if (address := self.address_of(node_id)) is not None
        ]

    @property
    def controller_id(self) -> int:
        """What Metadata names as the controller: the deciding controller's broker when
        known, else this broker. A KRaft broker names a random live broker, never -1
        while one lives (clients cannot reach KRaft controllers: KIP-590), and a Java
        admin client waits for a controller that is not -1 before CreateTopics."""
        controller = self.controller()
        if controller is not None and self.address_of(controller) is not None:
            return controller
        return self.node_id

    @property
    def cluster_id(self) -> str:
        return self.partitions.manager.config.cluster_id
