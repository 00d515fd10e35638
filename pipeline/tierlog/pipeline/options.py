"""The data source's options, parsed once into a frozen value.

The names and meanings are those of Spark's Kafka source, so a query moves between
the two by changing the format: one of ``subscribe`` / ``subscribePattern`` /
``assign``; ``startingOffsets`` / ``endingOffsets`` as ``earliest``, ``latest`` or JSON
per partition with -2 (earliest) and -1 (latest); ``startingTimestamp`` /
``endingTimestamp`` (milliseconds, for every partition, taking precedence over the
offsets); ``minPartitions``; ``failOnDataLoss``; ``includeHeaders``. ``s3.*`` options
say how to reach ``s3://`` tiers (the sidecar's ``tierlog.tier.s3.*`` names). Partitions a JSON
does not name take the default (earliest to start, latest to end). Spark treats option
names case-insensitively, and so does this.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.pipeline.errors import InvalidOptionError
from tierlog.storage.errors import InvalidConfigError, InvalidTopicError
from tierlog.storage.names import validate_topic_name
from tierlog.storage.tier.s3_store import S3Options
from tierlog.storage.topic_partition import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "SourceOptions",
    "Subscription",
    "parse_options",
]

EARLIEST = -2
LATEST = -1


@dataclass(frozen=True)
class Subscription:
    """Which topics and partitions a query reads."""

    topics: frozenset[str] = frozenset()
    pattern: str | None = None
    assigned: frozenset[TopicPartition] = frozenset()

    def wants_topic(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assigned:
            return any(tp.topic == topic for tp in self.assigned)
        return topic in self.topics

    def wants(self, tp: TopicPartition) -> bool:
        if self.assigned:
            return tp in self.assigned
        return self.wants_topic(tp.topic)


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends: an offset, EARLIEST or LATEST per partition, or a
    timestamp for every partition (``timestamp_ms``, which wins when set)."""

    default: int
    per_partition: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp_ms: int | None = None

    def for_partition(self, tp: TopicPartition) -> int:
        return self.per_partition.get(tp, self.default)


@dataclass(frozen=True)
class SourceOptions:
    paths: tuple[str, ...]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_records_per_batch: int = 16384  # rows per column batch: a few MiB, cache-friendly
    s3: S3Options = field(default_factory=S3Options)


def parse_options(raw: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
    """Check and parse the options of one query; InvalidOptionError says what is wrong."""
    options = {key.lower(): value for key, value in raw.items()}
    starting = _offset_spec(
        options.get("startingoffsets", "latest" if streaming else "earliest"),
        "startingOffsets",
        options.get("startingtimestamp"),
        default=LATEST if streaming else EARLIEST,
    )
    ending = _offset_spec(
        options.get("endingoffsets", "latest"),
        "endingOffsets",
        options.get("endingtimestamp"),
        default=LATEST,
    )
    if ending.default == EARLIEST or EARLIEST in ending.per_partition.values():
        raise InvalidOptionError("endingOffsets cannot be earliest (-2)")
    if not streaming and starting.default == LATEST and starting.timestamp_ms is None:
        raise InvalidOptionError("startingOffsets cannot be latest for a batch query")
    if streaming and (ending.per_partition or ending.timestamp_ms is not None):
        raise InvalidOptionError("endingOffsets and endingTimestamp are for batch queries only")
    return SourceOptions(
        paths=_paths(options),
        subscription=_subscription(options),
        starting=starting,
        ending=ending,
        min_partitions=_positive_int(options, "minpartitions", "minPartitions"),
        fail_on_data_loss=_boolean(options, "failondataloss", "failOnDataLoss", default=True),
        include_headers=_boolean(options, "includeheaders", "includeHeaders", default=False),
        max_records_per_batch=_positive_int(options, "maxrecordsperbatch", "maxRecordsPerBatch")
        or SourceOptions.max_records_per_batch,
        s3=parse_s3_options(options),
    )


# Option -> (S3Options field, how to read the value): the sidecar's ``tierlog.tier.s3.*``
# keys without their prefix, for the ``s3://`` paths of a query.
_S3_OPTIONS: dict[str, tuple[str, Callable[[str], object]]] = {
    "s3.endpoint.url": ("endpoint_url", str),
    "s3.region": ("region", str),
    "s3.path.style.access.enabled": (
        "path_style",
        lambda v: _true_or_false(v, "s3.path.style.access.enabled"),
    ),
    "s3.credentials.path": ("credentials_path", Path),
    "s3.connect.timeout.ms": ("connect_timeout_s", lambda v: int(v) / 1000),
    "s3.read.timeout.ms": ("read_timeout_s", lambda v: int(v) / 1000),
    "s3.max.attempts": ("max_attempts", int),
}


def parse_s3_options(options: Mapping[str, str]) -> S3Options:
    """How to reach the ``s3://`` tiers of a query (option names in lower case)."""
    fields: dict[str, Any] = {}
    for key, (name, read) in _S3_OPTIONS.items():
        if options.get(key, "").strip():
            try:
                fields[name] = read(options[key].strip())
            except ValueError as error:
                raise InvalidOptionError(f"{key}: {error}") from None
    try:
        return S3Options(**fields)
    except InvalidConfigError as error:
        raise InvalidOptionError(str(error)) from None


def _paths(options: Mapping[str, str]) -> tuple[str, ...]:
    paths: list[str] = []
    if "paths" in options:  # what DataFrameReader.load([a, b]) passes: a JSON list
        try:
            listed = json.loads(options["paths"])
        except json.JSONDecodeError as error:
            raise InvalidOptionError(f"paths is not a JSON list: {error}") from None
        if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
            raise InvalidOptionError("paths must be a JSON list of strings")
        paths.extend(listed)
    if "path" in options:
        paths.extend(part.strip() for part in options["path"].split(",") if part.strip())
    if not paths:
        raise InvalidOptionError("give the log dirs or tier URLs to read as the path option")
    return tuple(dict.fromkeys(paths))


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in options]
    if len(given) != 1:
        raise InvalidOptionError(
            "set exactly one of subscribe, subscribePattern and assign"
            + (f" (got {len(given)})" if given else "")
        )
    if "subscribe" in options:
        topics = [topic.strip() for topic in options["subscribe"].split(",") if topic.strip()]
        if not topics:
            raise InvalidOptionError("subscribe names no topic")
        return Subscription(topics=frozenset(_topic(topic) for topic in topics))
    if "subscribepattern" in options:
        try:
            re.compile(options["subscribepattern"])
        except re.error as error:
            raise InvalidOptionError(
                f"subscribePattern is not a regular expression: {error}"
            ) from None
        return Subscription(pattern=options["subscribepattern"])
    assigned = _partition_json(options["assign"], "assign")
    if not assigned:
        raise InvalidOptionError("assign names no partition")
    return Subscription(assigned=frozenset(assigned))


