"""The partition-state store's interface, written once over a few primitives.

Every change is a read-modify-write of one stored object: a part of a topic's partitions
(``model.TopicLayout``) or one broker's lease. A store only has to make that atomic
(``_update_part``, ``_update_lease``): a file lock on one machine, a ``resourceVersion``
precondition on Kubernetes. What a change may do (a compare-and-swap on the partition
epoch, a lease taken over with a new broker epoch) and how a topic spans its parts are
decided here, by functions both stores share, so they cannot drift.

A topic is its head (part 0: the layout and the first partitions); the parts after it
are named by the topic id, so they are invisible until the head names that id:

- creating writes the parts after the head, then the head (refused if it exists);
- deleting removes the head (the topic is gone in that write), then the parts;
- adding partitions writes them into their parts beyond the head's partition count,
  where no reader looks, then raises the count in the head;
- ``alter_partitions`` writes each touched part once, in ascending order: every
  partition's compare-and-swap is decided in its part's one write, so a batch is atomic
  per part, not across parts (a writer that dies between two parts has landed the first
  one's changes only: each partition's change stands alone, as in Kafka's AlterPartition).
  The directory store makes a batch's parts seen together (``_update_parts``): a
  survivor reads a stopping broker's whole hand-over at once, not half of it first.

Readers that keep a view of the store (each broker, the controller) ask
``topic_changes`` which topics were written since they last looked (``change_journal``),
and read only those: an idle cluster costs them one small read, not a read of every part.

The methods block (files, HTTP): asyncio callers run them in a thread.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from tierlog.api.errors import (
    IneligibleReplicaError,
    InvalidPartitionsError,
    InvalidUpdateVersionError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
)
from tierlog.broker.scram_credentials import CredentialDocument
from tierlog.partition_state.change_journal import ChangeCursor, TopicChanges, not_watching
from tierlog.partition_state.decoded_parts import DecodedParts
from tierlog.partition_state.model import (
    PARTITIONS_PER_PART,
    BrokerLease,
    PartitionState,
    StatePart,
    TopicLayout,
    part_from_json,
    part_to_json,
    split_into_parts,
)
from tierlog.storage.errors import KafkaStorageError, UnknownTopicOrPartitionError

__all__ = ["AlteredPartitions", "LeaseChange", "PartChange", "PartitionStateStore"]

Partitions = dict[int, PartitionState]
# A change of one stored part: its document now (None: absent) -> after (None: removed).
PartChange = Callable[[str | None], str | None]
LeaseChange = Callable[[BrokerLease | None], BrokerLease]
HEAD = 0


@dataclass(frozen=True)
class AlteredPartitions:
    """A batch's outcome: the states stored (each at its new partition epoch), and the
    partitions whose compare-and-swap lost, with the partition epoch they are at."""

    stored: dict[int, PartitionState] = field(default_factory=dict)
    lost: dict[int, int] = field(default_factory=dict)


class PartitionStateStore(ABC):
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.part_writes = 0  # parts written or removed: what a batch costs the store
        self._decoded = DecodedParts()  # each document decoded once (``_decode``)
        self.part_decodes = 0  # parts decoded from their documents: what reads cost the CPU

    # -- topics ------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: Mapping[int, PartitionState]) -> None:
        """Record a new topic; ``TOPIC_ALREADY_EXISTS`` when the name is taken."""
        if self._read_part(topic, HEAD, "") is not None:
            raise TopicAlreadyExistsError(f"topic {topic!r} already has partition state")
        layout = TopicLayout(uuid.uuid4().hex, len(partitions), PARTITIONS_PER_PART)
        parts = split_into_parts(partitions, layout)
        for index in range(1, layout.part_count):
            text = self._encode(topic, StatePart(layout.topic_id, index, parts.get(index, {})))
            self._update_part(topic, index, layout.topic_id, _written_as(text))
        head = self._encode(topic, StatePart(layout.topic_id, HEAD, parts.get(HEAD, {}), layout))

        def create(current: str | None) -> str:
            if current is not None:
                raise TopicAlreadyExistsError(f"topic {topic!r} already has partition state")
            return head

        try:
            self._update_part(topic, HEAD, layout.topic_id, create)
        except TopicAlreadyExistsError:
            self._remove_parts(topic, layout)  # a rival created it first: ours are litter
            raise

    def read_topic(self, topic: str) -> Partitions:
        partitions = self._read_topic(topic)
        if partitions is None:
            raise UnknownTopicOrPartitionError(f"no partition state for topic {topic!r}")
        return partitions

    def delete_topic(self, topic: str) -> None:
        removed: list[TopicLayout] = []

        def delete(current: str | None) -> None:
            if current is None:
                raise UnknownTopicOrPartitionError(f"no partition state for topic {topic!r}")
            removed[:] = [self._head_layout(topic, current)]

        self._update_part(topic, HEAD, "", delete)
        self._remove_parts(topic, removed[0])
        self._decoded.forget(topic)
        self._write_configs(topic, None)

    def add_partitions(self, topic: str, added: Mapping[int, PartitionState]) -> None:
        """Add partitions after the topic's last (Kafka's CreatePartitions)."""
        layout = self._read_layout(topic)
        if min(added) != layout.partition_count:
            raise InvalidPartitionsError(
                f"{topic} has {layout.partition_count} partitions; new ones start there, "
                f"not at {min(added)}"
            )
        parts = split_into_parts(added, layout)
        for index, states in sorted(parts.items()):
            if index != HEAD:  # beyond the head's count: no reader looks there yet
                self._update_part(
                    topic,
                    index,
                    layout.topic_id,
                    self._merge(topic, layout.topic_id, index, states),
                )
        grown = replace(layout, partition_count=max(added) + 1)

        def commit(current: str | None) -> str:
            head = self._decode(topic, HEAD, current, layout.topic_id)
            if head.layout != layout:
                raise InvalidPartitionsError(
                    f"{topic}'s partitions changed while partitions were being added"
                )
            partitions = {**head.partitions, **parts.get(HEAD, {})}
            return self._encode(topic, StatePart(layout.topic_id, HEAD, partitions, grown))

        self._update_part(topic, HEAD, layout.topic_id, commit)

    def alter_partition(
        self, topic: str, partition: int, expected_epoch: int, new: PartitionState
    ) -> PartitionState:
        """Replace the partition's state if its partition epoch is still ``expected_epoch``;
        the stored state (epoch ``expected_epoch + 1``) is returned. A lost race raises
        ``INVALID_UPDATE_VERSION`` and changes nothing."""
        altered = self.alter_partitions(topic, {partition: (expected_epoch, new)})
        if partition in altered.lost:
            epoch = altered.lost[partition]
            raise InvalidUpdateVersionError(
                f"{topic}-{partition} is at partition epoch {epoch}, not {expected_epoch}",
                current_epoch=epoch,
            )
        return altered.stored[partition]

    def alter_partitions(
        self, topic: str, changes: Mapping[int, tuple[int, PartitionState]]
    ) -> AlteredPartitions:
        """Many partitions' compare-and-swaps (partition -> (expected partition epoch, new
        state)) in one write per part they touch. Each lands or loses on its own epoch;
        ``UNKNOWN_TOPIC_OR_PARTITION`` when the topic (or one of the partitions) is gone,
        leaving the parts not yet written unchanged."""
        layout = self._read_layout(topic)
        by_part: dict[int, list[int]] = {}
        for partition in sorted(changes):
            by_part.setdefault(layout.part_of(partition), []).append(partition)
        landed = {index: AlteredPartitions() for index in by_part}
        alters = {
            index: self._alter_part(topic, layout, index, partitions, changes, landed[index])
            for index, partitions in by_part.items()
        }
        self._update_parts(topic, layout.topic_id, alters)
        outcome = AlteredPartitions()
        for part in landed.values():
            outcome.stored.update(part.stored)
            outcome.lost.update(part.lost)
        return outcome

    def _alter_part(
        self,
        topic: str,
        layout: TopicLayout,
        index: int,
        partitions: list[int],
        changes: Mapping[int, tuple[int, PartitionState]],
        landed: AlteredPartitions,
    ) -> PartChange:
        """The change of part ``index`` for ``partitions``' compare-and-swaps; what it
        decided goes into ``landed`` (afresh on each try: a store may try again)."""

        def alter(current: str | None) -> str:
            part = self._decode(topic, index, current, layout.topic_id)
            count = (part.layout or layout).partition_count
            landed.stored.clear()
            landed.lost.clear()
            states = dict(part.partitions)
            for partition in partitions:
                if partition not in states or partition >= count:
                    raise UnknownTopicOrPartitionError(
                        f"no partition state for {topic}-{partition}"
                    )
                expected, new = changes[partition]
                epoch = states[partition].partition_epoch
                if epoch != expected:
                    landed.lost[partition] = epoch
                    continue
                states[partition] = landed.stored[partition] = new.with_partition_epoch(
                    expected + 1
                )
            return self._encode(topic, replace(part, partitions=states))

        return alter

    def _read_topic(self, topic: str) -> Partitions | None:
        """Every partition of the topic: the head, then the parts it names."""
        while True:
            text = self._read_part(topic, HEAD, "")
            if text is None:
                self._decoded.forget(topic)
                return None
            head = self._decode(topic, HEAD, text, None)
            layout = _layout_of(head)
            partitions = dict(head.partitions)
            for index in range(1, layout.part_count):
                part_text = self._read_part(topic, index, layout.topic_id)
                if part_text is None:
                    break
                partitions.update(self._decode(topic, index, part_text, layout.topic_id).partitions)
            else:
                return {p: s for p, s in partitions.items() if p < layout.partition_count}
            if self._read_part(topic, HEAD, "") == text:  # not deleted or re-created since
                raise KafkaStorageError(
                    f"partition state of {topic!r}: part {index} of topic id "
                    f"{layout.topic_id} is missing"
                )

    def _read_layout(self, topic: str) -> TopicLayout:
        text = self._read_part(topic, HEAD, "")
        if text is None:
            raise UnknownTopicOrPartitionError(f"no partition state for topic {topic!r}")
        return self._head_layout(topic, text)

    def _head_layout(self, topic: str, text: str) -> TopicLayout:
        return _layout_of(self._decode(topic, HEAD, text, None))

    def _decode(self, topic: str, index: int, text: str | None, topic_id: str | None) -> StatePart:
        """The part in ``text``: ``UNKNOWN_TOPIC_OR_PARTITION`` when it is absent or of
        another incarnation of the topic than ``topic_id`` (None: any)."""
        if text is None:
            raise UnknownTopicOrPartitionError(f"no partition state for topic {topic!r}")
        part = self._decoded.get(topic, index, text)
        if part is None:
            part = part_from_json(text, f"partition state of {topic!r}, part {index}")
            self._decoded.put(topic, index, text, part)
            self.part_decodes += 1
        if part.index != index or (part.layout is None) != (index != HEAD):
            raise KafkaStorageError(
                f"partition state of {topic!r}: part {index} holds part {part.index}"
            )
        if topic_id is not None and part.topic_id != topic_id:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} was deleted (and perhaps created again) meanwhile"
            )
        return part

    def _merge(self, topic: str, topic_id: str, index: int, states: Partitions) -> PartChange:
        def merge(current: str | None) -> str:
            found = (
                {} if current is None else self._decode(topic, index, current, topic_id).partitions
            )
            return self._encode(topic, StatePart(topic_id, index, {**found, **states}))

        return merge

    def _encode(self, topic: str, part: StatePart) -> str:
        """``part``'s document, its decoding known from now on (a writer reads back
        what it wrote at its next pass or poll)."""
        text = part_to_json(part)
        self._decoded.put(topic, part.index, text, part)
        return text

    def _remove_parts(self, topic: str, layout: TopicLayout) -> None:
        for index in range(1, layout.part_count):
            self._update_part(topic, index, layout.topic_id, _written_as(None))

    # -- topic configs ------------------------------------------------------------------

    def write_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """The topic's config overrides, as every broker applies them (Kafka keeps them
        in its metadata log too). Written before the topic's partitions, so a broker that
        learns of the topic finds its configs."""
        self._write_configs(topic, dict(configs))

    def read_topic_configs(self, topic: str) -> dict[str, str]:
        return self._read_configs(topic) or {}

    def alter_isrs(
        self, topic: str, changes: Mapping[int, tuple[PartitionState, tuple[int, ...]]]
    ) -> AlteredPartitions:
        """Leaders' ISR changes (Kafka's AlterPartition) of ``topic``'s partitions
        (partition -> (the state it was decided on, the new ISR)), each a compare-and-swap
        against that state's partition epoch, in one write per part (``alter_partitions``).
        A broker a change adds must hold a current lease and not be in controlled shutdown
        (``INELIGIBLE_REPLICA`` otherwise, and nothing is written, as Kafka's controller
        refuses a fenced or shutting-down broker, KIP-841): the controller fenced it, or it
        is leaving every ISR while it still fetches, and a leader that counts it caught up
        must not undo that. The leases are read after the partitions' states the change
        was decided on: a leader that saw a stopping broker's hand-over sees its mark."""
        now = self._clock()
        leases = self.read_leases()
        for partition, (expected, isr) in sorted(changes.items()):
            for added in sorted(set(isr) - set(expected.isr)):
                refused = _ineligible(leases.get(added), now)
                if refused is not None:
                    raise IneligibleReplicaError(
                        f"{topic}-{partition}: broker {added} cannot join the ISR: {refused}"
                    )
        return self.alter_partitions(
            topic,
            {
                p: (expected.partition_epoch, expected.with_isr(isr))
                for p, (expected, isr) in changes.items()
            },
        )

    # -- broker leases -----------------------------------------------------------------

    def acquire_lease(
        self, broker: int, holder: str, duration_s: float, logs_lost: bool = False
    ) -> BrokerLease:
        """Take the broker's lease for ``holder`` (a starting incarnation of the broker).
        A new holder gets the next broker epoch, which fences the previous one; the same
        holder just renews a lease it has not given up. ``logs_lost``: the incarnation's
        log dir was formatted at its start, which the lease says when an incarnation of
        the broker held it before (a broker's first start has lost nothing)."""
        now = self._clock()

        def acquire(current: BrokerLease | None) -> BrokerLease:
            if current is not None and current.holder == holder and not current.released:
                return replace(current, renewed_at=now, duration_s=duration_s)
            if current is None:
                return BrokerLease(broker, holder, now, duration_s, 1)
            epoch = current.broker_epoch + 1
            return BrokerLease(broker, holder, now, duration_s, epoch, logs_lost=logs_lost)

        return self._update_lease(broker, acquire)

    def renew_lease(self, broker: int, holder: str) -> BrokerLease:
        """Renew ``holder``'s lease; ``STALE_BROKER_EPOCH`` when another incarnation took it."""
        now = self._clock()

        def renew(current: BrokerLease | None) -> BrokerLease:
            return replace(_held(broker, holder, current), renewed_at=now)

        return self._update_lease(broker, renew)

    def enter_controlled_shutdown(self, broker: int, holder: str) -> BrokerLease:
        """Mark ``holder``'s lease as in controlled shutdown (renewed too): from this write
        on no ISR change adds the broker (``alter_isrs``), and leaders that read it stop
        asking. Only a new incarnation's lease clears it. ``STALE_BROKER_EPOCH`` when
        another incarnation took the lease."""
        now = self._clock()

        def enter(current: BrokerLease | None) -> BrokerLease:
            held = _held(broker, holder, current)
            return replace(held, renewed_at=now, in_controlled_shutdown=True)

        return self._update_lease(broker, enter)

    def release_lease(self, broker: int, holder: str) -> BrokerLease:
        """Give ``holder``'s lease up: the last step of a clean stop, once its leaderships
        are handed over and its last fetches done. The broker counts as gone from this
        write on (not live to any controller, in no ISR, out of Metadata), as Kafka's
        controller fences a broker whose controlled shutdown completed. The record and
        its broker epoch stay: the next incarnation takes the next epoch, and no renewal
        by this holder makes the lease current again. ``STALE_BROKER_EPOCH`` when
        another incarnation took the lease (it is not this holder's to give)."""
        now = self._clock()

        def release(current: BrokerLease | None) -> BrokerLease:
            return replace(_held(broker, holder, current), renewed_at=now, released=True)

        return self._update_lease(broker, release)

    def logs_recovered(self, broker: int, holder: str) -> BrokerLease:
        """Clear ``logs_lost`` from ``holder``'s lease (renewed too): no partition is left
        that only its lost logs were in sync for. ``STALE_BROKER_EPOCH`` when another
        incarnation took the lease."""
        now = self._clock()

        def recovered(current: BrokerLease | None) -> BrokerLease:
            return replace(_held(broker, holder, current), renewed_at=now, logs_lost=False)

        return self._update_lease(broker, recovered)

    def close(self) -> None:  # noqa: B027 - most stores run nothing beside their calls
        """Release what the store runs beside its calls (a watch): its owner stops."""

    def watch_changes(self, changed: Callable[[], None]) -> Callable[[], None]:
        """Have ``changed()`` called, from a thread of the store's, soon after the store
        may have changed (its journal moved), so a reader reads at once rather than at
        its next poll; the function that stops the calls. A store that cannot tell calls
        nothing (this default): its readers poll."""
        return not_watching

    # -- what a store provides ---------------------------------------------------------

    @abstractmethod
    def list_topics(self) -> list[str]: ...

    @abstractmethod
    def read_leases(self) -> dict[int, BrokerLease]: ...

    @abstractmethod
    def topic_changes(self, since: ChangeCursor | None) -> TopicChanges:
        """The topics whose partitions or configs were written after ``since`` (None,
        or a reader too far behind: every topic may have been), and the cursor to ask
        from next. A change this store object made is among them once it returned."""

    @abstractmethod
    def scram_credentials(self) -> CredentialDocument:
        """The document of users' SCRAM credentials (``broker.scram_credentials``), kept
        beside the topics so every broker of the cluster reads the same one."""

    @abstractmethod
    def _read_part(self, topic: str, index: int, topic_id: str) -> str | None:
        """The document of the topic's part ``index`` (the head, 0, is one per topic
        name; the others are stored under ``topic_id``); None when absent."""

    @abstractmethod
    def _update_part(self, topic: str, index: int, topic_id: str, change: PartChange) -> None:
        """Apply ``change`` to the part's document atomically: no other change of the
        part lands between the read it was given and the write of its result. A result
        equal to what was read writes nothing; each write or removal counts in
        ``part_writes``."""

    def _update_parts(self, topic: str, topic_id: str, changes: Mapping[int, PartChange]) -> None:
        """Each part's change (``_update_part``), in ascending order of part. A store
        that can make them seen together does (the directory store: a reader sees all of
        them or none); here each lands on its own."""
        for index in sorted(changes):
            self._update_part(topic, index, topic_id, changes[index])

    @abstractmethod
    def _read_configs(self, topic: str) -> dict[str, str] | None: ...

    @abstractmethod
    def _write_configs(self, topic: str, configs: dict[str, str] | None) -> None:
        """Replace the topic's configs document (None: remove it)."""

    @abstractmethod
    def _update_lease(self, broker: int, change: LeaseChange) -> BrokerLease:
        """Apply ``change`` to the broker's lease atomically; the lease written."""


