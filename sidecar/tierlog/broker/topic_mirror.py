"""The broker's tiered topics, copied into the bucket for a restore (``topic_records``).

The topic store calls ``changed(before, after)`` after each change it saved: a topic
that is tiered (``remote.storage.enable``, as an override or the broker's default) gets
its record written; a deleted topic's record goes, and so does that of a topic whose
tiering is turned off. That is KIP-950's disablement: ``remote.storage.enable=false``
is taken only with ``remote.log.delete.on.disable=true`` (``check_config_change``),
and the tier's copy of the topic is deleted (``RemoteLogManager``), so a restore must
not make it again from a record with no data behind it (``remote.log.copy.disable``
keeps the topic tiered, read only, and its record with it). The
copy is best effort, never a reason to refuse a change the broker has already made:
a store that is down is logged, and what was not written is written at the next
change or start (``sync``). A delete that failed is retried then too; a full sync
deletes only the records of topics this broker knows, never those the bucket lists
beside them, since another broker of the cluster may know a topic this one has not
applied yet (a topic this broker knows untiered but another turned on again gets its
record back once this broker applies that change).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from uuid import UUID

from tierlog.broker.topics import Topic
from tierlog.storage.config import LogConfig
from tierlog.storage.errors import TierlogError
from tierlog.storage.tier.store import ObjectStore
from tierlog.storage.tier.topic_records import (
    TopicRecord,
    delete_topic_record,
    put_topic_record,
    topic_record_names,
)

__all__ = ["TopicMirror"]

log = logging.getLogger(__name__)


class TopicMirror:
    def __init__(
        self, store: ObjectStore, defaults: LogConfig, topic_id: Callable[[str], UUID]
    ) -> None:
        self.store = store
        self.defaults = defaults
        self.topic_id = topic_id
        self._lock = threading.Lock()
        self._unwritten: dict[str, Topic] = {}  # puts that failed, by name
        self._undeleted: set[str] = set()  # deletes that failed

    def changed(self, before: Mapping[str, Topic], after: Mapping[str, Topic]) -> None:
        with self._lock:
            for name in before.keys() - after.keys():
                self._unwritten.pop(name, None)
                self._undeleted.add(name)
            for name, topic in after.items():
                if before.get(name) == topic:
                    continue
                if self._tiered(topic):
                    self._undeleted.discard(name)
                    self._unwritten[name] = topic
                elif name in before and self._tiered(before[name]):
                    self._unwritten.pop(name, None)  # turned off: its tier is deleted
                    self._undeleted.add(name)
            self._flush_locked()

    def sync(self, topics: Iterable[Topic]) -> None:
        """Write every tiered topic's record and delete those of topics known here as
        untiered (at start: changes made while the store was away, records of topics
        from before the bucket kept them, and those of topics turned off that an older
        version kept)."""
        with self._lock:
            untiered = set()
            for topic in topics:
                if self._tiered(topic):
                    self._unwritten[topic.name] = topic
                else:
                    untiered.add(topic.name)
            try:
                self._undeleted |= untiered & topic_record_names(self.store)
            except TierlogError as error:
                log.warning("cannot list the topic records in %s: %s", self.store.url, error)
            self._flush_locked()

    def _tiered(self, topic: Topic) -> bool:
        try:
            config = LogConfig.from_properties(topic.configs, base=self.defaults)
        except TierlogError:
            return False  # not a config the topic store would keep
        return config.remote_storage_enable

    def _flush_locked(self) -> None:
        try:
            for name in sorted(self._undeleted):
                delete_topic_record(self.store, name)
                self._undeleted.discard(name)
            for name, topic in sorted(self._unwritten.items()):
                record = TopicRecord(
                    name,
                    topic.partition_count,
                    topic.configs,
                    str(self.topic_id(name)),
                    topic.replication_factor,
                    topic.assignment,
                )
                put_topic_record(self.store, record)
                del self._unwritten[name]
        except TierlogError as error:
            log.warning(
                "topic records in %s stay behind until the next change or start: %s",
                self.store.url,
                error,
            )
