"""Topic changes: create, delete, grow, reconfigure; one core for every front door.

The gRPC AdminService, the Kafka listener's admin APIs and the coordinators (which
create ``__consumer_offsets`` and ``__transaction_state`` on first use) all change
topics here, so each change is checked and made the same way whichever door it came in.

Without replication each broker keeps its own topics, and changes go to the topic
store first or last so that a crash in between leaves something start-up repairs: a
created topic is stored, then its logs are created (the next start creates any that
are missing); a deleted topic loses its logs, then its entry (a partition left on disk
is adopted again at the next start, never lost silently). A create or a growth that
fails part way (a full disk) is undone: the logs made so far go, then the entry (or
the old partition count comes back), so a failed create is not listed and its name is
free. Such a broker keeps one copy of each partition: a topic asking for more
replicas is refused with INVALID_REPLICATION_FACTOR.

With replication the partition-state store is the one truth: changes are made there
(``ClusterTopicChanges``, replication's) and every broker applies them, this one
before the change returns, so the caller's next call here finds it.

Changes run one at a time, in a thread, under one lock. A refused change raises its
typed error (and is logged: the operator sees why a topic is missing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from tierlog.api.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError
from tierlog.broker.partitions import Leader, Leaders, Partitions
from tierlog.broker.topics import Topic
from tierlog.broker.watch import AppendWatch
from tierlog.storage.errors import TierlogError
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["DEFAULT_REPLICATION_FACTORS", "Assignment", "ClusterTopicChanges", "TopicChanges"]

log = logging.getLogger(__name__)

# A replication factor that asks for the broker's default.replication.factor: Kafka's -1,
# and proto3's unset 0.
DEFAULT_REPLICATION_FACTORS = (0, -1)

T = TypeVar("T")

# A client's own placement of a new topic: (partition, replicas) pairs, in its order.
Assignment = Sequence[tuple[int, Sequence[int]]]


class ClusterTopicChanges(Protocol):
    """Topic changes made in a replicated cluster's partition-state store (blocking;
    replication's ``topic_changes.StoreTopicChanges``)."""

    def create_topic(
        self,
        name: str,
        partition_count: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool,
        assignment: Assignment | None,
    ) -> None: ...

    def delete_topic(self, name: str) -> None: ...

    def add_partitions(self, name: str, total: int, *, validate_only: bool) -> None: ...

    def alter_configs(
        self,
        name: str,
        set_configs: Mapping[str, str],
        delete_configs: Sequence[str],
        *,
        validate_only: bool,
    ) -> None: ...

    async def caught_up(self) -> None:
        """Apply on this broker what the store now says."""
        ...


