"""Incremental fetch sessions (KIP-227): what a consumer fetches, kept on the broker, so
each fetch names only what changed and each answer carries only what is new.

A session is the partitions one client fetches with, per partition the offset and size
it last asked and what it was last told (high watermark, last stable offset, log
start). A full fetch at epoch 0 makes one (its id in the answer); the client's next
fetches name that id and the epoch after the last one (1, 2, ... wrapping to 1), and
list only partitions added or changed and those to forget. The answer to such an
incremental fetch leaves out every partition with nothing new. Epoch -1 ends the
session named (if any) and fetches without one. A wrong epoch is
INVALID_FETCH_SESSION_EPOCH, an id not held (or held for another principal: whether it
exists is not told) FETCH_SESSION_ID_NOT_FOUND; the client then starts over with a full
fetch, so nothing is lost but bytes.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's
1000) as Kafka's ``FetchSessionCache`` does: a session unused for
``tierlog.kafka.fetch.session.eviction.ms`` (Kafka's fixed 2 minutes) is stale and
removed; when the cache is full, a new session takes the slot of the smallest session
older than that time if it has more partitions (a big consumer saves more bytes than a
small one), else it is not made and the client fetches in full. Sessions live only in
memory: a broker that restarts answers FETCH_SESSION_ID_NOT_FOUND and the client makes
a new one.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tierlog.storage.errors import InvalidConfigError

__all__ = [
    "FETCH_SESSION_KEYS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "NO_SESSION_ID",
    "CachedPartition",
    "FetchSession",
    "FetchSessionCache",
    "FetchSessionConfig",
    "SessionKey",
    "next_epoch",
]

FETCH_SESSION_KEYS = frozenset(
    {"max.incremental.fetch.session.cache.slots", "tierlog.kafka.fetch.session.eviction.ms"}
)
NO_SESSION_ID = 0  # an answer with it: no session was made
INITIAL_EPOCH = 0  # a full fetch that makes a session
FINAL_EPOCH = -1  # a full fetch without a session (ending the one named)
_INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch a session expects after ``epoch`` (past int32's end it wraps to 1)."""
    return 1 if epoch == _INT32_MAX else epoch + 1


@dataclass(frozen=True)
class FetchSessionConfig:
    cache_slots: int = 1000  # max.incremental.fetch.session.cache.slots
    eviction_ms: int = 120_000  # unused this long, a session is stale

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> FetchSessionConfig:
        return cls(
            cache_slots=_count(props, "max.incremental.fetch.session.cache.slots", 1000, 0),
            eviction_ms=_count(props, "tierlog.kafka.fetch.session.eviction.ms", 120_000, 1),
        )


def _count(props: Mapping[str, str], key: str, default: int, least: int) -> int:
    value = props.get(key, str(default)).strip()
    if not value.isdigit() or not least <= int(value) <= _INT32_MAX:
        raise InvalidConfigError(f"{key} must be a count in {least}..{_INT32_MAX}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class SessionKey:
    """A partition as the client names it: by topic name (Fetch v12 and older) or id."""

    topic: str | uuid.UUID
    partition: int


@dataclass
class CachedPartition:
    """What the client last asked of a partition and what it was last told (-1: not yet)."""

    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def asked_again(self, asked: CachedPartition) -> None:
        """The client's new offset, size or leader epoch (what it was told stays)."""
        self.fetch_offset = asked.fetch_offset
        self.max_bytes = asked.max_bytes
        self.leader_epoch = asked.leader_epoch

    def told(self, high_watermark: int, last_stable_offset: int, log_start_offset: int) -> bool:
        """Record what an answer says of the partition; whether any of it is news."""
        told = (high_watermark, last_stable_offset, log_start_offset)
        news = told != (self.high_watermark, self.last_stable_offset, self.log_start_offset)
        self.high_watermark, self.last_stable_offset, self.log_start_offset = told
        return news


@dataclass(eq=False)
class FetchSession:
    session_id: int
    principal: str
    uses_topic_ids: bool  # made by Fetch v13+: partitions named by topic id
    created_s: float
    last_used_s: float
    epoch: int = 1  # the epoch the client's next incremental fetch must carry
    partitions: OrderedDict[SessionKey, CachedPartition] = field(default_factory=OrderedDict)

    def update(
        self, asked: Mapping[SessionKey, CachedPartition], forgotten: Iterable[SessionKey]
    ) -> None:
        """An incremental fetch's changes: partitions added or asked anew, then those
        forgotten."""
        for key, partition in asked.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = partition
            else:
                cached.asked_again(partition)
        for key in forgotten:
            self.partitions.pop(key, None)

    def served_last(self, key: SessionKey) -> None:
        """A partition that returned records goes to the back of the session, so the
        next fetch's byte budget reaches the others first (Kafka's rotation)."""
        self.partitions.move_to_end(key)


class FetchSessionCache:
    """Every session of one listener, by id. Used on the event loop only."""

    def __init__(
        self,
        config: FetchSessionConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config = config or FetchSessionConfig()
        self._clock = clock
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self.evictions = 0  # sessions removed to make room or for being stale

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    @property
    def partition_count(self) -> int:
        return sum(len(session.partitions) for session in self._sessions.values())

    def get(self, session_id: int, principal: str) -> FetchSession | None:
        """The session, used now; None if not held for ``principal``."""
        self._remove_stale()
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            return None
        session.last_used_s = self._clock()
        self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int, principal: str) -> None:
        """End a session its client closes (nothing if not held for ``principal``)."""
        session = self._sessions.get(session_id)
        if session is not None and session.principal == principal:
            del self._sessions[session_id]

    def create(
        self,
        principal: str,
        uses_topic_ids: bool,
        partitions: OrderedDict[SessionKey, CachedPartition],
    ) -> FetchSession | None:
        """A new session over ``partitions``; None when the cache is full and holds no
        session it should give up for this one."""
        self._remove_stale()
        if len(self._sessions) >= self.config.cache_slots and not self._evict_for(len(partitions)):
            return None
        now = self._clock()
        session = FetchSession(self._new_id(), principal, uses_topic_ids, now, now)
        session.partitions = partitions
        self._sessions[session.session_id] = session
        return session

    def _evict_for(self, size: int) -> bool:
        """Give up the smallest session past its protected youth if it is smaller than
        ``size`` (Kafka's ``tryEvict`` for an unprivileged client: ties keep the old)."""
        old_enough = self._clock() - self.config.eviction_ms / 1000
        candidates = [s for s in self._sessions.values() if s.created_s < old_enough]
        if not candidates:
            return False
        smallest = min(candidates, key=lambda s: (len(s.partitions), s.session_id))
        if len(smallest.partitions) >= size:
            return False
        del self._sessions[smallest.session_id]
        self.evictions += 1
        return True

    def _remove_stale(self) -> None:
        stale_before = self._clock() - self.config.eviction_ms / 1000
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if oldest.last_used_s >= stale_before:
                return
            del self._sessions[oldest.session_id]
            self.evictions += 1

    def _new_id(self) -> int:
        while True:
            session_id = secrets.randbelow(_INT32_MAX) + 1
            if session_id not in self._sessions:
                return session_id
