"""A partition this broker leads: its followers' progress, the ISR and the high watermark.

Kafka's ``Partition`` on the leader's side, without I/O: followers report how far they
are with each fetch (``record_fetch``); the high watermark is the lowest log end among
the in-sync replicas and never moves back; a follower is out of sync once it has not
caught up with the leader's log end for ``replica.lag.time.max.ms``, and back in sync once
it reaches the high watermark and the start of the current leader epoch in a fetch of its
own (it then holds everything this leader acknowledged). The ISR changes themselves are the replica
manager's to make, in the partition-state store; this class says which are due.

Acks=all producers wait here for the high watermark to pass their batches.
Everything runs on the event loop; the log's end and high watermark are read lock-free.
"""

from __future__ import annotations

import asyncio
import bisect
from dataclasses import dataclass

from tierlog.api.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from tierlog.partition_state.model import PartitionState
from tierlog.storage.log import Log
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["FollowerProgress", "LeaderPartition", "SessionClock"]

UNKNOWN_OFFSET = -1  # a follower's log end before its first fetch in this leader epoch


@dataclass
class SessionClock:
    """When a follower's fetch session (one stream, many partitions) last asked.

    A session's request names only the partitions whose fetch state changed, and the
    leader records again those appended to since the previous request: any other
    partition of the session is where its last record says, as of the stream's last
    request. One clock per stream keeps them all current at once, where a record per
    partition per request made an idle follower cost in proportion to its partitions."""

    last_request_ms: int


@dataclass
class FollowerProgress:
    log_end_offset: int  # the offset it fetched from last (UNKNOWN_OFFSET: not yet)
    last_caught_up_ms: int  # when it last had everything the leader had
    leader_end_at_last_fetch: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    # The session whose requests keep this record current (None: none does).
    clock: SessionClock | None = None

    def fetched_ms(self) -> int:
        """When the follower was last known to ask from ``log_end_offset``."""
        return self.last_fetch_ms if self.clock is None else self.clock.last_request_ms

    def caught_up_ms(self) -> int:
        """When it last had everything the leader had: in a session, as of its last
        request if it had then (it asked from the leader's end as it was at the last
        record, which an append since would have renewed)."""
        if self.clock is not None and self.log_end_offset >= self.leader_end_at_last_fetch >= 0:
            return max(self.last_caught_up_ms, self.clock.last_request_ms)
        return self.last_caught_up_ms


