"""The leader's state of one follower's replica fetch stream: a fetch session (KIP-227).

A follower names every partition it follows in the stream's first request, then only
those whose fetch state changed and those it stopped following. The session keeps what
each partition asked for and the offsets the follower was last told, and listens to the
append watch: a partition appended to, whose high watermark moved or whose role changed
here is ``dirty`` (it may have news to answer) and ``moved`` (its follower's record is
made again at the next request, since the leader's end moved under it). Any other
partition costs nothing per request: its follower is where it was, as of the stream's
last request (``SessionClock``). A partition answered with an error leaves the session;
the follower names it again when it retries.

A request from a new incarnation of the follower (its broker epoch changed) records
every partition again, as does the check every ``OFFSETS_RECHECK_S`` for partitions
whose ISR the follower is out of: whether it may rejoin depends on its lease as the
leader last read it, which changes with no append. The same check compares each
partition's offsets that move without an append (the log start by retention, the
tier's end) with what the follower was told.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tierlog.api.v1 import replication_service_pb2 as pb
from tierlog.broker.watch import AppendWatch
from tierlog.replication.leader import LeaderPartition, SessionClock
from tierlog.storage.log import Log
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["OFFSETS_RECHECK_S", "ReplicaFetchSession", "told_offsets"]

# How often a session compares each partition's offsets with what its follower was told:
# the log start and the tier's end move with no append to say so. Neither is urgent (the
# follower keeps more meanwhile); a full pass per request cost 18% of a core at 2,000.
OFFSETS_RECHECK_S = 5.0

Offsets = tuple[int, int, int, int, int]


def told_offsets(data: pb.ReplicaFetchPartitionData) -> Offsets:
    """The offsets of an answer the follower goes by (``follower.apply_fetched``)."""
    return (
        data.high_watermark,
        data.log_start_offset,
        data.local_log_start_offset,
        data.log_end_offset,
        data.tiered_end_offset,
    )


def _log_offsets(log: Log) -> Offsets:
    return (
        log.high_watermark,
        log.log_start_offset,
        log.local_log_start_offset,
        log.log_end_offset,
        log.known_tiered_end_offset,
    )


@dataclass
class _Partition:
    asked: pb.ReplicaFetchPartition
    told: Offsets | None = None  # what the follower was last answered (None: nothing yet)


class ReplicaFetchSession:
    def __init__(
        self,
        watch: AppendWatch,
        left: Callable[[TopicPartition, SessionClock], None],
        now_ms: int,
    ) -> None:
        self._watch = watch
        self._left = left  # told of each partition that leaves the session
        self.clock = SessionClock(now_ms)
        self.partitions: dict[TopicPartition, _Partition] = {}
        self.wake = asyncio.Event()  # set when a partition becomes dirty
        self._dirty: set[TopicPartition] = set()
        self._moved: set[TopicPartition] = set()
        self._checked = time.monotonic()
        self._broker_epoch: int | None = None  # of the follower's last request

    def update(self, request: pb.ReplicaFetchRequest) -> set[TopicPartition]:
        """Take a request's partitions (a full one replaces the session's); the ones it
        names, whose followers are recorded and answered whatever they hold."""
        named = {TopicPartition(asked.topic, asked.partition) for asked in request.partitions}
        if request.broker_epoch != self._broker_epoch:  # a new incarnation: record it all
            self._moved |= self.partitions.keys()
            self._broker_epoch = request.broker_epoch
        if not request.incremental:
            for tp in [tp for tp in self.partitions if tp not in named]:
                self.remove(tp)
        for forgotten in request.forgotten:
            self.remove(TopicPartition(forgotten.topic, forgotten.partition))
        for asked in request.partitions:
            tp = TopicPartition(asked.topic, asked.partition)
            if tp not in self.partitions:
                self._watch.listen(tp, self._appended)
            self.partitions[tp] = _Partition(asked)
        self._dirty |= named
        return named

    def take_moved(self) -> set[TopicPartition]:
        """The partitions whose leader end (or role) moved since the last request; they
        are dirty too."""
        moved, self._moved = self._moved, set()
        self._dirty |= moved
        return moved

    def recheck(self, leaders: Mapping[TopicPartition, LeaderPartition], replica: int) -> None:
        """Every ``OFFSETS_RECHECK_S``: a partition whose offsets moved with no append to
        say so is dirty; one whose ISR ``replica`` is out of is recorded again at the
        next request."""
        now = time.monotonic()
        if now - self._checked < OFFSETS_RECHECK_S:
            return
        self._checked = now
        for tp, part in self.partitions.items():
            leader = leaders.get(tp)
            if leader is None:
                continue  # not led here: its change of role made it dirty
            if part.told != _log_offsets(leader.log):
                self._dirty.add(tp)
            if replica not in leader.state.isr:
                self._moved.add(tp)

    def take_dirty(self) -> list[tuple[TopicPartition, pb.ReplicaFetchPartition]]:
        """The partitions that may have news, with what they asked; none is dirty after
        (and ``wake`` is clear: what makes one dirty from now on sets it)."""
        self.wake.clear()
        dirty, self._dirty = self._dirty, set()
        return [(tp, self.partitions[tp].asked) for tp in dirty if tp in self.partitions]

    def still_dirty(self, tp: TopicPartition) -> None:
        """``tp`` was read with batches: it may have more."""
        if tp in self.partitions:
            self._dirty.add(tp)

    def has_news(self, tp: TopicPartition, data: pb.ReplicaFetchPartitionData) -> bool:
        """Whether ``data`` says anything its follower has not been told."""
        part = self.partitions.get(tp)
        return (
            part is None
            or part.told is None
            or bool(data.record_batches)
            or data.HasField("error")
            or data.HasField("diverging_epoch")
            or part.told != told_offsets(data)
        )

    def answered(self, data: pb.ReplicaFetchPartitionData) -> None:
        """``data`` went out: its offsets are told, or its error ends the partition's
        place in the session."""
        tp = TopicPartition(data.topic, data.partition)
        if data.HasField("error"):
            self.remove(tp)
        elif (part := self.partitions.get(tp)) is not None:
            part.told = told_offsets(data)

    def remove(self, tp: TopicPartition) -> None:
        if self.partitions.pop(tp, None) is not None:
            self._watch.unlisten(tp, self._appended)
            self._left(tp, self.clock)
        self._dirty.discard(tp)
        self._moved.discard(tp)

    def close(self) -> None:
        for tp in list(self.partitions):
            self.remove(tp)

    def _appended(self, tp: TopicPartition) -> None:
        self._dirty.add(tp)
        self._moved.add(tp)
        self.wake.set()
