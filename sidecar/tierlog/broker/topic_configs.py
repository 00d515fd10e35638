"""Config reads as Kafka's DescribeConfigs reports them: a topic's, and a broker's.

Each value carries where it comes from, in Kafka's terms: a topic override
(DYNAMIC_TOPIC_CONFIG), the broker's own setting from its properties
(STATIC_BROKER_CONFIG: ``log.retention.ms`` for ``retention.ms``), or the built-in
default (DEFAULT_CONFIG); its synonyms, most specific first, are the same chain; its
type is the one Kafka's ConfigDef declares. A broker's configs here are the topic
defaults under their broker names (``BROKER_TO_TOPIC_KEYS``): the settings it holds
for topics, which is what clients ask a broker about.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum

from tierlog.storage.config import BROKER_TO_TOPIC_KEYS, LogConfig

__all__ = [
    "DOCUMENTATION",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigValue",
    "broker_configs",
    "topic_configs",
]

_TOPIC_TO_BROKER_KEYS = {topic: broker for broker, topic in BROKER_TO_TOPIC_KEYS.items()}
_BUILT_IN = LogConfig().to_properties()

# What each topic config does, in a line (DescribeConfigs' documentation).
DOCUMENTATION: dict[str, str] = {
    "segment.bytes": "The size at which the active segment is closed and a new one begun.",
    "segment.ms": "The age at which the active segment is closed, even if not full.",
    "segment.jitter.ms": "A random amount taken off segment.ms per segment, so that "
    "partitions do not all roll at once.",
    "segment.index.bytes": "The size each segment's offset and time index files are "
    "preallocated to.",
    "index.interval.bytes": "How many bytes of records go between two offset index entries.",
    "flush.messages": "Force an fsync after this many records (the default leaves it to "
    "the OS and replication).",
    "flush.ms": "Force an fsync when data has waited this long unflushed.",
    "max.message.bytes": "The largest record batch a producer may append.",
    "message.timestamp.type": "Whether a record's timestamp is the producer's "
    "(CreateTime) or the broker's append time (LogAppendTime).",
    "message.timestamp.before.max.ms": "How far in the past a CreateTime timestamp may "
    "be before the batch is refused.",
    "message.timestamp.after.max.ms": "How far in the future a CreateTime timestamp may "
    "be before the batch is refused.",
    "cleanup.policy": "What happens to old segments: delete them (by time or size), "
    "compact them (keep each key's latest record), or both.",
    "retention.ms": "How long records are kept before their segment may be deleted (-1: forever).",
    "retention.bytes": "How large a partition may grow before its oldest segments are "
    "deleted (-1: no limit).",
    "delete.retention.ms": "How long a tombstone stays in a compacted partition, so "
    "consumers see the delete.",
    "min.compaction.lag.ms": "The least time a record stays uncompacted.",
    "max.compaction.lag.ms": "The most time a record may wait to be eligible for compaction.",
    "min.cleanable.dirty.ratio": "The share of a partition's log that must be "
    "uncompacted before the cleaner takes it up.",
    "file.delete.delay.ms": "How long a deleted segment's files wait before they are "
    "removed from the disk.",
    "compression.type": "The codec batches are stored in ('producer': as the producer sent them).",
    "preallocate": "Whether a new segment file is preallocated on disk.",
    "remote.storage.enable": "Whether closed segments are uploaded to the remote tier.",
    "remote.log.copy.disable": "Whether uploads to the tier stop: what it holds stays "
    "readable until retention.ms/bytes delete it, and local data follows those too.",
    "remote.log.delete.on.disable": "Whether turning remote.storage.enable off deletes the "
    "topic's data in the tier; Kafka refuses that change without it.",
    "local.retention.ms": "How long a tiered segment stays on local disk too (-2: as "
    "retention.ms).",
    "local.retention.bytes": "How many bytes of tiered segments stay on local disk too "
    "(-2: as retention.bytes).",
    "tierlog.remote.segment.max.upload.interval.ms": "How far behind the log end the "
    "remote tier may fall: older data not yet tiered is rolled and uploaded (-1: no bound).",
    "min.insync.replicas": "How many in-sync replicas an acks=all produce needs.",
    "unclean.leader.election.enable": "Whether a replica outside the ISR may become "
    "leader, losing what only the ISR held.",
}


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigs config_source codes."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str
    source: ConfigSource


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: str
    source: ConfigSource
    synonyms: tuple[ConfigSynonym, ...]
    kafka_type: str  # BOOLEAN, INT, LONG, DOUBLE, STRING or LIST
    documentation: str

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


def topic_configs(defaults: LogConfig, overrides: Mapping[str, str]) -> list[ConfigValue]:
    """Every config of a topic with ``overrides`` over the broker's ``defaults`` (a
    topic's, or one about to be created: INVALID_CONFIG for a bad override)."""
    effective = LogConfig.from_properties(overrides, base=defaults).to_properties()
    configured = defaults.to_properties()
    values = []
    for key, value in sorted(effective.items()):
        chain = _broker_chain(configured, key)
        if key in overrides:
            chain = (ConfigSynonym(key, value, ConfigSource.DYNAMIC_TOPIC_CONFIG), *chain)
        values.append(
            ConfigValue(
                key, value, chain[0].source, chain, LogConfig.kafka_type(key), DOCUMENTATION[key]
            )
        )
    return values


def broker_configs(defaults: LogConfig) -> list[ConfigValue]:
    """The broker's topic defaults, under their broker names."""
    configured = defaults.to_properties()
    values = []
    for key in sorted(_TOPIC_TO_BROKER_KEYS):
        chain = _broker_chain(configured, key)
        broker_key = _TOPIC_TO_BROKER_KEYS[key]
        values.append(
            ConfigValue(
                broker_key,
                chain[0].value,
                chain[0].source,
                chain,
                LogConfig.kafka_type(key),
                DOCUMENTATION[key],
            )
        )
    return values


def _broker_chain(configured: Mapping[str, str], key: str) -> tuple[ConfigSynonym, ...]:
    """Where the broker's default for topic config ``key`` comes from: its properties
    (``configured``) when they change the built-in value, then the built-in value."""
    broker_key = _TOPIC_TO_BROKER_KEYS.get(key, key)
    value = configured[key]
    built_in = ConfigSynonym(broker_key, _BUILT_IN[key], ConfigSource.DEFAULT_CONFIG)
    if value == _BUILT_IN[key]:
        return (built_in,)
    return ConfigSynonym(broker_key, value, ConfigSource.STATIC_BROKER_CONFIG), built_in
