"""The partition-state store's interface, written once over two primitives.

Every change is a read-modify-write of one topic's partitions or one broker's lease;
a store only has to make that atomic (``_update_topic``, ``_update_lease``): a file
lock on one machine, a ``resourceVersion`` precondition on Kubernetes. What a change may
do (a compare-and-swap on the partition epoch, a lease taken over with a new broker
epoch) is decided here, by pure functions both stores share, so they cannot drift.

The methods block (files, HTTP): asyncio callers run them in a thread.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import replace

from tierlog.api.errors import (
    IneligibleReplicaError,
    InvalidPartitionsError,
    InvalidUpdateVersionError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
)
from tierlog.partition_state.model import BrokerLease, PartitionState
from tierlog.storage.errors import UnknownTopicOrPartitionError

__all__ = ["LeaseChange", "PartitionStateStore", "TopicChange"]

Partitions = dict[int, PartitionState]
# A change of one topic: its partitions now (None: no such topic) -> after (None: deleted).
TopicChange = Callable[[Partitions | None], Partitions | None]
LeaseChange = Callable[[BrokerLease | None], BrokerLease]


class PartitionStateStore(ABC):
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    # -- topics ------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: Mapping[int, PartitionState]) -> None:
        """Record a new topic; ``TOPIC_ALREADY_EXISTS`` when the name is taken."""

        def create(current: Partitions | None) -> Partitions:
            if current is not None:
                raise TopicAlreadyExistsError(f"topic {topic!r} already has partition state")
            return dict(partitions)

        self._update_topic(topic, create)

    def read_topic(self, topic: str) -> Partitions:
        partitions = self._read_topic(topic)
        if partitions is None:
            raise UnknownTopicOrPartitionError(f"no partition state for topic {topic!r}")
        return partitions

    def delete_topic(self, topic: str) -> None:
        def delete(current: Partitions | None) -> None:
            if current is None:
                raise UnknownTopicOrPartitionError(f"no partition state for topic {topic!r}")

        self._update_topic(topic, delete)
        self._write_configs(topic, None)

    def add_partitions(self, topic: str, added: Mapping[int, PartitionState]) -> None:
        """Add partitions after the topic's last (Kafka's CreatePartitions)."""

        def add(current: Partitions | None) -> Partitions:
            if current is None:
                raise UnknownTopicOrPartitionError(f"no partition state for topic {topic!r}")
            if min(added) != len(current):
                raise InvalidPartitionsError(
                    f"{topic} has {len(current)} partitions; new ones start there, "
                    f"not at {min(added)}"
                )
            return {**current, **added}

        self._update_topic(topic, add)

    # -- topic configs ------------------------------------------------------------------

    def write_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """The topic's config overrides, as every broker applies them (Kafka keeps them
        in its metadata log too). Written before the topic's partitions, so a broker that
        learns of the topic finds its configs."""
        self._write_configs(topic, dict(configs))

    def read_topic_configs(self, topic: str) -> dict[str, str]:
        return self._read_configs(topic) or {}

    def alter_partition(
        self, topic: str, partition: int, expected_epoch: int, new: PartitionState
    ) -> PartitionState:
        """Replace the partition's state if its partition epoch is still ``expected_epoch``;
        the stored state (epoch ``expected_epoch + 1``) is returned. A lost race raises
        ``INVALID_UPDATE_VERSION`` and changes nothing."""
        stored = replace(new, partition_epoch=expected_epoch + 1)

        def alter(current: Partitions | None) -> Partitions:
            if current is None or partition not in current:
                raise UnknownTopicOrPartitionError(f"no partition state for {topic}-{partition}")
            epoch = current[partition].partition_epoch
            if epoch != expected_epoch:
                raise InvalidUpdateVersionError(
                    f"{topic}-{partition} is at partition epoch {epoch}, not {expected_epoch}",
                    current_epoch=epoch,
                )
            return {**current, partition: stored}

        self._update_topic(topic, alter)
        return stored

    def alter_isr(
        self, topic: str, partition: int, expected: PartitionState, isr: tuple[int, ...]
    ) -> PartitionState:
        """The leader's ISR change (Kafka's AlterPartition), a compare-and-swap against
        ``expected``'s partition epoch. A broker it adds must hold a current lease
        (``INELIGIBLE_REPLICA`` otherwise, as Kafka's controller refuses a fenced or
        shutting-down broker): the controller fenced it, and a leader that still counts
        it caught up must not undo that."""
        now = self._clock()
        leases = self.read_leases()
        for added in sorted(set(isr) - set(expected.isr)):
            lease = leases.get(added)
            if lease is None or not lease.current_at(now):
                raise IneligibleReplicaError(
                    f"{topic}-{partition}: broker {added} cannot join the ISR: "
                    + ("it holds no lease" if lease is None else "its lease expired")
                )
        return self.alter_partition(
            topic, partition, expected.partition_epoch, expected.with_isr(isr)
        )

    # -- broker leases -----------------------------------------------------------------

    def acquire_lease(self, broker: int, holder: str, duration_s: float) -> BrokerLease:
        """Take the broker's lease for ``holder`` (a starting incarnation of the broker).
        A new holder gets the next broker epoch, which fences the previous one; the same
        holder just renews."""
        now = self._clock()

        def acquire(current: BrokerLease | None) -> BrokerLease:
            if current is not None and current.holder == holder:
                return BrokerLease(broker, holder, now, duration_s, current.broker_epoch)
            epoch = 1 if current is None else current.broker_epoch + 1
            return BrokerLease(broker, holder, now, duration_s, epoch)

        return self._update_lease(broker, acquire)

    def renew_lease(self, broker: int, holder: str) -> BrokerLease:
        """Renew ``holder``'s lease; ``STALE_BROKER_EPOCH`` when another incarnation took it."""
        now = self._clock()

        def renew(current: BrokerLease | None) -> BrokerLease:
            if current is None or current.holder != holder:
                taken = "nobody" if current is None else repr(current.holder)
                raise StaleBrokerEpochError(
                    f"broker {broker}'s lease is held by {taken}, not {holder!r}"
                )
            return BrokerLease(broker, holder, now, current.duration_s, current.broker_epoch)

        return self._update_lease(broker, renew)

    # -- what a store provides ---------------------------------------------------------

    @abstractmethod
    def list_topics(self) -> list[str]: ...

    @abstractmethod
    def read_leases(self) -> dict[int, BrokerLease]: ...

    @abstractmethod
    def _read_topic(self, topic: str) -> Partitions | None: ...

    @abstractmethod
    def _update_topic(self, topic: str, change: TopicChange) -> None:
        """Apply ``change`` to the topic's partitions atomically: no other change of the
        topic lands between the read it was given and the write of its result."""

    @abstractmethod
    def _read_configs(self, topic: str) -> dict[str, str] | None: ...

    @abstractmethod
    def _write_configs(self, topic: str, configs: dict[str, str] | None) -> None:
        """Replace the topic's configs document (None: remove it)."""

    @abstractmethod
    def _update_lease(self, broker: int, change: LeaseChange) -> BrokerLease:
        """Apply ``change`` to the broker's lease atomically; the lease written."""
