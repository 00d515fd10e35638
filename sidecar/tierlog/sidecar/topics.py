"""The broker's topics: names, partition counts and config overrides, kept on disk.

Kafka keeps this in its metadata log; a tierlog broker keeps it in one small JSON
file, ``tierlog-topics.json`` in its first log dir, replaced atomically on every
change (a crash leaves the old or the new file, never half of one). Overrides are
validated with ``LogConfig`` before they are stored, and ``log_config(topic)`` is
the log manager's ``topic_config`` provider, so a topic's settings survive restarts.

The store is the authority on which topics exist: a partition directory on disk
whose topic is not in it (written before the store existed, or by the storage
tools) is adopted at start-up with no overrides.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from tierlog.api.errors import InvalidPartitionsError, TopicAlreadyExistsError
from tierlog.storage.checkpoints import atomic_write
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import InvalidConfigError, UnknownTopicOrPartitionError
from tierlog.storage.names import validate_topic_name

__all__ = ["MAX_PARTITIONS", "TOPICS_FILE", "Topic", "TopicStore"]

TOPICS_FILE = "tierlog-topics.json"
_VERSION = 1
# A sanity bound, not Kafka's (which has none per topic): every partition is a directory.
MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class Topic:
    name: str
    partition_count: int
    configs: Mapping[str, str] = field(default_factory=dict)  # overrides, Kafka names


class TopicStore:
    """Topics and their overrides over broker-level defaults, persisted in ``path``."""

    def __init__(self, path: Path, defaults: LogConfig):
        self.path = path
        self.defaults = defaults
        self._lock = threading.Lock()
        self._topics: dict[str, Topic] = {}
        self._configs: dict[str, LogConfig] = {}
        if path.exists():
            self._load()

    def _load(self) -> None:
        try:
            document = json.loads(self.path.read_text())
            if not isinstance(document, dict) or not isinstance(document.get("topics"), dict):
                raise InvalidConfigError(
                    f"{self.path} is not a topics file: expected an object with "
                    f'"version" and "topics" (an object of topics), got {document!r:.100}'
                )
            if document.get("version") != _VERSION:
                raise InvalidConfigError(f"{self.path}: unknown version {document.get('version')}")
            for name, entry in document["topics"].items():
                topic = Topic(name, int(entry["partitions"]), dict(entry["configs"]))
                self._topics[name] = topic
                self._configs[name] = self._validated(topic.configs)
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidConfigError(f"{self.path} is unreadable: {error!r}") from None

    def _save_locked(self) -> None:
        document = {
            "version": _VERSION,
            "topics": {
                name: {"partitions": topic.partition_count, "configs": dict(topic.configs)}
                for name, topic in sorted(self._topics.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(document, indent=2, sort_keys=True) + "\n")

    def _validated(self, configs: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_properties(configs, base=self.defaults)

    # -- reading ----------------------------------------------------------------------

    def topics(self) -> list[Topic]:
        with self._lock:
            return sorted(self._topics.values(), key=lambda topic: topic.name)

    def get(self, name: str) -> Topic:
        """The topic, or UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for bad names)."""
        validate_topic_name(name)
        with self._lock:
            topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return topic

    def check_partition(self, name: str, partition: int) -> Topic:
        topic = self.get(name)
        if not 0 <= partition < topic.partition_count:
            raise UnknownTopicOrPartitionError(
                f"topic {name!r} has partitions 0..{topic.partition_count - 1}, not {partition}"
            )
        return topic

    def log_config(self, name: str) -> LogConfig:
        """The topic's effective config (the log manager's ``topic_config`` provider)."""
        with self._lock:
            return self._configs.get(name, self.defaults)

    # -- changes ----------------------------------------------------------------------

    def validate_new(self, name: str, partitions: int, configs: Mapping[str, str]) -> Topic:
        validate_topic_name(name)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"{partitions} partitions; a topic has 1..{MAX_PARTITIONS}"
            )
        self._validated(configs)
        with self._lock:
            if name in self._topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        return Topic(name, partitions, dict(configs))

    def create(self, name: str, partitions: int, configs: Mapping[str, str]) -> Topic:
        topic = self.validate_new(name, partitions, configs)
        with self._lock:
            if name in self._topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            self._put_locked(topic)
        return topic

    def adopt(self, name: str, partitions: int) -> None:
        """Take in a topic found on disk: at least ``partitions`` partitions, no overrides."""
        with self._lock:
            known = self._topics.get(name)
            if known is not None and known.partition_count >= partitions:
                return
            if known is None:
                self._put_locked(Topic(name, partitions, {}))
            else:
                self._put_locked(replace(known, partition_count=partitions))

    def delete(self, name: str) -> None:
        self.get(name)
        with self._lock:
            self._topics.pop(name, None)
            self._configs.pop(name, None)
            self._save_locked()

    def alter_configs(
        self,
        name: str,
        set_configs: Mapping[str, str],
        delete_configs: list[str],
        *,
        validate_only: bool = False,
    ) -> LogConfig:
        """Kafka's incremental alter: set some overrides, remove others; the new config."""
        topic = self.get(name)
        unknown = set(delete_configs) - set(LogConfig.keys())
        if unknown:
            raise InvalidConfigError(f"unknown topic config {', '.join(sorted(unknown))}")
        configs = {k: v for k, v in topic.configs.items() if k not in delete_configs}
        configs.update(set_configs)
        config = self._validated(configs)
        if not validate_only:
            with self._lock:
                self._put_locked(replace(topic, configs=configs))
        return config

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> Topic:
        topic = self.get(name)
        if total <= topic.partition_count or total > MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"topic {name!r} has {topic.partition_count} partitions; "
                f"the new count must be above it and at most {MAX_PARTITIONS}, not {total}"
            )
        grown = replace(topic, partition_count=total)
        if not validate_only:
            with self._lock:
                self._put_locked(grown)
        return grown

    def _put_locked(self, topic: Topic) -> None:
        self._configs[topic.name] = self._validated(topic.configs)
        self._topics[topic.name] = topic
        self._save_locked()
