"""A fetch session's state: the partitions one stream reads, and which may have news.

Kafka's consumer sends one fetch per broker for all its partitions, and KIP-227's
sessions let each fetch name only what changed. A ``FetchSession`` stream is that
session held open: the client adds partitions (from an offset, with a generation it
chose) and forgets them; the broker keeps each one's next offset. Instead of one
waiter per partition, the session listens to the append watch and keeps the set of
partitions that may have something to send (``dirty``): all of them when added, then
those appended to since they were last read empty. A partition whose read found
batches stays dirty (it may have more), and once sent it goes to the end of the read
order, so a message's byte budget reaches every partition in turn (Kafka rotates a
session's partitions alike). A partition that failed (not the leader, a fenced epoch,
out of range) leaves the session once its error is sent; the client adds it again.

The message budget is ``credits``: the client grants messages as it takes them, and
the broker sends none beyond the grant, which bounds what a slow reader makes the
broker hold to one message being written.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tierlog.api.errors import InvalidRequestError
from tierlog.api.v1 import log_service_pb2
from tierlog.broker.watch import AppendWatch
from tierlog.storage.records import NO_PARTITION_LEADER_EPOCH
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["FetchSessionState", "SessionPartition", "SessionSettings"]


@dataclass
class SessionPartition:
    """One partition of a session: where its next read starts (negative until the first
    read resolves -2 or -1) and the generation its answers carry."""

    tp: TopicPartition
    offset: int
    leader_epoch: int
    max_bytes: int  # 0: the message's bound
    generation: int


@dataclass(frozen=True)
class SessionSettings:
    """The long poll the last request asked for."""

    max_wait_ms: int = 0
    min_bytes: int = 0
    max_bytes: int = 0
    read_committed: bool = False


class FetchSessionState:
    def __init__(self, watch: AppendWatch) -> None:
        self._watch = watch
        # In read order: what was sent last goes to the end.
        self.partitions: dict[TopicPartition, SessionPartition] = {}
        self.settings = SessionSettings()
        self.credits = 0
        self.wake = asyncio.Event()  # set by an append, a change, or new credits
        self._dirty: set[TopicPartition] = set()

    def apply(
        self, request: log_service_pb2.FetchSessionRequest, settings: SessionSettings
    ) -> None:
        """A request's changes: its settings (checked by the caller), partitions added
        and forgotten, credits."""
        if request.credits < 0:
            raise InvalidRequestError(f"credits {request.credits} is negative")
        self.settings = settings
        for forgotten in request.forget:
            self.remove(TopicPartition(forgotten.topic, forgotten.partition))
        for added in request.add:
            if added.partition_max_bytes < 0:
                raise InvalidRequestError(
                    f"partition_max_bytes {added.partition_max_bytes} is negative"
                )
            tp = TopicPartition(added.topic, added.partition)
            self.remove(tp)  # a seek: read again, and in turn
            epoch = (
                added.current_leader_epoch
                if added.HasField("current_leader_epoch")
                else NO_PARTITION_LEADER_EPOCH
            )
            self.partitions[tp] = SessionPartition(
                tp, added.offset, epoch, added.partition_max_bytes, added.generation
            )
            self._watch.listen(tp, self._appended)
            self._dirty.add(tp)
        self.credits += request.credits
        self.wake.set()

    def remove(self, tp: TopicPartition) -> None:
        if self.partitions.pop(tp, None) is not None:
            self._watch.unlisten(tp, self._appended)
        self._dirty.discard(tp)

    def take_dirty(self) -> list[SessionPartition]:
        """The partitions that may have news, in read order; none is dirty afterwards
        (an append from now on makes it so again)."""
        dirty, self._dirty = self._dirty, set()
        return [part for tp, part in self.partitions.items() if tp in dirty]

    def still_dirty(self, part: SessionPartition) -> None:
        """``part`` was read with batches (or not read at all): look at it next time too."""
        if self.partitions.get(part.tp) is part:
            self._dirty.add(part.tp)

    def is_current(self, part: SessionPartition) -> bool:
        """Whether ``part`` is still in the session, not replaced by a later add."""
        return self.partitions.get(part.tp) is part

    def sent(self, part: SessionPartition, next_offset: int) -> None:
        """``part``'s batches up to ``next_offset`` went out: it reads on from there, last
        in the read order."""
        del self.partitions[part.tp]
        part.offset = next_offset
        self.partitions[part.tp] = part

    def close(self) -> None:
        for tp in list(self.partitions):
            self.remove(tp)

    def _appended(self, tp: TopicPartition) -> None:
        self._dirty.add(tp)
        self.wake.set()