class TopicChanges:
    def __init__(
        self,
        partitions: Partitions[Leaders[Leader]],
        watch: AppendWatch,
        *,
        default_replication_factor: int = 1,
        cluster: ClusterTopicChanges | None = None,
    ):
        self.partitions = partitions
        self.topics = partitions.topics
        self.watch = watch
        self.default_replication_factor = default_replication_factor
        self.cluster = cluster
        self._lock = asyncio.Lock()

    async def _run(self, what: str, name: str, change: Callable[..., T], *args: Any) -> T:
        """One blocking change, under the lock, a refusal logged under the request's name
        (``what``: the same in both front doors), then this broker caught up with the store
        (after a refusal too: TOPIC_ALREADY_EXISTS from another broker's create leaves
        that topic found here)."""
        try:
            async with self._lock:
                return await asyncio.to_thread(change, *args)
        except TierlogError as error:
            log.warning("%s of %r refused: %s: %s", what, name, error.reason, error)
            raise
        finally:
            if self.cluster is not None:
                await self.cluster.caught_up()

    # -- create -----------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partition_count: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
        assignment: Assignment | None = None,
    ) -> None:
        """Create the topic (or only check it can be), its replicas placed by the broker
        or, with replication, by the client's ``assignment`` ((partition, replicas)
        pairs; INVALID_REPLICA_ASSIGNMENT without replication: each partition is on
        its owner)."""
        await self._run(
            "CreateTopics",
            name,
            self._create,
            name,
            partition_count,
            replication_factor,
            dict(configs),
            validate_only,
            assignment,
        )

    def _create(
        self,
        name: str,
        count: int,
        replication_factor: int,
        configs: dict[str, str],
        validate_only: bool,
        assignment: Assignment | None,
    ) -> None:
        factor = self.replication_factor(replication_factor)
        if self.cluster is not None:
            self.cluster.create_topic(
                name, count, factor, configs, validate_only=validate_only, assignment=assignment
            )
            return
        if assignment is not None:
            raise InvalidReplicaAssignmentError(
                "this broker places each partition on its owner; a manual replica "
                "assignment needs replication (tierlog.replication.state.dir)"
            )
        if factor > 1:
            source = (
                " (default.replication.factor)"
                if replication_factor in DEFAULT_REPLICATION_FACTORS
                else ""
            )
            raise InvalidReplicationFactorError(
                f"replication factor {factor}{source}: this broker keeps one copy of each "
                "partition, on its owner; more replicas need replication, which it runs "
                "only with a partition-state store (tierlog.replication.state.dir)"
            )
        if validate_only:
            self.topics.validate_new(name, count, configs)
            return
        created = self.topics.create(name, count, configs)
        self._ensure_logs_or_undo(created, lambda: self._delete(name))

    def replication_factor(self, requested: int) -> int:
        """The factor asked for, the broker's default.replication.factor for 0 or -1."""
        if requested in DEFAULT_REPLICATION_FACTORS:
            return self.default_replication_factor  # at least 1: the config checks it
        if requested < 1:
            raise InvalidReplicationFactorError(
                f"replication factor {requested}: a partition has at least 1 replica "
                "(0 or -1 asks for the broker's default.replication.factor)"
            )
        return requested

    def _ensure_logs_or_undo(self, topic: Topic, undo: Callable[[], None]) -> None:
        """Create the topic's logs; when that fails part way, ``undo`` the change that
        asked for them, then raise the failure (the answer; an undo's own is logged)."""
        try:
            self.partitions.ensure_logs(topic)
        except BaseException:
            try:
                undo()
            except Exception:
                log.exception("topic %r: a failed change could not be undone", topic.name)
            raise

    # -- delete -----------------------------------------------------------------------

    async def delete_topic(self, name: str) -> None:
        delete = self._delete if self.cluster is None else self.cluster.delete_topic
        await self._run("DeleteTopics", name, delete, name)
        self.watch.deleted(name)  # long polls and streams waiting at its end: answer them now

    def _delete(self, name: str) -> None:
        self._delete_logs(self.partitions.owned(self.topics.get(name)))
        self.topics.delete(name)
        self.partitions.manager.write_checkpoints()

    def _delete_logs(self, tps: Iterable[TopicPartition]) -> None:
        manager = self.partitions.manager
        for tp in tps:
            if manager.has_log(tp):
                manager.delete_log(tp)

    # -- grow -------------------------------------------------------------------------

    async def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        """Grow the topic to ``total`` partitions (INVALID_PARTITIONS for no growth)."""
        await self._run("CreatePartitions", name, self._add_partitions, name, total, validate_only)

    def _add_partitions(self, name: str, total: int, validate_only: bool) -> None:
        if self.cluster is not None:
            self.topics.add_partitions(name, total, validate_only=True)
            self.cluster.add_partitions(name, total, validate_only=validate_only)
            return
        before = self.topics.get(name)
        grown = self.topics.add_partitions(name, total, validate_only=validate_only)
        if not validate_only:
            self._ensure_logs_or_undo(grown, lambda: self._shrink_back(before, grown))

    def _shrink_back(self, before: Topic, grown: Topic) -> None:
        added = self.partitions.owned(grown)
        self._delete_logs(tp for tp in added if tp.partition >= before.partition_count)
        self.topics.put(before)
        self.partitions.manager.write_checkpoints()

    # -- configs ----------------------------------------------------------------------

    async def alter_configs(
        self,
        name: str,
        set_configs: Mapping[str, str],
        delete_configs: Sequence[str],
        *,
        validate_only: bool = False,
    ) -> None:
        """Set some overrides, remove others (INVALID_CONFIG for a bad value or key)."""
        await self._run(
            "AlterConfigs",
            name,
            self._alter,
            name,
            dict(set_configs),
            list(delete_configs),
            validate_only,
        )

    def _alter(
        self, name: str, set_configs: dict[str, str], delete: list[str], validate_only: bool
    ) -> None:
        if self.cluster is not None:
            self.cluster.alter_configs(name, set_configs, delete, validate_only=validate_only)
            return
        config = self.topics.alter_configs(name, set_configs, delete, validate_only=validate_only)
        if validate_only:
            return
        manager = self.partitions.manager
        for tp in self.partitions.owned(self.topics.get(name)):
            if manager.has_log(tp):
                manager.get_log(tp).update_config(config)
