"""The admin client: topics, configs, partitions and metadata (Kafka's ``Admin``).

Each call goes to the first bootstrap server that answers (``Cluster.any_broker``).
Topic changes (create, delete, add partitions, alter configs) too where the brokers
share a partition-state store; where each broker keeps its own topics (Metadata's
``topics_per_broker``), they go to every broker Metadata lists, as Kafka's changes reach
every broker through its controller.  Failures, per topic or of the whole call, are
raised as the typed error of their Kafka name; answers are frozen dataclasses.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import grpc

from tierlog.api.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
)
from tierlog.api.v1 import admin_service_pb2, admin_service_pb2_grpc, log_service_pb2
from tierlog.client.cluster import NO_ANSWER, Cluster, ClusterClient
from tierlog.client.config import AdminConfig
from tierlog.client.rpc import error_from_proto, error_from_rpc
from tierlog.client.security import ChannelSecurity
from tierlog.storage.errors import TierlogError, UnknownTopicOrPartitionError
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "AdminClient",
    "AssignmentUpdate",
    "ClusterMetadata",
    "ConfigEntry",
    "PartitionDescription",
    "RestartReadiness",
    "TopicDescription",
]


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader_id: int
    log_start_offset: int  # the offsets, size and count: -1 when its leader did not tell
    high_watermark: int
    size_bytes: int
    segment_count: int
    leader_epoch: int  # -1 while the partition has no leader
    replicas: tuple[int, ...]  # broker ids, the preferred leader first
    isr: tuple[int, ...]  # the in-sync ones among them


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str
    is_default: bool  # not set on the topic: the broker's value


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str
    node_id: int  # the broker that answered
    brokers: Mapping[int, str]  # node id -> address
    leaders: Mapping[str, tuple[int, ...]]  # topic -> leader id per partition


@dataclass(frozen=True)
class AssignmentUpdate:
    node_id: int  # the broker that answered
    generation: int  # of the assignment it follows now
    adopted: bool  # whether it took the one sent (else it held the same or a newer one)


@dataclass(frozen=True)
class RestartReadiness:
    node_id: int  # the broker that answered
    unflushed_messages: int
    tier_enabled: bool
    segments_awaiting_upload: int
    safe: bool


# An admin call at one broker: (method, request) -> response.
_Ask = Callable[[str, object], object]


class AdminClient(ClusterClient):
    """``AdminClient("host:9092")``, several servers as a list, or Kafka-named settings
    (``AdminConfig``: ``bootstrap.servers``, ``request.timeout.ms``, the security ones)."""

    def __init__(
        self,
        config: AdminConfig | Mapping[str, object] | Sequence[str] | str,
        *,
        request_timeout_ms: int | None = None,
        cluster: Cluster | None = None,
        broker_only: bool = False,
    ) -> None:
        self.config = _admin_config(config, request_timeout_ms)
        # Topic changes stay at the broker asked, where each keeps its own topics (the
        # operator syncs every broker itself, reading each one's topics first).
        self._broker_only = broker_only
        self._own_cluster = cluster is None
        self.cluster = cluster or Cluster(
            self.config.bootstrap_servers,
            request_timeout_ms=self.config.request_timeout_ms,
            security=ChannelSecurity.from_config(self.config),
        )
        self._timeout_s = self.config.request_timeout_ms / 1000

    def _call(self, address: str, method: str, request: object) -> object:
        stub = admin_service_pb2_grpc.AdminServiceStub(self.cluster.channel(address))
        return getattr(stub, method)(request, timeout=self._timeout_s)

    def _ask(self, method: str, request: object) -> object:
        """``method`` at the first broker that answers."""
        return self.cluster.any_broker(lambda address: self._call(address, method, request))

    def _ask_once(self, method: str, request: object) -> object:
        """``method`` at one broker at a time (``Cluster.any_broker``'s ``hedged``): a
        change is not made twice because a broker was slow to answer."""
        return self.cluster.any_broker(
            lambda address: self._call(address, method, request), hedged=False
        )

    def _ask_at(self, address: str, method: str, request: object) -> object:
        """``method`` at the broker at ``address``; its failure as the typed error."""
        try:
            return self._call(address, method, request)
        except grpc.RpcError as error:
            raise error_from_rpc(error) from None

    def _change_topic(
        self,
        change: Callable[[_Ask], object],
        *,
        done_already: tuple[type[TierlogError], ...] = (),
    ) -> None:
        """``change(ask)`` where the cluster takes topic changes: one broker if they share
        a store, else each broker Metadata lists. A broker that answers one of
        ``done_already`` (the topic there already, or gone) had it done by an earlier,
        partial attempt: the change succeeds once every broker has it, and raises that
        error only if every broker answered it."""
        if self._broker_only:
            change(self._ask_once)
            return
        metadata = self._ask("Metadata", admin_service_pb2.MetadataRequest(brokers_only=True))
        assert isinstance(metadata, admin_service_pb2.MetadataResponse)
        if not metadata.topics_per_broker or len(metadata.brokers) < 2:
            change(self._ask_once)
            return
        already: list[TierlogError] = []
        changed: list[int] = []
        for broker in sorted(metadata.brokers, key=lambda b: b.node_id):
            try:
                change(functools.partial(self._ask_at, broker.address))
            except done_already as error:
                already.append(error)
            except TierlogError as error:
                error.add_note(
                    f"on broker {broker.node_id} ({broker.address}); brokers {changed} "
                    "took the change: run it again once that broker can take it"
                )
                raise
            else:
                changed.append(broker.node_id)
        if not changed:
            raise already[0]

    # --- topics -----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
        *,
        replication_factor: int | None = None,
        validate_only: bool = False,
    ) -> None:
        """Create ``name``; ``replication_factor`` None: the broker's
        ``default.replication.factor``."""
        # On the wire 0 means 1 partition, and 0 or -1 the default factor: refused here,
        # not silently changed.
        if partitions < 1:
            raise InvalidPartitionsError(f"a topic has at least 1 partition, not {partitions}")
        if replication_factor is not None and replication_factor < 1:
            raise InvalidReplicationFactorError(
                f"a partition has at least 1 replica, not {replication_factor}"
            )
        request = admin_service_pb2.CreateTopicsRequest(
            topics=[
                admin_service_pb2.NewTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication_factor or 0,
                    configs=dict(configs or {}),
                )
            ],
            validate_only=validate_only,
        )

        def create(ask: _Ask) -> None:
            response = ask("CreateTopics", request)
            assert isinstance(response, admin_service_pb2.CreateTopicsResponse)
            _raise_first(response.results)

        if validate_only:  # nothing changes: one broker's verdict is the cluster's
            create(self._ask)
        else:
            self._change_topic(create, done_already=(TopicAlreadyExistsError,))

    def delete_topic(self, name: str) -> None:
        request = admin_service_pb2.DeleteTopicsRequest(names=[name])

        def delete(ask: _Ask) -> None:
            response = ask("DeleteTopics", request)
            assert isinstance(response, admin_service_pb2.DeleteTopicsResponse)
            _raise_first(response.results)

        self._change_topic(delete, done_already=(UnknownTopicOrPartitionError,))

    def list_topics(self) -> dict[str, int]:
        """Topic name -> partition count."""
        response = self._ask("ListTopics", admin_service_pb2.ListTopicsRequest())
        assert isinstance(response, admin_service_pb2.ListTopicsResponse)
        return {topic.name: topic.partition_count for topic in response.topics}

    def describe_topics(self, names: Iterable[str] = ()) -> list[TopicDescription]:
        """Every topic (no names), or the ones named; an unknown one raises.  A partition's
        log start, high watermark, size and segment count come from its leader (the broker
        asked knows only who leads the others): each leader that answers is asked once,
        and what none told stays -1 (with ``broker_only``, the broker asked tells alone)."""
        request = admin_service_pb2.DescribeTopicsRequest(names=list(names))
        response = self._ask("DescribeTopics", request)
        assert isinstance(response, admin_service_pb2.DescribeTopicsResponse)
        described = []
        for topic in response.topics:
            if topic.HasField("error"):
                raise error_from_proto(topic.error)
            described.append(_description(topic))
        if self._broker_only:
            return described
        return self._with_leaders_logs(described)

    def _with_leaders_logs(self, described: list[TopicDescription]) -> list[TopicDescription]:
        """``described`` with each partition whose log the answering broker did not know
        as its leader describes it."""
        leaders = {
            p.leader_id
            for topic in described
            for p in topic.partitions
            if p.leader_id >= 0 and p.log_start_offset < 0
        }
        if not leaders:
            return described
        metadata = self._ask("Metadata", admin_service_pb2.MetadataRequest(brokers_only=True))
        assert isinstance(metadata, admin_service_pb2.MetadataResponse)
        addresses = {broker.node_id: broker.address for broker in metadata.brokers}
        request = admin_service_pb2.DescribeTopicsRequest(names=[t.name for t in described])
        from_leaders: dict[tuple[str, int], PartitionDescription] = {}
        for leader_id in sorted(leaders.intersection(addresses)):
            try:
                answer = self._ask_at(addresses[leader_id], "DescribeTopics", request)
            except NO_ANSWER:
                continue  # its partitions' logs stay unknown
            assert isinstance(answer, admin_service_pb2.DescribeTopicsResponse)
            for topic in answer.topics:
                if topic.HasField("error"):
                    continue
                for p in _description(topic).partitions:
                    if p.leader_id == leader_id and p.log_start_offset >= 0:
                        from_leaders[(topic.name, p.partition)] = p
        return [
            TopicDescription(
                topic.name,
                tuple(from_leaders.get((topic.name, p.partition), p) for p in topic.partitions),
            )
            for topic in described
        ]

    def create_partitions(
        self, topic: str, total_count: int, *, validate_only: bool = False
    ) -> None:
        request = admin_service_pb2.CreatePartitionsRequest(
            topic=topic, total_count=total_count, validate_only=validate_only
        )
        if validate_only:
            self._ask("CreatePartitions", request)
            return
        self._change_topic(lambda ask: ask("CreatePartitions", request))
        self.cluster.invalidate(topic)

    # --- configs ----------------------------------------------------------------------

    def describe_configs(self, topic: str) -> dict[str, ConfigEntry]:
        response = self._ask(
            "DescribeConfigs", admin_service_pb2.DescribeConfigsRequest(topic=topic)
        )
        assert isinstance(response, admin_service_pb2.DescribeConfigsResponse)
        return {
            entry.name: ConfigEntry(
                entry.name, entry.value, entry.source != admin_service_pb2.CONFIG_SOURCE_TOPIC
            )
            for entry in response.entries
        }

    def alter_configs(
        self,
        topic: str,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        request = admin_service_pb2.AlterConfigsRequest(
            topic=topic,
            set_configs=dict(set_configs or {}),
            delete_configs=list(delete_configs),
            validate_only=validate_only,
        )
        if validate_only:
            self._ask("AlterConfigs", request)
            return
        self._change_topic(lambda ask: ask("AlterConfigs", request))

    # --- brokers ----------------------------------------------------------------------

    def prepare_restart(self) -> RestartReadiness:
        """Have the broker flush and checkpoint, and say whether restarting it is safe (ask
        one broker: give this client that broker's address only)."""
        response = self._ask("PrepareRestart", admin_service_pb2.PrepareRestartRequest())
        assert isinstance(response, admin_service_pb2.PrepareRestartResponse)
        return RestartReadiness(
            response.node_id,
            response.unflushed_messages,
            response.tier_enabled,
            response.segments_awaiting_upload,
            response.safe,
        )

    def update_assignment(self, document: str) -> AssignmentUpdate:
        """Hand the broker the operator's partition assignment (``assignment.json``); it
        follows it if it is newer than its own (ask one broker, as ``prepare_restart``)."""
        request = admin_service_pb2.UpdateAssignmentRequest(document=document)
        response = self._ask("UpdateAssignment", request)
        assert isinstance(response, admin_service_pb2.UpdateAssignmentResponse)
        return AssignmentUpdate(response.node_id, response.generation, response.adopted)

    # --- metadata and records ---------------------------------------------------------

    def metadata(self, topics: Iterable[str] = ()) -> ClusterMetadata:
        response = self._ask("Metadata", admin_service_pb2.MetadataRequest(topics=list(topics)))
        assert isinstance(response, admin_service_pb2.MetadataResponse)
        leaders: dict[str, tuple[int, ...]] = {}
        for topic in response.topics:
            if topic.HasField("error"):
                raise error_from_proto(topic.error)
            ordered = sorted(topic.partitions, key=lambda p: p.partition)
            leaders[topic.name] = tuple(p.leader_id for p in ordered)
        return ClusterMetadata(
            response.cluster_id,
            response.node_id,
            {broker.node_id: broker.address for broker in response.brokers},
            leaders,
        )

    def delete_records(self, tp: TopicPartition, before_offset: int) -> int:
        """Move ``tp``'s log start to ``before_offset`` (-1: its end); the new log start."""
        request = log_service_pb2.DeleteRecordsRequest(
            topic=tp.topic, partition=tp.partition, offset=before_offset
        )
        response = self.cluster.call_leader(
            tp, lambda stub: stub.DeleteRecords(request, timeout=self._timeout_s)
        )
        return response.low_watermark


def _admin_config(
    config: AdminConfig | Mapping[str, object] | Sequence[str] | str,
    request_timeout_ms: int | None,
) -> AdminConfig:
    if isinstance(config, str):
        config = AdminConfig(bootstrap_servers=(config,))
    elif isinstance(config, Mapping):
        config = AdminConfig.from_properties(config)
    elif not isinstance(config, AdminConfig):
        config = AdminConfig(bootstrap_servers=tuple(config))
    if request_timeout_ms is not None:
        config = dataclasses.replace(config, request_timeout_ms=request_timeout_ms)
    return config


def _raise_first(results: Iterable[admin_service_pb2.TopicResult]) -> None:
    for result in results:
        if result.HasField("error"):
            raise error_from_proto(result.error)


def _description(topic: admin_service_pb2.TopicDescription) -> TopicDescription:
    return TopicDescription(
        topic.name,
        tuple(
            PartitionDescription(
                p.partition,
                p.leader_id,
                p.log_start_offset,
                p.high_watermark,
                p.size_bytes,
                p.segment_count,
                p.leader_epoch,
                tuple(p.replicas),
                tuple(p.isr),
            )
            for p in topic.partitions
        ),
    )
