"""The controller's tests run on both partition-state stores (``store_at`` from
tests/partition_state), and some race it with a rival writer (``RivalFirst``)."""

from __future__ import annotations

from collections.abc import Callable

from tests.partition_state.conftest import Clock, store_at
from tierlog.broker.scram_credentials import CredentialDocument
from tierlog.partition_state.change_journal import ChangeCursor, TopicChanges
from tierlog.partition_state.model import BrokerLease, PartitionState
from tierlog.partition_state.store import LeaseChange, PartChange, Partitions, PartitionStateStore

__all__ = ["Clock", "OpenStore", "RivalFirst", "store_at"]

OpenStore = Callable[..., tuple[PartitionStateStore, str, str]]


class RivalFirst(PartitionStateStore):
    """A real store in which, once ``armed``, a rival's change lands right after the
    next read of ``topic``: whoever decided on that read then loses its compare-and-swap,
    the race every decider must survive, made to happen on cue."""

    def __init__(
        self,
        store: PartitionStateStore,
        rival: PartitionStateStore,
        topic: str,
        partition: int,
        change: Callable[[PartitionState], PartitionState],
    ) -> None:
        super().__init__()
        self._store, self._rival = store, rival
        self._topic, self._partition, self._change = topic, partition, change
        self.armed = False
        self.rival_changes: list[PartitionState] = []

    def _read_topic(self, topic: str) -> Partitions | None:
        partitions = self._store._read_topic(topic)
        if self.armed and topic == self._topic and partitions is not None:
            self.armed = False
            seen = partitions[self._partition]
            stored = self._rival.alter_partition(
                topic, self._partition, seen.partition_epoch, self._change(seen)
            )
            self.rival_changes.append(stored)
        return partitions

    def scram_credentials(self) -> CredentialDocument:
        return self._store.scram_credentials()

    def list_topics(self) -> list[str]:
        return self._store.list_topics()

    def read_leases(self) -> dict[int, BrokerLease]:
        return self._store.read_leases()

    def topic_changes(self, since: ChangeCursor | None) -> TopicChanges:
        return self._store.topic_changes(since)

    def watch_changes(self, changed: Callable[[], None]) -> Callable[[], None]:
        return self._store.watch_changes(changed)

    def _read_part(self, topic: str, index: int, topic_id: str) -> str | None:
        return self._store._read_part(topic, index, topic_id)

    def _update_part(self, topic: str, index: int, topic_id: str, change: PartChange) -> None:
        self._store._update_part(topic, index, topic_id, change)

    def _update_lease(self, broker: int, change: LeaseChange) -> BrokerLease:
        return self._store._update_lease(broker, change)

    def _read_configs(self, topic: str) -> dict[str, str] | None:
        return self._store._read_configs(topic)

    def _write_configs(self, topic: str, configs: dict[str, str] | None) -> None:
        self._store._write_configs(topic, configs)
