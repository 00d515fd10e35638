"""Topic-level log configuration under Apache Kafka's names and defaults.

A ``LogConfig`` is built once from Kafka-named keys (``segment.bytes``...), validated,
and passed down; nothing below reads configuration from anywhere else.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tierlog.storage.errors import InvalidConfigError

__all__ = [
    "BROKER_TO_TOPIC_KEYS",
    "LONG_MAX",
    "MAX_UPLOAD_INTERVAL_KEY",
    "LogConfig",
    "TimestampType",
    "check_config_change",
]

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# tierlog's own bound on how far the remote tier may fall behind a partition's log end
# (Kafka uploads only the segments that size or segment.ms closed): a topic config, and
# under the same name the broker's default for it.
MAX_UPLOAD_INTERVAL_KEY = "tierlog.remote.segment.max.upload.interval.ms"

# Kafka's broker setting -> the topic setting it provides the default for.
BROKER_TO_TOPIC_KEYS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "compression.type": "compression.type",
    "log.preallocate": "preallocate",
    "log.local.retention.ms": "local.retention.ms",
    "log.local.retention.bytes": "local.retention.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    MAX_UPLOAD_INTERVAL_KEY: MAX_UPLOAD_INTERVAL_KEY,
}


class TimestampType(Enum):
    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


def _key(
    name: str, default: Any, *, minimum: int | float | None = None, choices: tuple[str, ...] = ()
) -> Any:
    return field(default=default, metadata={"key": name, "min": minimum, "choices": choices})


@dataclass(frozen=True)
class LogConfig:
    """One topic's log settings; each field carries its Kafka config name."""

    segment_bytes: int = _key("segment.bytes", 1024 * 1024 * 1024, minimum=14)
    segment_ms: int = _key("segment.ms", 7 * 24 * 3600 * 1000, minimum=1)
    segment_jitter_ms: int = _key("segment.jitter.ms", 0, minimum=0)
    segment_index_bytes: int = _key("segment.index.bytes", 10 * 1024 * 1024, minimum=4)
    index_interval_bytes: int = _key("index.interval.bytes", 4096, minimum=0)
    flush_messages: int = _key("flush.messages", LONG_MAX, minimum=1)
    flush_ms: int = _key("flush.ms", LONG_MAX, minimum=0)
    max_message_bytes: int = _key("max.message.bytes", 1024 * 1024 + 12, minimum=0)
    message_timestamp_type: str = _key(
        "message.timestamp.type", "CreateTime", choices=("CreateTime", "LogAppendTime")
    )
    message_timestamp_before_max_ms: int = _key(
        "message.timestamp.before.max.ms", LONG_MAX, minimum=0
    )
    message_timestamp_after_max_ms: int = _key(
        "message.timestamp.after.max.ms", 3600 * 1000, minimum=0
    )
    cleanup_policy: str = _key(
        "cleanup.policy",
        "delete",
        choices=("delete", "compact", "compact,delete", "delete,compact"),
    )
    retention_ms: int = _key("retention.ms", 7 * 24 * 3600 * 1000, minimum=-1)
    retention_bytes: int = _key("retention.bytes", -1, minimum=-1)
    delete_retention_ms: int = _key("delete.retention.ms", 24 * 3600 * 1000, minimum=0)
    min_compaction_lag_ms: int = _key("min.compaction.lag.ms", 0, minimum=0)
    max_compaction_lag_ms: int = _key("max.compaction.lag.ms", LONG_MAX, minimum=1)
    min_cleanable_dirty_ratio: float = _key("min.cleanable.dirty.ratio", 0.5, minimum=0.0)
    file_delete_delay_ms: int = _key("file.delete.delay.ms", 60_000, minimum=0)
    compression_type: str = _key(
        "compression.type",
        "producer",
        choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    )
    preallocate: bool = _key("preallocate", False)
    remote_storage_enable: bool = _key("remote.storage.enable", False)
    # KIP-950: a tier that takes no more uploads (read only, still under retention.*),
    # and the consent to delete the tier when remote.storage.enable goes back to false.
    remote_log_copy_disable: bool = _key("remote.log.copy.disable", False)
    remote_log_delete_on_disable: bool = _key("remote.log.delete.on.disable", False)
    local_retention_ms: int = _key("local.retention.ms", -2, minimum=-2)
    local_retention_bytes: int = _key("local.retention.bytes", -2, minimum=-2)
    # -1: no bound (see MAX_UPLOAD_INTERVAL_KEY).
    remote_segment_max_upload_interval_ms: int = _key(MAX_UPLOAD_INTERVAL_KEY, -1, minimum=-1)
    # Replication: how many in-sync replicas an acks=all produce needs, and whether a
    # replica outside the ISR may become leader (losing what only the ISR held).
    min_insync_replicas: int = _key("min.insync.replicas", 1, minimum=1)
    unclean_leader_election_enable: bool = _key("unclean.leader.election.enable", False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check(f, getattr(self, f.name))
        if self.min_cleanable_dirty_ratio > 1.0:
            raise InvalidConfigError("min.cleanable.dirty.ratio must lie in [0, 1]")
        if self.remote_storage_enable and self.remote_log_copy_disable:
            self._check_local_retention_is_total()

    def _check_local_retention_is_total(self) -> None:
        """Kafka's rule for a tier that takes no more uploads: local retention has
        nothing left to free (every new segment stays local), so it must be the total
        retention, or -2 which says so."""
        pairs = (
            (
                "local.retention.bytes",
                self.local_retention_bytes,
                "retention.bytes",
                self.retention_bytes,
            ),
            ("local.retention.ms", self.local_retention_ms, "retention.ms", self.retention_ms),
        )
        for local_key, local, total_key, total in pairs:
            if local not in (-2, total):
                raise InvalidConfigError(
                    f"with remote.log.copy.disable=true nothing more goes to the tier, so "
                    f"{local_key} ({local}) must be -2 or equal {total_key} ({total})"
                )

    @functools.cached_property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(self.message_timestamp_type)

    @functools.cached_property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @functools.cached_property
    def copies_to_tier(self) -> bool:
        """Whether closed segments go to the tier (a tier made read only takes none)."""
        return self.remote_storage_enable and not self.remote_log_copy_disable

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Kafka config name -> field name."""
        return {f.metadata["key"]: f.name for f in dataclasses.fields(cls)}

    @classmethod
    def from_properties(
        cls, props: Mapping[str, object], base: LogConfig | None = None
    ) -> LogConfig:
        """Overlay Kafka-named ``props`` (strings or typed values) on ``base`` (or defaults)."""
        names = cls.keys()
        fields_by_name = {f.name: f for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}
        for key, raw in props.items():
            if key not in names:
                raise InvalidConfigError(f"unknown topic config {key!r}")
            attr = names[key]
            changes[attr] = _parse(key, raw, fields_by_name[attr].type)
        return dataclasses.replace(base or cls(), **changes)

    @classmethod
    def kafka_type(cls, key: str) -> str:
        """The type Kafka's ConfigDef declares for ``key`` (BOOLEAN, INT, LONG, DOUBLE,
        STRING or LIST), as DescribeConfigs reports it."""
        kind = {f.metadata["key"]: f.type for f in dataclasses.fields(cls)}[key]
        kind = kind if isinstance(kind, str) else kind.__name__
        if kind == "int":
            return "INT" if key in _JAVA_INT_KEYS else "LONG"
        if kind == "str":
            return "LIST" if key in _LIST_KEYS else "STRING"
        return {"bool": "BOOLEAN", "float": "DOUBLE"}[kind]

    def to_properties(self) -> dict[str, str]:
        """Every setting under its Kafka name, as the string Kafka would print."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.metadata["key"]] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


