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

__all__ = ["ConfigSource", "ConfigSynonym", "ConfigValue", "broker_configs", "topic_configs"]

_TOPIC_TO_BROKER_KEYS = {topic: broker for broker, topic in BROKER_TO_TOPIC_KEYS.items()}
_BUILT_IN = LogConfig().to_properties()


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
        values.append(ConfigValue(key, value, chain[0].source, chain, LogConfig.kafka_type(key)))
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
                broker_key, chain[0].value, chain[0].source, chain, LogConfig.kafka_type(key)
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