def _layout_of(head: StatePart) -> TopicLayout:
    assert head.layout is not None  # a head always has one (``_decode`` checks)
    return head.layout


def _held(broker: int, holder: str, current: BrokerLease | None) -> BrokerLease:
    """The broker's lease ``current``: ``STALE_BROKER_EPOCH`` unless ``holder`` holds it
    and has not given it up (a lease given up is never current again for its holder)."""
    if current is None or current.holder != holder:
        taken = "nobody" if current is None else repr(current.holder)
        raise StaleBrokerEpochError(f"broker {broker}'s lease is held by {taken}, not {holder!r}")
    if current.released:
        raise StaleBrokerEpochError(f"broker {broker}'s lease was given up by {holder!r}")
    return current


def _ineligible(lease: BrokerLease | None, now: float) -> str | None:
    """Why the broker of ``lease`` may not join an ISR at ``now`` (None: it may)."""
    if lease is None:
        return "it holds no lease"
    if lease.released:
        return "it stopped and gave its lease up"
    if not lease.current_at(now):
        return "its lease expired"
    if lease.in_controlled_shutdown:
        return "it is in controlled shutdown"
    return None


def _written_as(text: str | None) -> PartChange:
    """A change that writes ``text`` (None: removes the part) whatever was there."""
    return lambda _: text
