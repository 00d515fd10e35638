"""The sidecar's gRPC server: the log manager, the topic store and the services, wired.

``SidecarServer.start`` recovers the logs (in a thread), adopts partitions found on
disk, binds the listener and serves ``LogService`` and ``AdminService`` with the
standard health service and server reflection. ``stop`` is the graceful shutdown:
health says NOT_SERVING, long polls and subscriptions are woken and end, the server
stops accepting and gives in-flight calls the grace period, acks=0 appends finish,
and only then does the log manager shut down (flush, checkpoints, clean-shutdown
marker), and then the remote tier's object store closes.

gRPC's 4 MiB default limit on a received message is replaced by Kafka's
``socket.request.max.bytes`` (100 MiB), the bound on any one request. Batch sizes are
the log's to judge: a topic's ``max.message.bytes`` may exceed the broker's
``message.max.bytes`` (as in Kafka), and a batch over its topic's limit is answered
``MESSAGE_TOO_LARGE`` with the reason. A request over ``socket.request.max.bytes`` is
refused by gRPC before it is read into memory (``RESOURCE_EXHAUSTED``, no reason: it
never reached a handler). This limit bounds one request; what produce requests hold
together is the byte budget's to bound (``limits``). What the sidecar sends is not
capped: a Fetch answer is at most its ``max_bytes`` or one stored batch.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tierlog.api.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    group_service_pb2,
    group_service_pb2_grpc,
    log_service_pb2,
    replication_service_pb2,
    replication_service_pb2_grpc,
    transaction_service_pb2,
    transaction_service_pb2_grpc,
)
from tierlog.broker.fetch import FetchReader
from tierlog.broker.internal_topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from tierlog.broker.ownership import Broker, Ownership, read_assignment_file
from tierlog.broker.partition_series import PartitionSeries
from tierlog.broker.partitions import Partitions
from tierlog.broker.produce import Acks, Appender
from tierlog.broker.producer_ids import ProducerIdManager
from tierlog.broker.scram_credentials import CREDENTIALS_FILE, FileDocument, ScramCredentials
from tierlog.broker.topic_changes import TopicChanges
from tierlog.broker.topic_mirror import TopicMirror
from tierlog.broker.topics import TopicStore
from tierlog.broker.watch import AppendWatch
from tierlog.client.rpc import CHANNEL_OPTIONS
from tierlog.coordinator.coordinator import GroupCoordinator
from tierlog.coordinator.group_offsets_mirror import GroupOffsetsMirror
from tierlog.coordinator.restored_groups import RestoredGroups
from tierlog.coordinator.transaction_coordinator import TransactionCoordinator
from tierlog.coordinator.txn_marker_append import TxnMarkerAppender
from tierlog.kafka.broker import KafkaBroker
from tierlog.kafka.fetch_sessions import FetchSessionCache
from tierlog.kafka.listener import KafkaListener
from tierlog.replication.broker import ReplicatedBroker
from tierlog.replication.coordinator_lookup import (
    CoordinatorLookup,
    CoordinatorType,
    CreateTopic,
    InternalTopic,
)
from tierlog.replication.metrics import ReplicationCollector
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.replication.topic_changes import StoreTopicChanges
from tierlog.sidecar.admin import AdminService
from tierlog.sidecar.assignment_updates import AssignmentUpdates
from tierlog.sidecar.config import SidecarConfig
from tierlog.sidecar.fetch_wire import add_log_service
from tierlog.sidecar.group_service import GroupService
from tierlog.sidecar.leader_channels import LeaderChannels
from tierlog.sidecar.limits import LimitsInterceptor
from tierlog.sidecar.metrics import MetricsInterceptor, SidecarMetrics
from tierlog.sidecar.replication_service import ReplicationService
from tierlog.sidecar.restore import (
    begin_restore,
    restore_locally,
    restore_replicated,
    restore_topics,
)
from tierlog.sidecar.security import BearerTokenInterceptor
from tierlog.sidecar.service import Limits, LogService
from tierlog.sidecar.transaction_service import TransactionService
from tierlog.sidecar.txn_markers import MarkerRouter
from tierlog.sidecar.txn_verification import RemoteVerifier
from tierlog.sidecar.upload_metrics import UploadMetrics
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.log import AppendOrigin
from tierlog.storage.manager import LogManager
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH
from tierlog.storage.recovery import RecoveryProgress
from tierlog.storage.tier.chunk_cache import ChunkCache
from tierlog.storage.tier.range_reader import RangeReader
from tierlog.storage.tier.remote_log_manager import RemoteLogManager
from tierlog.storage.tier.remote_reader import RemoteLogReader
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.tiered_cleaner import TierCleaner
from tierlog.storage.tier.url import open_store
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["SidecarServer"]

log = logging.getLogger(__name__)

_SERVICE_DESCRIPTORS = (
    log_service_pb2.DESCRIPTOR.services_by_name["LogService"],
    admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"],
    group_service_pb2.DESCRIPTOR.services_by_name["GroupService"],
    transaction_service_pb2.DESCRIPTOR.services_by_name["TransactionService"],
)
# Beside the chunk cache: where the tier cleaner writes a cleaned segment before its PUT.
TIER_CLEANER_SCRATCH_DIR = "tier-cleaner"
_REPLICATION = replication_service_pb2.DESCRIPTOR.services_by_name["ReplicationService"]


class SidecarServer:
    def __init__(self, config: SidecarConfig, metrics: SidecarMetrics | None = None):
        self.config = config
        self.metrics = metrics or SidecarMetrics()
        self.topics = TopicStore(config.storage.log_dirs, config.storage.default_log_config)
        # The remote tier's object store: a directory ``tier`` in a log dir
        # unless --tier-url names another (file:// or s3://); ``remote.storage.enable``
        # topics upload to it. Closed after the logs in stop().
        tier = config.tier_config
        self.tier_store: ObjectStore = open_store(tier.url, tier.s3, observer=self.metrics)
        log.info("remote tier: %s", self.tier_store.url)
        upload_metrics = UploadMetrics(self.metrics.registry)
        self.remote_log_manager = RemoteLogManager(
            self.tier_store, config.remote_log_manager, observer=upload_metrics
        )
        self.topic_mirror = TopicMirror(
            self.tier_store, config.storage.default_log_config, self._topic_id
        )
        self.topics.on_change = self.topic_mirror.changed
        self.manager = LogManager(
            config.storage,
            topic_config=self.topics.log_config,
            on_flush=self.metrics.observe_flush,
            tier=self.remote_log_manager,
            decompression_budget=config.limits.decompression_budget(),
        )
        self.partition_series = PartitionSeries(
            config.metrics_partition_series_max, lambda: self.manager.partition_count
        )
        self.metrics.watch(self.manager, self.partition_series)
        upload_metrics.watch(self.remote_log_manager, self.partition_series)
        self.watch = AppendWatch()
        self.health = health.aio.HealthServicer()
        # The first sees every call first: metrics count refusals by the others too.
        interceptors: list[grpc.aio.ServerInterceptor] = [MetricsInterceptor(self.metrics)]
        if config.auth_token:
            interceptors.append(BearerTokenInterceptor(config.auth_token))
        interceptors.append(LimitsInterceptor(config.limits, self.metrics.observe_produce_bytes))
        self.server = grpc.aio.server(
            interceptors=interceptors,
            options=[("grpc.max_receive_message_length", config.socket_request_max_bytes)],
        )
        self.address = ""
        self.remote_reader: RemoteLogReader | None = None  # once started
        self.appender: Appender | None = None  # once started: the produce core
        self.reader: FetchReader | None = None  # once started: the fetch core
        self.producer_ids: ProducerIdManager | None = None  # once started
        self._log_service: LogService | None = None
        self.topic_changes: TopicChanges | None = None  # once started: the topic changes core
        self.kafka: KafkaListener | None = None  # with a Kafka listener, once started
        self.groups: GroupCoordinator | None = None  # once started
        # Its groups' offsets of tiered topics, copied into the bucket (once started).
        self.group_offsets_mirror: GroupOffsetsMirror | None = None
        self.transactions: TransactionCoordinator | None = None  # once started
        # The leader's half of WriteTxnMarkers, for every sender (once started).
        self.txn_markers: TxnMarkerAppender | None = None
        self._leader_channels: LeaderChannels | None = None  # once started
        self.replicated: ReplicatedBroker | None = None  # with replication, once started
        self._checkpoints: asyncio.Task[None] | None = None
        self._reloads: asyncio.Task[None] | None = None
        self._mirror_sync: asyncio.Task[None] | None = None

    async def start(self, progress: RecoveryProgress | None = None) -> None:
        # The tier takes over only partitions this broker holds (ownership.py): none
        # until the plan is read below.
        self.remote_log_manager.scope = lambda _tp: False
        log_dirs = self.config.storage.log_dirs
        restoring = self.config.tier_config.restore and await asyncio.to_thread(
            begin_restore, log_dirs
        )
        if restoring and self.config.replication is None:  # before the logs load from it
            await asyncio.to_thread(
                restore_topics, log_dirs, self.tier_store, restore_locally(self.topics)
            )
        self.metrics.recovery.started()
        await asyncio.to_thread(self.manager.startup, progress or self.metrics.recovery)
        await asyncio.to_thread(self.topics.sync)  # the log dirs are this broker's now
        # In the background: a store that is down must not hold the start up.
        self._mirror_sync = asyncio.create_task(
            asyncio.to_thread(self.topic_mirror.sync, self.topics.topics())
        )
        self.metrics.recovery.finished()
        tls = self.config.tls
        if tls is None:
            port = self.server.add_insecure_port(self.config.listen)
        else:
            port = self.server.add_secure_port(self.config.listen, tls.server_credentials())
        if port == 0:
            raise InvalidConfigError(f"cannot listen on {self.config.listen}")
        host = self.config.listen.rpartition(":")[0]
        self.address = f"{host}:{port}"
        # The replica manager reads the brokers from the partitions' current ownership,
        # which it is made before: its lambdas look ``partitions`` up when called.
        replicas = None
        if self.config.replication is not None:
            replicas = await self._replica_manager(lambda: partitions.ownership.brokers)
        partitions = Partitions(self.manager, self.topics, self._ownership(host, port), replicas)
        assignment = AssignmentUpdates(partitions, self.config.assignment_file)
        if partitions.replicas is None:
            self.remote_log_manager.scope = lambda tp: partitions.ownership.holds(tp)
        else:  # only the leader uploads (a new leader continues the tier)
            leaders = partitions.replicas.leaders
            self.remote_log_manager.scope = lambda tp: tp in leaders
            self.remote_log_manager.joins_new_logs = lambda tp: tp in leaders
        self.remote_log_manager.committed_end = partitions.high_watermark
        if restoring and partitions.replicas is not None:  # before it applies the store
            restore = restore_replicated(
                partitions.replicas.store,
                partitions.replicas.racks(),
                self.topics,
                self.tier_store,
                self.config.default_replication_factor,
            )
            await asyncio.to_thread(restore_topics, log_dirs, self.tier_store, restore)
        await asyncio.to_thread(partitions.adopt_logs_on_disk)
        self.remote_reader = await asyncio.to_thread(self._remote_reader)
        self.appender = Appender(partitions, self.watch, INTERNAL_TOPICS)
        self.reader = FetchReader(
            partitions,
            self.watch,
            self.remote_reader,
            partition_concurrency=self.config.remote_read_config.reader_threads,
        )
        producer_ids = ProducerIdManager(self.config.storage.log_dirs, self.config.node_id)
        self.producer_ids = producer_ids
        self._log_service = LogService(
            partitions,
            self.appender,
            self.reader,
            self.producer_ids,
            Limits(fetch_max_bytes=self.config.storage.default_log_config.max_message_bytes),
        )
        descriptors = list(_SERVICE_DESCRIPTORS)
        if partitions.replicas is not None:
            descriptors.append(_REPLICATION)
        services = tuple(service.full_name for service in descriptors)
        self.metrics.expect_calls(descriptors)
        add_log_service(self._log_service, self.server)
        topic_changes = TopicChanges(
            partitions,
            self.watch,
            default_replication_factor=self.config.default_replication_factor,
            cluster=(
                None
                if partitions.replicas is None
                else StoreTopicChanges(partitions.replicas, self.topics)
            ),
        )
        self.topic_changes = topic_changes
        admin = AdminService(partitions, topic_changes, assignment)
        admin_service_pb2_grpc.add_AdminServiceServicer_to_server(admin, self.server)
        self.groups = GroupCoordinator(
            partitions,
            self.config.groups,
            self._append_as_coordinator,
            partition_series=self.partition_series,
            restored=await asyncio.to_thread(
                RestoredGroups,
                log_dirs[0],
                self.config.groups.offsets_retention_ms,
                int(time.time() * 1000),
            ),
        )
        self.metrics.registry.register(self.groups.metrics)
        group_offsets_mirror = GroupOffsetsMirror(
            self.tier_store,
            self.groups,
            lambda topic: self.topics.log_config(topic).remote_storage_enable,
            self.config.remote_log_manager.task_interval_ms,
        )
        self.groups.on_offsets_deleted = group_offsets_mirror.offsets_deleted
        self.group_offsets_mirror = group_offsets_mirror
        txn_markers = TxnMarkerAppender(self._append_as_coordinator, self.groups)
        self.txn_markers = txn_markers
        token = self.config.auth_token
        self._leader_channels = LeaderChannels(
            partitions,
            self._replica_channel,
            [("authorization", f"Bearer {token}")] if token else [],
        )
        self.transactions = TransactionCoordinator(
            partitions,
            self.config.transactions,
            self._append_committed,
            MarkerRouter(self._leader_channels, txn_markers.append).write,
            lambda: producer_ids.init_producer_id(-1, -1)[0],
            RemoteVerifier(self._leader_channels).verify,
        )
        self.metrics.registry.register(self.transactions.metrics)
        lookup = self._coordinator_lookup(partitions, topic_changes.create_topic)
        group_service = GroupService(partitions, self.groups, lookup)
        group_service_pb2_grpc.add_GroupServiceServicer_to_server(group_service, self.server)
        transaction_service_pb2_grpc.add_TransactionServiceServicer_to_server(
            TransactionService(
                self.transactions,
                lookup.ensure_transaction_topic,
                txn_markers.append,
                lookup.ensure_offsets_topic,
            ),
            self.server,
        )
        if partitions.replicas is not None:
            replication_service_pb2_grpc.add_ReplicationServiceServicer_to_server(
                ReplicationService(
                    partitions.replicas, self.watch, self.config.socket_request_max_bytes
                ),
                self.server,
            )
        if self.config.kafka_listen is not None:
            self.kafka = await self._kafka_listener(partitions, lookup)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (*services, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
        )
        await self.server.start()
        for service in ("", *services):
            await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self._checkpoints = asyncio.create_task(self._write_checkpoints())
        if self.replicated is not None:
            await self.replicated.start()
        await self.groups.start()
        group_offsets_mirror.start()
        await self.transactions.start()
        if self.config.assignment_file is not None:
            self._reloads = asyncio.create_task(assignment.follow_file())

    def _topic_id(self, topic: str) -> uuid.UUID:
        return self.manager.topic_id(topic)

    def _coordinator_lookup(
        self, partitions: Partitions[ReplicaManager], create_topic: CreateTopic
    ) -> CoordinatorLookup:
        """Where groups and transactional ids are coordinated, for both front doors."""
        assert self.groups is not None and self.transactions is not None
        groups = self.config.groups
        transactions = self.config.transactions
        return CoordinatorLookup(
            partitions,
            create_topic,
            {
                CoordinatorType.GROUP: InternalTopic(
                    OFFSETS_TOPIC,
                    self.groups.partition_of,
                    groups.offsets_topic_partitions,
                    groups.offsets_topic_replication_factor,
                    groups.offsets_topic_configs(),
                ),
                CoordinatorType.TRANSACTION: InternalTopic(
                    TRANSACTION_STATE_TOPIC,
                    self.transactions.partition_of,
                    transactions.topic_partitions,
                    transactions.topic_replication_factor,
                    transactions.topic_configs(),
                ),
            },
        )

    async def _kafka_listener(
        self, partitions: Partitions[ReplicaManager], lookup: CoordinatorLookup
    ) -> KafkaListener:
        """Kafka's wire protocol over the same produce and fetch cores as LogService, and
        the same coordinators as the group and transaction services."""
        assert self.config.kafka_listen is not None
        assert self.appender is not None and self.reader is not None
        assert self.producer_ids is not None
        assert self.transactions is not None and self.groups is not None
        assert self.txn_markers is not None
        topic_changes = self.topic_changes
        assert topic_changes is not None
        scram_credentials = self._scram_credentials()
        listener = KafkaListener(
            self.config.kafka_listen,
            self.config.socket_request_max_bytes,
            self.config.connections_max_idle_ms,
            self.metrics.kafka,
            self.config.kafka_connection_limits,
            self.config.kafka_security.sasl(self.config.auth_token, scram_credentials),
            self._kafka_tls(),
        )
        advertised = self.config.kafka_advertised_listener or _reachable(listener.address)
        host, _sep, port = advertised.rpartition(":")
        broker = KafkaBroker(
            partitions,
            self.appender,
            self.reader,
            self.producer_ids,
            host.strip("[]"),
            int(port),
            fetch_max_bytes=self.config.storage.default_log_config.max_message_bytes,
            coordinators=lookup,
            transactions=self.transactions,
            txn_markers=self.txn_markers,
            scram_credentials=scram_credentials,
            groups=self.groups,
            topic_changes=topic_changes,
            controller=self.replicated.deciding_controller if self.replicated else lambda: None,
            live=self.replicated.live_brokers if self.replicated else lambda: None,
            fetch_sessions=FetchSessionCache(self.config.kafka_fetch_sessions),
            elect_leaders=self.replicated.elect_leaders if self.replicated else None,
        )
        await listener.start(broker)
        self.metrics.kafka.serving(broker.fetch_sessions)
        return listener

    def _scram_credentials(self) -> ScramCredentials:
        """Users' SCRAM credentials: in the partition-state store with replication, so
        every broker reads the same; else in this broker's first log dir."""
        if self.replicated is not None:
            return ScramCredentials(self.replicated.store.scram_credentials())
        log_dir = self.config.storage.log_dirs[0]
        return ScramCredentials(FileDocument(log_dir / CREDENTIALS_FILE))

    def _kafka_tls(self) -> ssl.SSLContext | None:
        """The gRPC port's certificate and client checks, on an SSL or SASL_SSL listener."""
        if not self.config.kafka_security.uses_tls:
            return None
        assert self.config.tls is not None  # the config checked it
        return self.config.tls.server_ssl_context()

    async def _replica_manager(self, brokers: Callable[[], Sequence[Broker]]) -> ReplicaManager:
        """Replication over the partition-state store the config names: this broker's
        lease taken (a new incarnation: the next broker epoch), the replica manager made."""
        settings = self.config.replication
        assert settings is not None
        self.replicated = ReplicatedBroker(self.config.node_id, settings, self.topics)
        broker_epoch = await self.replicated.take_lease(bool(self.manager.formatted_log_dirs))
        token = self.config.auth_token
        replicas = ReplicaManager(
            self.config.node_id,
            lambda: broker_epoch,
            self.replicated.store,
            self.manager,
            self.topics,
            self.watch,
            lambda: {broker.node_id: broker.address for broker in brokers()},
            self._replica_channel,
            [("authorization", f"Bearer {token}")] if token else [],
            settings,
            racks=lambda: {broker.node_id: broker.rack for broker in brokers()},
            shared_tier=(
                None
                if self.config.tier_config.private_to(self.config.storage.log_dirs)
                else self.tier_store
            ),
        )
        self.replicated.replicas = replicas
        self.metrics.registry.register(ReplicationCollector(replicas, self.replicated.controller))
        return replicas

    async def _append_committed(
        self, tp: TopicPartition, data: bytes, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> int:
        """The coordinators' writes: an acks=all produce; the base offset. Transaction
        markers come as ``AppendOrigin.COORDINATOR``, the only origin allowed them."""
        assert self.appender is not None
        _tp, target = self.appender.target(
            tp.topic, tp.partition, NO_PARTITION_LEADER_EPOCH, Acks.ALL, internal=True
        )
        appended = await self.appender.append(tp, target, data, Acks.ALL, origin)
        return (await self.appender.committed(appended)).base_offset

    async def _append_as_coordinator(self, tp: TopicPartition, data: bytes) -> int:
        """The group coordinator's writes (as Kafka's, ``AppendOrigin.COORDINATOR``: its
        transactional offset commits carry a producer id but no sequence)."""
        return await self._append_committed(tp, data, AppendOrigin.COORDINATOR)

    def _replica_channel(self, address: str) -> grpc.aio.Channel:
        """A follower's channel to its leader, as clients dial brokers: over TLS (trusting
        ``ssl.truststore.location`` and showing this broker's certificate) when the
        brokers serve TLS."""
        # The clients' channel tuning: back within a second of a broker's restart, where
        # gRPC's own reconnect back-off grows to minutes, and its name resolved again.
        options = list(CHANNEL_OPTIONS)
        tls = self.config.tls
        if tls is None:
            return grpc.aio.insecure_channel(address, options=options)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=tls.client_ca,
            private_key=tls.private_key,
            certificate_chain=tls.certificate_chain,
        )
        return grpc.aio.secure_channel(address, credentials, options=options)

    def _remote_reader(self) -> RemoteLogReader:
        """The tier's reader over its chunk cache (blocking: the cache scans its directory)."""
        settings = self.config.remote_read_config
        cache = ChunkCache(
            settings.cache_dir,
            chunk_bytes=settings.chunk_bytes,
            max_bytes=settings.cache_max_bytes,
            max_entries=settings.cache_max_entries,
        )
        ranges = RangeReader(
            self.tier_store,
            cache,
            prefetch_chunks=settings.prefetch_chunks,
            max_prefetch_chunks=settings.max_prefetch_chunks,
            threads=settings.reader_threads,
            on_fetch=self.metrics.observe_remote_fetch,
            read_ahead_memory_bytes=settings.prefetch_memory_bytes,
        )
        reader = RemoteLogReader(ranges)
        # Compacted tiered topics: their tier is cleaned through the same chunk cache,
        # with an offset map of one local cleaner thread's budget and the local
        # cleaner's throttle (log.cleaner.io.max.bytes.per.second covers both).
        self.remote_log_manager.cleaner = TierCleaner(
            self.manager.cleaner.new_cleaner(),
            ranges,
            settings.cache_dir.parent / TIER_CLEANER_SCRATCH_DIR,
            observer=self.remote_log_manager.observer,
        )
        self.remote_log_manager.on_manifest_change(reader.offer)
        self.metrics.watch_remote_reads(reader)
        return reader

    def _ownership(self, host: str, port: int) -> Ownership:
        node_id = self.config.node_id
        if self.config.assignment_file is not None:
            try:
                return read_assignment_file(self.config.assignment_file, node_id)
            except (OSError, ValueError) as error:
                raise InvalidConfigError(f"tierlog.cluster.assignment.file: {error}") from None
        kafka = dict(self.config.cluster_kafka_brokers)
        listed = tuple(
            Broker(node, address, kafka_address=kafka.get(node))
            for node, address in self.config.cluster_brokers
        )
        strangers = kafka.keys() - {broker.node_id for broker in listed}
        if strangers:
            raise InvalidConfigError(
                "tierlog.cluster.kafka.brokers names brokers tierlog.cluster.brokers does not: "
                f"{sorted(strangers)}"
            )
        if listed:
            try:
                return Ownership(node_id, listed)
            except ValueError as error:
                raise InvalidConfigError(f"tierlog.cluster.brokers: {error}") from None
        advertised = self.config.advertised_listener or _reachable(f"{host}:{port}")
        return Ownership(node_id, (Broker(node_id, advertised),))

    async def _write_checkpoints(self) -> None:
        interval_s = self.config.checkpoint_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self.manager.write_checkpoints)

    async def stop(self) -> None:
        """Graceful shutdown; the log manager's clean shutdown comes last."""
        await self.health.enter_graceful_shutdown()
        if self.group_offsets_mirror is not None:
            await self.group_offsets_mirror.stop()
        if self.groups is not None:
            await self.groups.stop()
        if self.transactions is not None:
            await self.transactions.stop()
        if self._leader_channels is not None:
            await self._leader_channels.close()
        if self.replicated is not None:
            await self.replicated.controlled_shutdown()
            await self.replicated.stop()
        self.watch.close()
        if self.kafka is not None:
            await self.kafka.stop()
        for task in (self._checkpoints, self._reloads):
            if task is not None:
                task.cancel()
        await self.server.stop(self.config.shutdown_grace_ms / 1000)
        if self.appender is not None:
            await self.appender.drain()
        await asyncio.to_thread(self.manager.shutdown)  # stops the uploads first
        if self.reader is not None:
            await asyncio.to_thread(self.reader.close)
        if self._mirror_sync is not None:
            await self._mirror_sync  # it uses the store closed below
        if self.remote_reader is not None:
            await asyncio.to_thread(self.remote_reader.ranges.close)
        await asyncio.to_thread(self.tier_store.close)


def _reachable(bound: str) -> str:
    """The address to tell clients for a bound ``host:port``: this host's name when bound
    to every interface."""
    host, _sep, port = bound.rpartition(":")
    wildcard = host in ("", "0.0.0.0", "[::]", "::")
    return f"{socket.getfqdn() if wildcard else host}:{port}"