class LeaderPartition:
    def __init__(
        self, tp: TopicPartition, log: Log, state: PartitionState, node_id: int, now_ms: int
    ):
        """Lead ``tp`` as ``state`` says (its leader is ``node_id``); the log has already
        started the leader epoch (``Log.become_leader``)."""
        self.tp = tp
        self.log = log
        self.node_id = node_id
        self.state = state
        # Where this leader's epoch starts: a follower is in sync only once past it.
        self.epoch_start_offset = log.log_end_offset
        # Every follower starts caught up as of now (as Kafka's new leader does): an ISR
        # member gets replica.lag.time.max.ms to show up before it is dropped.
        self.followers = {
            replica: FollowerProgress(UNKNOWN_OFFSET, now_ms)
            for replica in state.replicas
            if replica != node_id
        }
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # (offset, seq, future)
        self._sequence = 0
        self.resigned = False

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def update_state(self, state: PartitionState) -> None:
        """The store has a newer state in the same leader epoch (an ISR change, or a
        reassignment adding or removing followers)."""
        for replica in state.replicas:
            if replica != self.node_id and replica not in self.followers:
                self.followers[replica] = FollowerProgress(UNKNOWN_OFFSET, 0)
        for replica in set(self.followers) - set(state.replicas):
            del self.followers[replica]  # removed: its fetches are refused from now on
        self.state = state
        self.advance_high_watermark()

    # -- followers --------------------------------------------------------------------

    def record_fetch(
        self, replica: int, fetch_offset: int, now_ms: int, clock: SessionClock | None = None
    ) -> None:
        """``replica`` fetched from ``fetch_offset``: it holds everything below it.
        ``clock``: the session that keeps this record current from now on (the caller
        advances it to ``now_ms`` once the request's records are made).

        It counts as caught up now if it asked from the leader's end, or as of its
        previous fetch if it asked from at least where the leader ended then (Kafka's
        rule: a follower that keeps fetching everything there is never falls behind,
        however fast the leader grows)."""
        progress = self.followers.get(replica)
        if progress is None:
            return  # removed by a reassignment while its fetch was being read
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.leader_end_at_last_fetch >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.fetched_ms())
        progress.log_end_offset = fetch_offset
        progress.leader_end_at_last_fetch = leader_end
        progress.last_fetch_ms = now_ms
        progress.clock = clock
        self.advance_high_watermark()

    def leave_session(self, replica: int, clock: SessionClock) -> None:
        """``replica``'s session no longer asks for this partition: its record stays as
        of the session's last request, and no later one makes it current."""
        progress = self.followers.get(replica)
        if progress is None or progress.clock is not clock:
            return
        progress.last_caught_up_ms = progress.caught_up_ms()
        progress.last_fetch_ms = clock.last_request_ms
        progress.clock = None

    def advance_high_watermark(self) -> bool:
        """Move the high watermark up to the lowest log end in the ISR; whether it moved.
        Waiting acks=all producers it passed are answered."""
        ends = [self.log.log_end_offset]
        ends += [self.followers[r].log_end_offset for r in self.state.isr if r != self.node_id]
        candidate = min(ends)
        if candidate <= self.log.high_watermark:
            return False
        reached = self.log.update_high_watermark(candidate)
        self._answer_waiters(reached)
        return True

    def out_of_sync(self, now_ms: int, lag_ms: int) -> tuple[int, ...]:
        """The ISR followers that have not caught up for ``lag_ms`` (to drop)."""
        leader_end = self.log.log_end_offset
        return tuple(
            replica
            for replica in self.state.isr
            if replica != self.node_id
            and self.followers[replica].log_end_offset != leader_end
            and now_ms - self.followers[replica].caught_up_ms() > lag_ms
        )

    def caught_up(self, replica: int) -> bool:
        """Whether ``replica``, outside the ISR, holds everything it committed (to add).
        Asked right after its own fetch (``record_fetch``), never of the others: a dead
        follower's last fetch stays at the high watermark of an idle partition, and
        counting it caught up put it back in the ISR after each fencing."""
        progress = self.followers.get(replica)
        if progress is None or replica in self.state.isr:
            return False
        return progress.log_end_offset >= max(self.log.high_watermark, self.epoch_start_offset)

    # -- acks=all ---------------------------------------------------------------------

    def check_enough_replicas(self, min_insync_replicas: int) -> None:
        """Refuse an acks=all produce before its append when the ISR is too small."""
        if len(self.state.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.tp} has {len(self.state.isr)} in-sync replicas "
                f"{list(self.state.isr)}, below min.insync.replicas {min_insync_replicas}"
            )

    async def wait_until_committed(
        self, end_offset: int, min_insync_replicas: int, timeout_s: float
    ) -> None:
        """Wait until the high watermark reaches ``end_offset`` (every in-sync replica has
        the batches), then check the ISR is still large enough.

        Raises REQUEST_TIMED_OUT after ``timeout_s``, NOT_LEADER_OR_FOLLOWER when this
        broker stops leading meanwhile (the batches may or may not survive: the producer
        retries, and an idempotent one is deduplicated)."""
        if self.log.high_watermark < end_offset:
            if self.resigned:
                raise self._resigned_error()
            future = asyncio.get_running_loop().create_future()
            self._sequence += 1
            bisect.insort(self._waiters, (end_offset, self._sequence, future))
            try:
                await asyncio.wait_for(asyncio.shield(future), timeout_s)
            except TimeoutError:
                raise RequestTimedOutError(
                    f"{self.tp}: offsets below {end_offset} not on every in-sync replica "
                    f"{list(self.state.isr)} within {timeout_s:.1f} s"
                ) from None
            finally:
                self._forget(future)
        if len(self.state.isr) < min_insync_replicas:
            raise NotEnoughReplicasAfterAppendError(
                f"{self.tp}: appended, but the ISR {list(self.state.isr)} shrank below "
                f"min.insync.replicas {min_insync_replicas}"
            )

    def resign(self) -> None:
        """This broker no longer leads: waiting producers get NOT_LEADER_OR_FOLLOWER."""
        self.resigned = True
        for _offset, _seq, future in self._waiters:
            if not future.done():
                future.set_exception(self._resigned_error())
        self._waiters.clear()

    def _resigned_error(self) -> NotLeaderOrFollowerError:
        return NotLeaderOrFollowerError(
            f"broker {self.node_id} stopped leading {self.tp} (epoch {self.leader_epoch})",
            leader_id=-1,
            leader_address="",
        )

    def _answer_waiters(self, high_watermark: int) -> None:
        while self._waiters and self._waiters[0][0] <= high_watermark:
            _offset, _seq, future = self._waiters.pop(0)
            if not future.done():
                future.set_result(None)

    def _forget(self, future: asyncio.Future[None]) -> None:
        self._waiters = [waiter for waiter in self._waiters if waiter[2] is not future]
