"""Producer and consumer settings under Apache Kafka's client config names and defaults.

Built once, validated once, passed down (as ``LogConfig`` is for topics).  Construct
the dataclass directly with Python names (``ProducerConfig(linger_ms=20)``) or from
Kafka-named properties (``ProducerConfig.from_properties({"linger.ms": "20"})``).

Two of Kafka's rules depend on what the user *said*, not on the values, so only
``from_properties`` can apply them, as Kafka's ``ProducerConfig`` does:

- ``enable.idempotence`` is on by default; if the user did not set it but set
  ``acks`` other than ``all``, ``retries=0`` or more than 5 requests in flight, it is
  quietly turned off.  Said explicitly, or with a ``transactional.id`` (which needs
  idempotence), the contradiction is an error.
- ``delivery.timeout.ms`` must cover ``linger.ms + request.timeout.ms``; if the user
  did not set it, it is raised to that sum.

A dataclass built directly takes every value as said, so contradictions are errors.

``CommonClientConfig`` holds what every client needs to reach the sidecars (Kafka's
``CommonClientConfigs``): the bootstrap servers and the transport's security, with
Kafka's ``security.protocol`` (``PLAINTEXT`` or ``SSL``) and PEM trust and key stores
(``ssl.truststore.location``, ``ssl.keystore.location``, and the key in its own file
under the sidecar's name for it, ``tierlog.ssl.keystore.key.location``), plus the
sidecar's bearer token (``tierlog.auth.token.file``, else ``$TIERLOG_AUTH_TOKEN``;
``tierlog.client.security`` reads the files).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from tierlog.client.errors import ConfigError
from tierlog.storage.records import CompressionType

__all__ = [
    "MAX_IN_FLIGHT_FOR_IDEMPOTENCE",
    "SECURITY_PROTOCOLS",
    "AdminConfig",
    "CommonClientConfig",
    "ConsumerConfig",
    "ProducerConfig",
]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
MAX_IN_FLIGHT_FOR_IDEMPOTENCE = 5  # the broker caches the last 5 batches per producer
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL")  # SSL: TLS, and mutual TLS with a keystore

_COMPRESSION_TYPES = {
    "none": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def _key(
    name: str,
    default: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    choices: tuple[str, ...] = (),
) -> Any:
    if isinstance(default, int) and not isinstance(default, bool) and maximum is None:
        maximum = INT_MAX  # Kafka's numeric client configs are Java ints unless noted
    meta = {"key": name, "min": minimum, "max": maximum, "choices": choices}
    return field(default=default, metadata=meta)


class _KafkaNamedConfig:
    """``from_properties`` / ``to_properties`` over dataclass fields that carry a Kafka key."""

    kind: ClassVar[str]
    # Kafka configs this kind refuses by name, with the reason (not "not a ... config").
    refused: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Kafka config name -> field name."""
        return {f.metadata["key"]: f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def _parse_properties(cls, props: Mapping[str, object]) -> dict[str, Any]:
        names = cls.keys()
        types = {f.name: f.type for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values: dict[str, Any] = {}
        for key, raw in props.items():
            if key in cls.refused:
                raise ConfigError(key, cls.refused[key])
            if key not in names:
                raise ConfigError(key, f"not a {cls.kind} config")
            values[names[key]] = _parse(key, raw, types[names[key]])
        return values

    def to_properties(self) -> dict[str, str]:
        """Every setting under its Kafka name, as Kafka would print it."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, bool):
                text = str(value).lower()
            elif isinstance(value, tuple):
                text = ",".join(value)
            else:
                text = str(value)
            out[f.metadata["key"]] = text
        return out

    def _validate_fields(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            _check(f, getattr(self, f.name))


def _parse(key: str, raw: object, type_name: object) -> Any:
    if type_name in ("bool", bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise ConfigError(key, f"expected true or false, not {raw!r}")
        return text == "true"
    if type_name in ("int", int):
        if isinstance(raw, bool):
            raise ConfigError(key, f"expected an integer, not {raw!r}")
        try:
            return int(str(raw).strip())
        except ValueError:
            raise ConfigError(key, f"expected an integer, not {raw!r}") from None
    if type_name in ("tuple[str, ...]",):
        if isinstance(raw, (list, tuple)):
            return tuple(str(item).strip() for item in raw)
        return tuple(part.strip() for part in str(raw).split(",") if part.strip())
    return str(raw).strip()


def _check(f: dataclasses.Field[Any], value: Any) -> None:
    key = f.metadata["key"]
    minimum, maximum, choices = f.metadata["min"], f.metadata["max"], f.metadata["choices"]
    expected = {"int": int, "bool": bool, "str": str, "tuple[str, ...]": tuple}[str(f.type)]
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ConfigError(key, f"expected {f.type}, not {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(key, f"{value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(key, f"{value} is above the maximum {maximum}")
    if choices and value not in choices:
        raise ConfigError(key, f"{value!r} is not one of {', '.join(choices)}")


@dataclass(frozen=True)
class CommonClientConfig(_KafkaNamedConfig):
    """The settings every client shares: where the sidecars are and how to reach them."""

    kind: ClassVar[str] = "client"

    bootstrap_servers: tuple[str, ...] = _key("bootstrap.servers", ())
    client_id: str = _key("client.id", "")
    security_protocol: str = _key("security.protocol", "PLAINTEXT", choices=SECURITY_PROTOCOLS)
    ssl_truststore_location: str = _key("ssl.truststore.location", "")  # "": the system CAs
    ssl_keystore_location: str = _key("ssl.keystore.location", "")  # certificate chain (+ key)
    ssl_keystore_key_location: str = _key("tierlog.ssl.keystore.key.location", "")
    auth_token_file: str = _key("tierlog.auth.token.file", "")

    def __post_init__(self) -> None:
        self._validate_fields()
        self._check_security()

    def _check_security(self) -> None:
        ssl_keys = {
            "ssl.truststore.location": self.ssl_truststore_location,
            "ssl.keystore.location": self.ssl_keystore_location,
            "tierlog.ssl.keystore.key.location": self.ssl_keystore_key_location,
        }
        if self.security_protocol == "PLAINTEXT":
            for key, value in ssl_keys.items():
                if value:
                    raise ConfigError(key, "is set but security.protocol is PLAINTEXT, not SSL")
        if self.ssl_keystore_key_location and not self.ssl_keystore_location:
            raise ConfigError(
                "tierlog.ssl.keystore.key.location", "needs ssl.keystore.location (the chain)"
            )

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> Self:
        """Kafka-named ``props`` (strings or typed values) over the defaults."""
        return cls(**cls._parse_properties(props))


@dataclass(frozen=True)
class AdminConfig(CommonClientConfig):
    """The admin client's settings."""

    kind: ClassVar[str] = "admin"

    request_timeout_ms: int = _key("request.timeout.ms", 30_000, minimum=0)


@dataclass(frozen=True)
class ProducerConfig(CommonClientConfig):
    """A producer's settings; each field carries its Kafka config name and default."""

    kind: ClassVar[str] = "producer"

    acks: str = _key("acks", "all", choices=("all", "-1", "0", "1"))
    linger_ms: int = _key("linger.ms", 5, minimum=0)
    batch_size: int = _key("batch.size", 16384, minimum=0)
    compression_type: str = _key("compression.type", "none", choices=tuple(_COMPRESSION_TYPES))
    enable_idempotence: bool = _key("enable.idempotence", True)
    max_in_flight_requests_per_connection: int = _key(
        "max.in.flight.requests.per.connection", 5, minimum=1
    )
    retries: int = _key("retries", INT_MAX, minimum=0)
    retry_backoff_ms: int = _key("retry.backoff.ms", 100, minimum=0, maximum=LONG_MAX)
    retry_backoff_max_ms: int = _key("retry.backoff.max.ms", 1000, minimum=0, maximum=LONG_MAX)
    delivery_timeout_ms: int = _key("delivery.timeout.ms", 120_000, minimum=0)
    request_timeout_ms: int = _key("request.timeout.ms", 30_000, minimum=0)
    buffer_memory: int = _key("buffer.memory", 32 * 1024 * 1024, minimum=0, maximum=LONG_MAX)
    max_block_ms: int = _key("max.block.ms", 60_000, minimum=0, maximum=LONG_MAX)
    max_request_size: int = _key("max.request.size", 1024 * 1024, minimum=0)
    partitioner_ignore_keys: bool = _key("partitioner.ignore.keys", False)
    metadata_max_age_ms: int = _key("metadata.max.age.ms", 300_000, minimum=0, maximum=LONG_MAX)
    # "": not transactional. A transactional producer is idempotent.
    transactional_id: str = _key("transactional.id", "")
    transaction_timeout_ms: int = _key("transaction.timeout.ms", 60_000, minimum=1, maximum=INT_MAX)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.acks == "-1":
            object.__setattr__(self, "acks", "all")
        if self.transactional_id and not self.enable_idempotence:
            raise ConfigError("enable.idempotence", "must be true for a transactional producer")
        if self.enable_idempotence:
            self._check_idempotence()
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ConfigError(
                "delivery.timeout.ms",
                f"{self.delivery_timeout_ms} is below linger.ms + request.timeout.ms "
                f"({self.linger_ms + self.request_timeout_ms})",
            )

    def _check_idempotence(self) -> None:
        if self.acks != "all":
            raise ConfigError("acks", "must be all for the idempotent producer")
        if self.retries == 0:
            raise ConfigError("retries", "must be above 0 for the idempotent producer")
        if self.max_in_flight_requests_per_connection > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
            raise ConfigError(
                "max.in.flight.requests.per.connection",
                f"must be at most {MAX_IN_FLIGHT_FOR_IDEMPOTENCE} for the idempotent producer",
            )

    @property
    def compression(self) -> CompressionType:
        return _COMPRESSION_TYPES[self.compression_type]

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> Self:
        """Kafka-named ``props`` (strings or typed values) over the defaults, with Kafka's
        adjustments for settings the user left out (see the module docstring)."""
        values = cls._parse_properties(props)
        merged = {**{f.name: f.default for f in dataclasses.fields(cls)}, **values}
        transactional = bool(merged["transactional_id"])  # then a contradiction is an error
        if (
            "enable_idempotence" not in values
            and not transactional
            and not _idempotence_fits(merged)
        ):
            values["enable_idempotence"] = False
        floor = merged["linger_ms"] + merged["request_timeout_ms"]
        if "delivery_timeout_ms" not in values and merged["delivery_timeout_ms"] < floor:
            values["delivery_timeout_ms"] = min(floor, INT_MAX)
        return cls(**values)


def _idempotence_fits(values: Mapping[str, Any]) -> bool:
    return (
        values["acks"] in ("all", "-1")
        and values["retries"] != 0
        and values["max_in_flight_requests_per_connection"] <= MAX_IN_FLIGHT_FOR_IDEMPOTENCE
    )


@dataclass(frozen=True)
class ConsumerConfig(CommonClientConfig):
    """A consumer's settings; each field carries its Kafka config name and default.

    The consumer is assigned partitions, as Kafka's ``assign()`` + ``seek()``; with a
    ``group.id`` it resumes from the group's committed offsets and commits (every
    ``auto.commit.interval.ms`` when ``enable.auto.commit``), and ``subscribe()`` makes it
    a member of the group (KIP-848: ``group.instance.id`` for a static member,
    ``group.remote.assignor`` for the server's assignor, ``max.poll.interval.ms`` its
    rebalance timeout; the session timeout and heartbeat interval are the broker's).
    """

    kind: ClassVar[str] = "consumer"
    # KIP-848 moved these to the broker: Kafka 4's consumer refuses them under
    # group.protocol=consumer, the one protocol this consumer speaks.
    refused: ClassVar[Mapping[str, str]] = {
        "session.timeout.ms": "cannot be set when group.protocol=consumer (KIP-848): the "
        "broker's group.consumer.session.timeout.ms sets the session",
        "heartbeat.interval.ms": "cannot be set when group.protocol=consumer (KIP-848): the "
        "broker's group.consumer.heartbeat.interval.ms sets the interval",
        "partition.assignment.strategy": "cannot be set when group.protocol=consumer "
        "(KIP-848): the broker assigns; choose its assignor with group.remote.assignor",
    }

    group_id: str = _key("group.id", "")  # "": no group, no committed offsets
    # KIP-848's consumer protocol, the only one (Kafka takes the name in any case).
    group_protocol: str = _key("group.protocol", "consumer", choices=("consumer",))
    group_instance_id: str = _key("group.instance.id", "")  # "": a dynamic member
    group_remote_assignor: str = _key("group.remote.assignor", "")  # "": the broker's default
    max_poll_interval_ms: int = _key("max.poll.interval.ms", 300_000, minimum=1)
    enable_auto_commit: bool = _key("enable.auto.commit", True)
    auto_commit_interval_ms: int = _key("auto.commit.interval.ms", 5000, minimum=0)
    fetch_min_bytes: int = _key("fetch.min.bytes", 1, minimum=0)
    fetch_max_bytes: int = _key("fetch.max.bytes", 50 * 1024 * 1024, minimum=0)
    fetch_max_wait_ms: int = _key("fetch.max.wait.ms", 500, minimum=0)
    max_partition_fetch_bytes: int = _key("max.partition.fetch.bytes", 1024 * 1024, minimum=0)
    max_poll_records: int = _key("max.poll.records", 500, minimum=1)
    auto_offset_reset: str = _key(
        "auto.offset.reset", "latest", choices=("earliest", "latest", "none")
    )
    isolation_level: str = _key(
        "isolation.level", "read_uncommitted", choices=("read_uncommitted", "read_committed")
    )
    check_crcs: bool = _key("check.crcs", True)
    request_timeout_ms: int = _key("request.timeout.ms", 30_000, minimum=0)
    default_api_timeout_ms: int = _key("default.api.timeout.ms", 60_000, minimum=0)
    retry_backoff_ms: int = _key("retry.backoff.ms", 100, minimum=0, maximum=LONG_MAX)
    retry_backoff_max_ms: int = _key("retry.backoff.max.ms", 1000, minimum=0, maximum=LONG_MAX)
    metadata_max_age_ms: int = _key("metadata.max.age.ms", 300_000, minimum=0, maximum=LONG_MAX)

    def __post_init__(self) -> None:
        protocol = self.group_protocol.lower()
        if protocol == "classic":
            raise ConfigError(
                "group.protocol",
                "classic is not offered: this consumer joins groups with KIP-848's consumer "
                "protocol (group.protocol=consumer); classic consumers (kafka-python, the Java "
                "console consumer) join through a broker's Kafka listener",
            )
        object.__setattr__(self, "group_protocol", protocol)
        super().__post_init__()