def check_config_change(before: LogConfig, after: LogConfig) -> None:
    """Refuse a topic's config change that Kafka refuses (KIP-950): turning
    ``remote.storage.enable`` off deletes the tier's copy of the topic, so it must
    say so with ``remote.log.delete.on.disable=true``; ``remote.log.copy.disable=true``
    is the way to stop uploads and keep what the tier holds."""
    turned_off = before.remote_storage_enable and not after.remote_storage_enable
    if turned_off and not after.remote_log_delete_on_disable:
        raise InvalidConfigError(
            "remote.storage.enable=false would leave the tier's copy of this topic "
            "behind: to delete it and go on with the local log only, set "
            "remote.log.delete.on.disable=true in the same change; to keep it "
            "readable and stop uploading, keep remote.storage.enable=true and set "
            "remote.log.copy.disable=true instead"
        )


# Numbers as Kafka's ConfigDef reads them, trimmed: an INT or LONG is an optional sign
# and digits (Long.parseLong), a DOUBLE here a finite decimal.  Python's int() and
# float() take more that no Kafka tool writes: "1_000_000", "nan", "inf", and any
# script's digits (so does parseLong; only ASCII ones are taken here, a config is ASCII).
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)


def _parse(key: str, raw: object, type_name: Any) -> Any:
    text = str(raw).strip()
    kind = type_name if isinstance(type_name, str) else type_name.__name__  # (annotations)
    if kind == "bool" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if kind == "int" and _INTEGER.fullmatch(text):
        return int(text)
    if kind == "float" and _DECIMAL.fullmatch(text) and math.isfinite(float(text)):
        return float(text)
    if kind == "str":
        return text
    raise InvalidConfigError(f"invalid value {raw!r} for {key}: not {_EXPECTED[kind]}")


_EXPECTED = {
    "bool": "true or false",
    "int": "a whole number (ASCII digits, an optional sign)",
    "float": "a finite decimal number",
}


# Kafka declares these INT, not LONG.
_JAVA_INT_KEYS = (
    "segment.bytes",
    "segment.index.bytes",
    "index.interval.bytes",
    "max.message.bytes",
    "min.insync.replicas",
)
# Kafka declares these a LIST (of comma-separated values).
_LIST_KEYS = ("cleanup.policy",)


def _check(f: dataclasses.Field[Any], value: Any) -> None:
    key, minimum, choices = f.metadata["key"], f.metadata["min"], f.metadata["choices"]
    if minimum is not None and value < minimum:
        raise InvalidConfigError(f"{key}={value} is below its minimum {minimum}")
    if isinstance(value, int) and not isinstance(value, bool) and value > LONG_MAX:
        raise InvalidConfigError(f"{key}={value} does not fit a Java long")
    if choices and value not in choices:
        raise InvalidConfigError(f"{key}={value!r} is not one of {', '.join(choices)}")
    if key in _JAVA_INT_KEYS and value > INT_MAX:
        raise InvalidConfigError(f"{key}={value} does not fit a Java int")