def _partition_json(text: str, name: str) -> list[TopicPartition]:
    parsed = _json_object(text, name)
    partitions: list[TopicPartition] = []
    for topic, numbers in parsed.items():
        if not isinstance(numbers, list) or not all(_is_int(n) and n >= 0 for n in numbers):
            raise InvalidOptionError(f"{name}: {topic} must map to a list of partition numbers")
        partitions.extend(TopicPartition(_topic(topic), n) for n in numbers)
    return partitions


def _offset_spec(text: str, name: str, timestamp: str | None, *, default: int) -> OffsetSpec:
    timestamp_ms = None
    if timestamp is not None:
        try:
            timestamp_ms = int(timestamp)
        except ValueError:
            raise InvalidOptionError(
                f"{name[:-7]}Timestamp is not a number: {timestamp!r}"
            ) from None
        if timestamp_ms < 0:
            raise InvalidOptionError(f"{name[:-7]}Timestamp cannot be negative")
    keyword = text.strip().lower()
    if keyword in ("earliest", "latest"):
        return OffsetSpec(EARLIEST if keyword == "earliest" else LATEST, {}, timestamp_ms)
    per_partition: dict[TopicPartition, int] = {}
    for topic, offsets in _json_object(text, name).items():
        if not isinstance(offsets, dict):
            raise InvalidOptionError(f"{name}: {topic} must map partitions to offsets")
        for number, offset in offsets.items():
            if not number.isdigit() or not _is_int(offset) or offset < EARLIEST:
                raise InvalidOptionError(
                    f"{name}: {topic}/{number}: {offset!r} is not an offset, -2 or -1"
                )
            per_partition[TopicPartition(_topic(topic), int(number))] = offset
    return OffsetSpec(default, per_partition, timestamp_ms)


def _json_object(text: str, name: str) -> dict[str, object]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidOptionError(f"{name} is neither earliest/latest nor JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise InvalidOptionError(f"{name} must be a JSON object keyed by topic")
    return parsed


def _topic(name: str) -> str:
    try:
        return validate_topic_name(name)
    except InvalidTopicError as error:
        raise InvalidOptionError(str(error)) from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(options: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in options:
        return None
    try:
        value = int(options[key])
    except ValueError:
        raise InvalidOptionError(f"{name} is not a number: {options[key]!r}") from None
    if value <= 0:
        raise InvalidOptionError(f"{name} must be positive, not {value}")
    return value


def _boolean(options: Mapping[str, str], key: str, name: str, *, default: bool) -> bool:
    if key not in options:
        return default
    return _true_or_false(options[key], name)


def _true_or_false(value: str, name: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise InvalidOptionError(f"{name} must be true or false, not {value!r}")
    return value.strip().lower() == "true"
