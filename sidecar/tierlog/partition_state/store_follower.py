"""A broker's (or the controller's) view of the partition-state store, kept up to date
by reading only what changed.

Each refresh asks the store which topics were written since the last one
(``PartitionStateStore.topic_changes``), reads those topics' partitions and configs,
and the leases (one read, a document per broker). An idle cluster so costs a refresh
the journal's read and the leases' whatever its partitions; the first refresh, and one
after the journal lost track, reads every topic (docs/SCALE.md measures both). It is
one class so the scale simulation (tests/benchmarks/scale_sim.py) reads exactly what a
broker reads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tierlog.partition_state.change_journal import ChangeCursor
from tierlog.partition_state.model import BrokerLease, PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.storage.errors import KafkaStorageError, UnknownTopicOrPartitionError

__all__ = ["StoreFollower", "StoreView", "TopicView"]

log = logging.getLogger(__name__)

TopicView = tuple[dict[int, PartitionState], dict[str, str]]  # partitions, config overrides


@dataclass(frozen=True)
class StoreView:
    """Every topic as last read, the leases as just read, and the topics this refresh
    read again (None: every topic)."""

    topics: Mapping[str, TopicView]
    leases: dict[int, BrokerLease]
    changed: frozenset[str] | None


class StoreFollower:
    """Not thread-safe: one refresh at a time (the store's calls block: run it in a
    thread from asyncio)."""

    def __init__(self, store: PartitionStateStore) -> None:
        self.store = store
        self._cursor: ChangeCursor | None = None
        self._topics: dict[str, TopicView] = {}
        self._unread: set[str] = set()  # a read failed: read again at the next refresh

    def refresh(self, also: Iterable[str] = ()) -> StoreView:
        """Read what changed since the last refresh, and the topics ``also`` names
        (whose change a caller knows of: a compare-and-swap it lost). A failure of the
        store's journal or leases raises (``KafkaStorageError``), and the next refresh
        asks again from the same place; a topic that cannot be read keeps its last view
        and is read again."""
        changes = self.store.topic_changes(self._cursor)
        changed = None if changes.topics is None else changes.topics | self._unread | set(also)
        if changed is None:
            names = self.store.list_topics()
            self._cursor = None  # until every topic is read again
            self._topics = {}
            self._unread = set()
            self._read(names)
        else:
            self._read(changed)
        leases = self.store.read_leases()
        self._cursor = changes.cursor
        return StoreView(dict(self._topics), leases, changed)

    def _read(self, topics: Iterable[str]) -> None:
        for topic in sorted(topics):
            try:
                self._topics[topic] = (
                    self.store.read_topic(topic),
                    self.store.read_topic_configs(topic),
                )
                self._unread.discard(topic)
            except UnknownTopicOrPartitionError:  # deleted
                self._topics.pop(topic, None)
                self._unread.discard(topic)
            except KafkaStorageError as error:
                log.warning("cannot read topic %s from the partition-state store: %s", topic, error)
                self._unread.add(topic)
