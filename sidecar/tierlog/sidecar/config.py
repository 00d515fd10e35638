"""The sidecar's process configuration, under Kafka's broker config names.

Built once from ``--config key=value`` pairs over an optional Java properties file
(``tierlog.storage.properties`` reads it), validated, and passed down. Broker-level
log settings (``log.segment.bytes``...) are the defaults of every topic, exactly as in
Kafka, where a topic config overrides its broker twin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.broker.partition_series import PARTITION_SERIES_KEY, series_limit
from tierlog.coordinator.config import GROUP_COORDINATOR_KEYS, GroupCoordinatorConfig
from tierlog.coordinator.transaction_config import (
    TRANSACTION_COORDINATOR_KEYS,
    TransactionCoordinatorConfig,
)
from tierlog.kafka.connection_quotas import CONNECTION_QUOTA_KEYS, ConnectionLimits
from tierlog.kafka.fetch_sessions import FETCH_SESSION_KEYS, FetchSessionConfig
from tierlog.kafka.listener_security import LISTENER_SECURITY_KEYS, ListenerSecurity
from tierlog.replication.config import REPLICATION_KEYS, ReplicationConfig
from tierlog.sidecar.limits import LIMIT_KEYS, LimitsConfig
from tierlog.sidecar.remote_read_config import REMOTE_READ_KEYS, RemoteReadConfig
from tierlog.sidecar.security import SECURITY_KEYS, TlsConfig, read_token
from tierlog.sidecar.tier_config import TIER_KEYS, TierConfig
from tierlog.storage.cleaner_manager import CLEANER_KEYS, CleanerConfig
from tierlog.storage.config import BROKER_TO_TOPIC_KEYS, LogConfig
from tierlog.storage.errors import InvalidConfigError
from tierlog.storage.manager import LogManagerConfig
from tierlog.storage.tier.remote_log_manager import REMOTE_LOG_MANAGER_KEYS, RemoteLogManagerConfig

__all__ = [
    "DEFAULT_LISTEN",
    "SidecarConfig",
    "parse_host_port",
    "parse_listeners",
    "split_listeners",
]

# Kafka's coarser spellings of the same settings, converted to milliseconds.
_UNIT_ALIASES = {
    "log.roll.hours": ("log.roll.ms", 3_600_000),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.retention.minutes": ("log.retention.ms", 60_000),
}

_PROCESS_KEYS = {
    "log.dirs",
    "log.dir",
    "node.id",
    "broker.id",
    "listeners",
    "advertised.listeners",
    "tierlog.cluster.brokers",
    "tierlog.cluster.kafka.brokers",
    "tierlog.cluster.assignment.file",
    "tierlog.shutdown.grace.ms",
    "socket.request.max.bytes",
    "connections.max.idle.ms",
    "tierlog.metrics.listeners",
    PARTITION_SERIES_KEY,
    "cluster.id",
    "num.recovery.threads.per.data.dir",
    "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "log.retention.check.interval.ms",
    "default.replication.factor",
}

# gRPC's message lengths are 32-bit signed.
_GRPC_MAX_MESSAGE_BYTES = 2**31 - 1

DEFAULT_LISTEN = "0.0.0.0:9092"


@dataclass(frozen=True)
class SidecarConfig:
    storage: LogManagerConfig
    checkpoint_interval_ms: int
    # gRPC: where to listen (``listeners``, ``--listen``; port 0 picks a free one), the
    # address clients are told (``advertised.listeners``; default: the bound address),
    # and every broker of the cluster as id -> host:port (``tierlog.cluster.brokers``).
    listen: str = DEFAULT_LISTEN
    advertised_listener: str | None = None
    # Kafka's wire protocol (``listeners``' ``PLAINTEXT://HOST:PORT`` entry,
    # ``--kafka-listen``; None: not served) and the address Kafka clients are told
    # (``advertised.listeners``' ``PLAINTEXT://`` entry; default: the bound address).
    kafka_listen: str | None = None
    kafka_advertised_listener: str | None = None
    # A Kafka client connection that sends no request this long is closed
    # (``connections.max.idle.ms``, Kafka's 10 minutes).
    connections_max_idle_ms: int = 600_000
    # Kafka client connections at once, overall and per address (``max.connections``,
    # ``max.connections.per.ip``, ``max.connections.per.ip.overrides``).
    kafka_connection_limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    # The Kafka listener's security protocol and SASL mechanisms
    # (``listener.security.protocol.map``, ``sasl.enabled.mechanisms``).
    kafka_security: ListenerSecurity = field(default_factory=ListenerSecurity)
    # Kafka consumers' incremental fetch sessions (``max.incremental.fetch.session.cache.slots``).
    kafka_fetch_sessions: FetchSessionConfig = field(default_factory=FetchSessionConfig)
    cluster_brokers: tuple[tuple[int, str], ...] = ()
    # Every broker's advertised Kafka address as id -> host:port
    # (``tierlog.cluster.kafka.brokers``), what Metadata tells Kafka clients.
    cluster_kafka_brokers: tuple[tuple[int, str], ...] = ()
    # The operator's partition plan (``tierlog.cluster.assignment.file``), re-read while
    # running; when set, it lists the brokers instead of ``tierlog.cluster.brokers``.
    assignment_file: Path | None = None
    shutdown_grace_ms: int = 30_000  # in-flight requests get this long after SIGTERM
    # The largest request gRPC reads (``socket.request.max.bytes``, Kafka's 100 MiB): a
    # topic's max.message.bytes may be anything up to it.
    socket_request_max_bytes: int = 100 * 1024 * 1024
    # HTTP for /metrics, /healthz and /readyz (``tierlog.metrics.listeners``,
    # ``--metrics-listen``); None: not served.
    metrics_listen: str | None = None
    # Above this many partitions held, partition-labelled series are summed per topic
    # (``tierlog.metrics.partition.series.max``; -1: never).
    metrics_partition_series_max: int = -1
    # TLS on the gRPC port (``ssl.*``; None: plaintext) and the bearer token every call
    # but health checks must carry (``tierlog.auth.token.file`` or $TIERLOG_AUTH_TOKEN).
    tls: TlsConfig | None = None
    auth_token: str | None = field(default=None, repr=False)
    # Backpressure (``queued.max.requests``, ``queued.max.request.bytes``...).
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    # Reads from the remote tier: the chunk cache, prefetch (``tierlog.remote.*``);
    # None: the defaults, with the cache in a log dir (``log_dir_home``).
    remote_read: RemoteReadConfig | None = None
    # Replication (``tierlog.replication.state.*``, ``replica.*``); None: each
    # partition lives on its one owner.
    replication: ReplicationConfig | None = None
    # Replicas of each partition of a topic created without a replication factor
    # (``default.replication.factor``, Kafka's default 1).
    default_replication_factor: int = 1
    # The group coordinator (``offsets.*``, ``offset.metadata.max.bytes``).
    groups: GroupCoordinatorConfig = field(default_factory=GroupCoordinatorConfig)
    # The transaction coordinator (``transaction.state.log.*``, ``transaction.max.timeout.ms``).
    transactions: TransactionCoordinatorConfig = field(default_factory=TransactionCoordinatorConfig)

    @property
    def remote_read_config(self) -> RemoteReadConfig:
        return self.remote_read or RemoteReadConfig.from_properties({}, self.storage.log_dirs)

    # Uploads to the remote tier (``remote.log.manager.*``, ``remote.log.segment.roll.ms``).
    remote_log_manager: RemoteLogManagerConfig = field(default_factory=RemoteLogManagerConfig)

    # The remote tier's object store (``tierlog.tier.*``); None: the default, a
    # directory ``tier`` in a log dir (``log_dir_home``).
    tier: TierConfig | None = None

    @property
    def tier_config(self) -> TierConfig:
        return self.tier or TierConfig.from_properties({}, self.storage.log_dirs)

    @property
    def node_id(self) -> int:
        return self.storage.node_id

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> SidecarConfig:
        """Validate Kafka-named broker settings; unknown keys are an error, not a typo lost."""
        props = _resolve_aliases(props)
        unknown = (
            set(props)
            - _PROCESS_KEYS
            - set(BROKER_TO_TOPIC_KEYS)
            - set(CLEANER_KEYS)
            - SECURITY_KEYS
            - CONNECTION_QUOTA_KEYS
            - FETCH_SESSION_KEYS
            - LISTENER_SECURITY_KEYS
            - LIMIT_KEYS
            - set(REMOTE_LOG_MANAGER_KEYS)
            - REMOTE_READ_KEYS
            - TIER_KEYS
            - REPLICATION_KEYS
            - GROUP_COORDINATOR_KEYS
            - TRANSACTION_COORDINATOR_KEYS
        )
        if unknown:
            raise InvalidConfigError(f"unknown broker config {', '.join(sorted(unknown))}")
        if "broker.id" in props:  # Kafka's older name of node.id
            props.setdefault("node.id", props.pop("broker.id"))
        log_dirs = props.get("log.dirs") or props.get("log.dir")
        if not log_dirs:
            raise InvalidConfigError("log.dirs (or --data-dir) is required")
        topic_defaults = LogConfig.from_properties(
            {
                BROKER_TO_TOPIC_KEYS[key]: value
                for key, value in props.items()
                if key in BROKER_TO_TOPIC_KEYS
            }
        )
        try:
            storage = LogManagerConfig(
                log_dirs=tuple(Path(part).absolute() for part in log_dirs.split(",") if part),
                node_id=int(props.get("node.id", "0")),
                cluster_id=props.get("cluster.id", "tierlog"),
                default_log_config=topic_defaults,
                flush_check_interval_ms=int(props.get("log.flush.scheduler.interval.ms", "1000")),
                retention_check_interval_ms=int(
                    props.get("log.retention.check.interval.ms", "300000")
                ),
                recovery_threads_per_data_dir=int(
                    props.get("num.recovery.threads.per.data.dir", "2")
                ),
                cleaner=CleanerConfig.from_properties(
                    {key: value for key, value in props.items() if key in CLEANER_KEYS}
                ),
            )
            checkpoint_ms = int(props.get("log.flush.offset.checkpoint.interval.ms", "60000"))
            grace_ms = int(props.get("tierlog.shutdown.grace.ms", "30000"))
            request_max_bytes = int(props.get("socket.request.max.bytes", "104857600"))
            idle_ms = int(props.get("connections.max.idle.ms", "600000"))
            replication_factor = int(props.get("default.replication.factor", "1"))
        except ValueError as error:
            raise InvalidConfigError(f"invalid number in broker config: {error}") from None
        if not 1 <= request_max_bytes <= _GRPC_MAX_MESSAGE_BYTES:
            raise InvalidConfigError(
                f"socket.request.max.bytes must be in 1..{_GRPC_MAX_MESSAGE_BYTES}"
            )
        if idle_ms < 1:
            raise InvalidConfigError(f"connections.max.idle.ms={idle_ms} is below its minimum 1")
        if replication_factor < 1:
            raise InvalidConfigError(
                f"default.replication.factor={replication_factor} is below its minimum 1"
            )
        grpc_listen, kafka_entry = parse_listeners(props.get("listeners", ""), "listeners")
        listen = grpc_listen or DEFAULT_LISTEN
        kafka_listen = None if kafka_entry is None else kafka_entry[1]
        kafka_security = ListenerSecurity.from_properties(
            props, "PLAINTEXT" if kafka_entry is None else kafka_entry[0]
        )
        advertised, kafka_advertised = split_listeners(
            props.get("advertised.listeners", ""), "advertised.listeners"
        )
        tls = TlsConfig.from_properties(props)
        kafka_security.check_tls(tls is not None)
        token_file = props.get("tierlog.auth.token.file")
        metrics_listen = props.get("tierlog.metrics.listeners")
        if metrics_listen:
            parse_host_port(metrics_listen, "tierlog.metrics.listeners")
        tier = TierConfig.from_properties(props, storage.log_dirs)
        replication = ReplicationConfig.from_properties(props)
        return cls(
            storage=storage,
            checkpoint_interval_ms=checkpoint_ms,
            listen=listen,
            advertised_listener=advertised,
            kafka_listen=kafka_listen,
            kafka_advertised_listener=kafka_advertised,
            kafka_security=kafka_security,
            connections_max_idle_ms=idle_ms,
            kafka_connection_limits=ConnectionLimits.from_properties(props),
            kafka_fetch_sessions=FetchSessionConfig.from_properties(props),
            cluster_brokers=_parse_brokers(props, "tierlog.cluster.brokers"),
            cluster_kafka_brokers=_parse_brokers(props, "tierlog.cluster.kafka.brokers"),
            assignment_file=_optional_path(props.get("tierlog.cluster.assignment.file")),
            shutdown_grace_ms=grace_ms,
            socket_request_max_bytes=request_max_bytes,
            metrics_listen=metrics_listen or None,
            metrics_partition_series_max=series_limit(props),
            tls=tls,
            auth_token=read_token(token_file) if token_file else None,
            limits=LimitsConfig.from_properties(props),
            remote_log_manager=RemoteLogManagerConfig.from_properties(props),
            remote_read=RemoteReadConfig.from_properties(props, storage.log_dirs),
            tier=tier,
            replication=replication,
            default_replication_factor=replication_factor,
            groups=GroupCoordinatorConfig.from_properties(props),
            transactions=TransactionCoordinatorConfig.from_properties(props),
        )


def split_listeners(value: str, key: str) -> tuple[str | None, str | None]:
    """``listeners`` (or ``advertised.listeners``) as (gRPC, Kafka) addresses."""
    grpc_entry, kafka_entry = parse_listeners(value, key)
    return grpc_entry, None if kafka_entry is None else kafka_entry[1]


def parse_listeners(value: str, key: str) -> tuple[str | None, tuple[str, str] | None]:
    """``listeners`` (or ``advertised.listeners``) as the gRPC address and the Kafka
    listener's (name, address): a bare ``HOST:PORT`` entry is gRPC's, as it always was;
    ``NAME://HOST:PORT`` the Kafka listener's, in Kafka's own syntax (the name's
    security protocol: ``listener_security``)."""
    grpc_entry: str | None = None
    kafka_entry: tuple[str, str] | None = None
    for entry in filter(None, (part.strip() for part in value.split(","))):
        name, sep, address = entry.partition("://")
        if not sep:
            if grpc_entry is not None:
                raise InvalidConfigError(f"{key} names two gRPC listeners: {value!r}")
            grpc_entry = parse_host_port(entry, key)
        elif kafka_entry is not None:
            raise InvalidConfigError(f"{key} names two Kafka listeners: {value!r}")
        else:
            kafka_entry = (name.upper(), parse_host_port(address, key))
    return grpc_entry, kafka_entry


def parse_host_port(value: str, key: str) -> str:
    """``host:port`` (``[v6]:port`` for IPv6) with a port in 0..65535; returned as given."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidConfigError(f"{key} expects HOST:PORT, got {value!r}")
    return value.strip()


