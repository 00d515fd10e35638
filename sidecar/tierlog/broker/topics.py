"""The broker's topics: names, partition counts and config overrides, kept on disk.

Kafka keeps this in its metadata log; a tierlog broker keeps it in one small JSON
file, ``tierlog-topics.json``, a copy in every log dir, each replaced atomically on
every change (a crash leaves the old or the new file, never half of one). Overrides
are validated with ``LogConfig`` before they are stored, and ``log_config(topic)`` is
the log manager's ``topic_config`` provider, so a topic's settings survive restarts.

Which copy is read does not depend on the order of the log dirs: each save carries a
generation one above the last, and the newest generation wins (a new, empty log dir
has none; a crash between two copies leaves the newer one). Two copies of the same
generation that disagree (written by a version that kept only the first log dir's
file) stop the start with both paths named: either one may hold the overrides, and
reading the wrong one would turn a compacted topic into a deleting one.

The internal topics (``__consumer_offsets``, ``__transaction_state``) are never tiered:
a create or a change that would set ``remote.storage.enable=true`` on one is refused
with INVALID_CONFIG naming it, whichever door it came in, since their coordinators
load them from the local log alone and would miss what local retention freed.

The store is the authority on which topics exist: a partition directory on disk
whose topic is not in it (written before the store existed, or by the storage
tools) is adopted at start-up with no overrides.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tierlog.api.errors import InvalidPartitionsError, TopicAlreadyExistsError
from tierlog.broker.internal_topics import INTERNAL_TOPICS
from tierlog.storage.checkpoints import atomic_write
from tierlog.storage.config import LogConfig, check_config_change
from tierlog.storage.errors import (
    InvalidConfigError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)
from tierlog.storage.names import validate_no_collision, validate_topic_name

__all__ = ["MAX_PARTITIONS", "TOPICS_FILE", "Topic", "TopicStore"]

log = logging.getLogger(__name__)

TOPICS_FILE = "tierlog-topics.json"
_VERSION = 1
# A sanity bound, not Kafka's (which has none per topic): every partition is a directory.
MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class Topic:
    name: str
    partition_count: int
    configs: Mapping[str, str] = field(default_factory=dict)  # overrides, Kafka names
    # The replicas a partition has, as a replicated cluster's partition-state store
    # says (the most any partition has, reassignments' leaving replicas not counted);
    # None on a broker without replication. Kept for the bucket's copy (``topic_mirror``).
    replication_factor: int | None = None
    # Each partition's replicas as the store will have them (reassignments done), by
    # partition, the preferred leader first; None as above. For the bucket's copy too: a
    # restore places the topic's replicas where they were.
    assignment: tuple[tuple[int, ...], ...] | None = None


class TopicStore:
    """Topics and their overrides over broker-level defaults, persisted in every log dir."""

    def __init__(self, log_dirs: Sequence[Path], defaults: LogConfig):
        self.paths = tuple(log_dir / TOPICS_FILE for log_dir in log_dirs)
        self.defaults = defaults
        self._lock = threading.Lock()
        self._topics: dict[str, Topic] = {}
        self._configs: dict[str, LogConfig] = {}
        self._generation = 0
        self._stale_copies = False
        self._version = 0  # moves with every change of ``_topics``: ``versioned_topics``
        # Told (before, after) once a change is saved, under the store's lock: the
        # bucket's copy of the tiered topics (``topic_mirror``) follows the store.
        self.on_change: Callable[[Mapping[str, Topic], Mapping[str, Topic]], None] | None = None
        self._load()

    def _load(self) -> None:
        copies = {path: _read_document(path) for path in self.paths if path.exists()}
        if not copies:
            return
        newest = max(_generation(document) for document in copies.values())
        read_path, read = next((p, d) for p, d in copies.items() if _generation(d) == newest)
        for path, document in copies.items():
            if _generation(document) == newest and document["topics"] != read["topics"]:
                raise InvalidConfigError(
                    f"{read_path} and {path} disagree about the topics and neither is newer; "
                    "keep the right one, move the other out of its log dir and start again"
                )
        self._stale_copies = len(copies) < len(self.paths) or any(
            _generation(document) != newest for document in copies.values()
        )
        self._generation = newest
        try:
            for name, entry in read["topics"].items():
                factor = entry.get("replication_factor")
                assignment = entry.get("assignment")
                topic = Topic(
                    name,
                    int(entry["partitions"]),
                    dict(entry["configs"]),
                    None if factor is None else int(factor),
                    None if assignment is None else _replicas_by_partition(assignment),
                )
                self._topics[name] = topic
                self._configs[name] = self._validated(topic.configs)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise InvalidConfigError(f"{read_path} is unreadable: {error!r}") from None

    def sync(self) -> None:
        """Write the newest copy to every log dir whose copy is older or missing (a log
        dir just added). Called once the log dirs are locked, so no other broker writes.
        Best effort: the newest copy is read anyway, and the next change writes all."""
        with self._lock:
            if not self._stale_copies:
                return
            try:
                self._save_locked(self._topics)
            except KafkaStorageError as error:
                log.warning(
                    "the topic store's copies stay out of step until the next change: %s", error
                )

    def _save_locked(self, topics: dict[str, Topic]) -> None:
        """Write ``topics`` to every copy, and only then make them the store's: a change
        that cannot be written (a full disk) is refused and changes nothing."""
        try:
            self._write_copies(topics)
        except KafkaStorageError:
            # Some copies may hold the refused change: the store's own topics go over
            # them a generation later, so a restart does not read that change back.
            with contextlib.suppress(KafkaStorageError):
                self._write_copies(self._topics)
            raise
        before, self._topics = self._topics, topics
        self._version += 1
        if self.on_change is not None:
            self.on_change(before, topics)

    def _write_copies(self, topics: Mapping[str, Topic]) -> None:
        self._generation += 1
        self._stale_copies = True
        document = {
            "version": _VERSION,
            "generation": self._generation,
            "topics": {name: _entry(topic) for name, topic in sorted(topics.items())},
        }
        text = json.dumps(document, indent=2, sort_keys=True) + "\n"
        for path in self.paths:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise KafkaStorageError(f"cannot write {path}: {error}") from error
            atomic_write(path, text)
        self._stale_copies = False

    def _validated(self, configs: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_properties(configs, base=self.defaults)

    # -- reading ----------------------------------------------------------------------

    def topics(self) -> list[Topic]:
        return self.versioned_topics()[1]

    @property
    def version(self) -> int:
        """A number that moves whenever the topics change: a view built from
        ``versioned_topics`` holds while it is the version it was built from."""
        return self._version

    def versioned_topics(self) -> tuple[int, list[Topic]]:
        """The topics by name, and their ``version``."""
        with self._lock:
            return self._version, sorted(self._topics.values(), key=lambda topic: topic.name)

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
        _check_may_be_tiered(name, self._validated(configs))
        with self._lock:
            self._check_name_free_locked(name)
        return Topic(name, partitions, dict(configs))

    def create(self, name: str, partitions: int, configs: Mapping[str, str]) -> Topic:
        topic = self.validate_new(name, partitions, configs)
        with self._lock:
            self._check_name_free_locked(name)  # again: another create may have come first
            self._put_locked(topic)
        return topic

    def _check_name_free_locked(self, name: str) -> None:
        if name in self._topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        validate_no_collision(name, self._topics)

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
            self._save_locked({n: t for n, t in self._topics.items() if n != name})
            self._configs.pop(name, None)

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
        configs = {k: v for k, v in topic.configs.items() if k not in delete_configs}
        configs.update(set_configs)
        config = self.validate_configs(name, configs, delete_configs, current=topic.configs)
        if not validate_only:
            with self._lock:
                self._put_locked(replace(topic, configs=configs))
        return config

    def validate_configs(
        self,
        name: str,
        configs: Mapping[str, str],
        delete_configs: Sequence[str] = (),
        *,
        current: Mapping[str, str] | None = None,
    ) -> LogConfig:
        """The config ``configs`` make over the defaults for topic ``name``; INVALID_CONFIG
        for a bad value, an unknown key (among ``delete_configs`` too), the tier on an
        internal topic, or a change from the topic's ``current`` overrides that Kafka
        refuses (``check_config_change``)."""
        unknown = set(delete_configs) - set(LogConfig.keys())
        if unknown:
            raise InvalidConfigError(f"unknown topic config {', '.join(sorted(unknown))}")
        config = self._validated(configs)
        _check_may_be_tiered(name, config)
        if current is not None:
            check_config_change(self._validated(current), config)
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

    def put(self, topic: Topic) -> None:
        """Keep ``topic`` as given: as it was before a change that failed part way (its
        partition count may go down: the partitions above it were never made), or as
        the partition-state store of a replicated cluster says it is."""
        with self._lock:
            self._put_locked(topic)

    def _put_locked(self, topic: Topic) -> None:
        config = self._validated(topic.configs)
        self._save_locked({**self._topics, topic.name: topic})
        self._configs[topic.name] = config


def _entry(topic: Topic) -> dict[str, Any]:
    entry: dict[str, Any] = {"partitions": topic.partition_count, "configs": dict(topic.configs)}
    if topic.replication_factor is not None:  # files of unreplicated brokers stay as they were
        entry["replication_factor"] = topic.replication_factor
    if topic.assignment is not None:
        entry["assignment"] = [list(replicas) for replicas in topic.assignment]
    return entry


def _replicas_by_partition(assignment: list[list[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(broker) for broker in replicas) for replicas in assignment)


def _check_may_be_tiered(name: str, config: LogConfig) -> None:
    if name in INTERNAL_TOPICS and config.remote_storage_enable:
        raise InvalidConfigError(
            f"topic {name!r} cannot set remote.storage.enable=true: an internal topic stays "
            "local (its coordinator loads it from the local log only)"
        )


def _read_document(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except ValueError as error:
        raise InvalidConfigError(f"{path} is unreadable: {error!r}") from None
    if not isinstance(document, dict) or not isinstance(document.get("topics"), dict):
        raise InvalidConfigError(
            f"{path} is not a topics file: expected an object with "
            f'"version" and "topics" (an object of topics), got {document!r:.100}'
        )
    if document.get("version") != _VERSION:
        raise InvalidConfigError(f"{path}: unknown version {document.get('version')}")
    return document


def _generation(document: Mapping[str, Any]) -> int:
    """The save count a copy was written at; 0 for copies from before it was kept."""
    generation = document.get("generation", 0)
    return generation if isinstance(generation, int) else 0
