"""Topic changes on a replicated cluster: made in the partition-state store, for every broker.

Without replication each broker keeps its own topics file and is told each change. With
it the store is the one truth (as Kafka's metadata log is): a topic's partitions with
their replicas and its config overrides are written there, checked first against this
broker's rules (``TopicStore.validate_new``, ``LogConfig``), and every broker, this one
included, applies what it reads there (``ReplicaManager.poll_once``). These functions
block (the store's I/O): callers run them in a thread.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

from tierlog.api.errors import TopicAlreadyExistsError
from tierlog.broker.topics import TopicStore
from tierlog.partition_state.model import PartitionState
from tierlog.partition_state.store import PartitionStateStore
from tierlog.replication.placement import (
    Racks,
    assign_new_partitions,
    assign_replicas,
    check_assignment,
)
from tierlog.replication.replica_manager import ReplicaManager
from tierlog.storage.names import validate_no_collision

__all__ = ["StoreTopicChanges", "add_partitions", "alter_configs", "create_topic"]


def create_topic(
    store: PartitionStateStore,
    topics: TopicStore,
    racks: Racks,
    name: str,
    partition_count: int,
    replication_factor: int,
    configs: Mapping[str, str],
    *,
    validate_only: bool = False,
    assignment: Sequence[tuple[int, Sequence[int]]] | None = None,
    leader_epochs: Mapping[int, int] | None = None,
) -> None:
    """Place the topic's replicas (Kafka's striped assignment, starting at a broker the
    name picks, so topics spread; or the client's own ``assignment``, checked) and
    record it, configs first: a broker that learns of the topic finds them; each
    partition's first leader epoch is 0, or ``leader_epochs[partition]`` (a topic
    restored from the tier).
    TOPIC_ALREADY_EXISTS when the store has the name, INVALID_TOPIC_EXCEPTION when it
    has one that collides (``a.b`` and ``a_b``)."""
    topics.validate_new(name, partition_count, configs)
    if assignment is not None:
        placed = check_assignment(racks, assignment)
    else:
        placed = assign_replicas(
            racks,
            partition_count,
            replication_factor,
            start_index=zlib.crc32(name.encode()) % len(racks),
        )
    existing = store.list_topics()
    if name in existing:
        raise TopicAlreadyExistsError(f"topic {name!r} already exists")
    validate_no_collision(name, existing)
    if validate_only:
        return
    store.write_topic_configs(name, configs)
    epochs = leader_epochs or {}
    store.create_topic(
        name, {p: PartitionState.new(r, epochs.get(p, 0)) for p, r in placed.items()}
    )


def add_partitions(
    store: PartitionStateStore, racks: Racks, name: str, total: int, *, validate_only: bool
) -> None:
    """Grow the topic to ``total`` partitions, their replicas continuing its stripe."""
    current = store.read_topic(name)
    existing: Sequence[Sequence[int]] = [current[p].replicas for p in sorted(current)]
    added = assign_new_partitions(racks, existing, total)
    if not validate_only:
        store.add_partitions(name, {p: PartitionState.new(r) for p, r in added.items()})


def alter_configs(
    store: PartitionStateStore,
    topics: TopicStore,
    name: str,
    set_configs: Mapping[str, str],
    delete_configs: Sequence[str],
    *,
    validate_only: bool,
) -> None:
    """Kafka's incremental alter, validated here, applied by every broker."""
    store.read_topic(name)  # UNKNOWN_TOPIC_OR_PARTITION for a topic the store lacks
    current = store.read_topic_configs(name)
    configs = {k: v for k, v in current.items() if k not in delete_configs}
    configs.update(set_configs)
    topics.validate_configs(name, configs, delete_configs, current=current)
    if not validate_only:
        store.write_topic_configs(name, configs)


class StoreTopicChanges:
    """The broker core's ``ClusterTopicChanges``: this broker's replica manager's store
    and racks, and its poll to catch up with them."""

    def __init__(self, replicas: ReplicaManager, topics: TopicStore):
        self.replicas = replicas
        self.topics = topics

    def create_topic(
        self,
        name: str,
        partition_count: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool,
        assignment: Sequence[tuple[int, Sequence[int]]] | None,
    ) -> None:
        create_topic(
            self.replicas.store,
            self.topics,
            self.replicas.racks(),
            name,
            partition_count,
            replication_factor,
            configs,
            validate_only=validate_only,
            assignment=assignment,
        )

    def delete_topic(self, name: str) -> None:
        self.replicas.store.delete_topic(name)

    def add_partitions(self, name: str, total: int, *, validate_only: bool) -> None:
        add_partitions(
            self.replicas.store, self.replicas.racks(), name, total, validate_only=validate_only
        )

    def alter_configs(
        self,
        name: str,
        set_configs: Mapping[str, str],
        delete_configs: Sequence[str],
        *,
        validate_only: bool,
    ) -> None:
        alter_configs(
            self.replicas.store,
            self.topics,
            name,
            set_configs,
            delete_configs,
            validate_only=validate_only,
        )

    async def caught_up(self) -> None:
        await self.replicas.poll_once()