def _parse_brokers(props: Mapping[str, str], key: str) -> tuple[tuple[int, str], ...]:
    """``0@host-0:9092,1@host-1:9092`` (Kafka's ``controller.quorum.voters`` form)."""
    brokers: dict[int, str] = {}
    for part in filter(None, (piece.strip() for piece in props.get(key, "").split(","))):
        node, at, address = part.partition("@")
        if not at or not node.isdigit():
            raise InvalidConfigError(f"{key} expects ID@HOST:PORT, got {part!r}")
        if int(node) in brokers:
            raise InvalidConfigError(f"{key} lists broker {node} twice")
        brokers[int(node)] = parse_host_port(address, key)
    return tuple(sorted(brokers.items()))


def _optional_path(value: str | None) -> Path | None:
    return Path(value.strip()).absolute() if value and value.strip() else None


def _resolve_aliases(props: Mapping[str, str]) -> dict[str, str]:
    resolved = dict(props)
    for alias, (key, unit_ms) in _UNIT_ALIASES.items():
        if alias in resolved:
            value = resolved.pop(alias)
            if key not in resolved:  # the finer-grained setting wins, as in Kafka
                try:
                    resolved[key] = str(int(value) * unit_ms)
                except ValueError:
                    raise InvalidConfigError(f"invalid value {value!r} for {alias}") from None
    return resolved
