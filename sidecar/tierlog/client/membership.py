"""A consumer's membership of its group (KIP-848): Kafka's ``ConsumerMembershipManager``
in small.

A background thread sends ConsumerGroupHeartbeat every ``heartbeat_interval_ms`` the
coordinator answers (and at once when there is news): the member's id (made here, a
UUID, kept for its life), its epoch, its subscription when it changed, and the
partitions the consumer owns now. The coordinator answers the partitions the member
should own. That answer is *reconciled* in the application's thread, in ``poll``, where
the callbacks run (``Consumer``): partitions taken away are revoked first, new ones
assigned, and what the consumer then owns goes out with the next heartbeat, which is
how the coordinator learns a revocation is done and hands those partitions to another
member. So a partition is never consumed by two members of a live group.

Fenced (``FENCED_MEMBER_EPOCH``, ``UNKNOWN_MEMBER_ID``: its session expired, say), or
with no beat answered that was sent within the session timeout the coordinator named
(the process was paused, the coordinator unreachable: the coordinator has given its
partitions away by now), the member has lost its partitions: the thread stops
heartbeating until the application's thread has dropped them (``on_lost``), then joins
again with epoch 0. The session is counted from when the last answered beat was *sent*
(the coordinator renewed it no earlier): an answer read late, the process stopped with it
in its socket, says nothing of the time since, and counted from its reading it would let
a member woken past its session return the records fetched meanwhile of partitions it
had lost, and commit them as a zombie (``UNKNOWN_MEMBER_ID``). Retriable errors
(the coordinator moved, is loading) are retried on the next beat. ``leave`` sends epoch
-1 (a static member, ``group.instance.id``: -2, so it comes back to its partitions).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from tierlog.api.v1 import group_service_pb2 as pb
from tierlog.client.errors import TierlogError, reason_of
from tierlog.client.groups import GroupClient
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["GroupMembership", "Subscription"]

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
# The first beats' pace, until the coordinator names its own.
INITIAL_INTERVAL_S = 0.5
_FENCED = frozenset({"FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"})


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...] = ()
    pattern: str | None = None  # a regular expression over topic names


@dataclass(frozen=True)
class Update:
    """News for the application's thread: partitions lost, or a new assignment."""

    lost: bool
    assignment: frozenset[TopicPartition] | None


class GroupMembership:
    def __init__(
        self,
        group: GroupClient,
        subscription: Subscription,
        *,
        client_id: str = "",
        instance_id: str = "",
        server_assignor: str = "",
        rebalance_timeout_ms: int = 300_000,
    ) -> None:
        self.group = group
        self.member_id = uuid.uuid4().hex
        self.client_id = client_id
        self.instance_id = instance_id
        self.server_assignor = server_assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self._subscription = subscription
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._epoch = JOIN_EPOCH
        self._owned: frozenset[TopicPartition] = frozenset()
        self._answered: frozenset[TopicPartition] | None = None  # not reconciled yet
        self._lost = False
        self._send_subscription = True
        self._interval_s = INITIAL_INTERVAL_S
        self._session_s = 0.0  # as the coordinator answered (0: not yet)
        # When the last beat the coordinator answered was sent: the session ends a
        # session timeout later at the earliest.
        self._renewed_at = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"tierlog-heartbeat-{group.group_id}", daemon=True
        )

    # -- the application's side -------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def subscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscription = subscription
            self._send_subscription = True
        self._wake.set()

    def update(self) -> Update | None:
        """What the consumer must do now (None: nothing)."""
        with self._lock:
            silent_s = time.monotonic() - self._renewed_at
            if self._epoch > JOIN_EPOCH and 0 < self._session_s <= silent_s:
                log.warning(
                    "group %s: last beat answered was sent %.1f s ago, past the session: "
                    "partitions lost",
                    self.group.group_id,
                    silent_s,
                )
                self._fenced_locked()
            if self._lost:
                return Update(lost=True, assignment=None)
            if self._answered is not None and self._answered != self._owned:
                return Update(lost=False, assignment=self._answered)
            return None

    def reconciled(self, owned: frozenset[TopicPartition]) -> None:
        """The consumer owns ``owned`` now: say so at once (a revocation is done)."""
        with self._lock:
            self._owned = owned
            if self._answered == owned:
                self._answered = None
        self._wake.set()

    def lost_handled(self) -> None:
        """The consumer dropped every partition: join again."""
        with self._lock:
            self._lost = False
            self._owned = frozenset()
            self._answered = None
        self._wake.set()

    @property
    def epoch(self) -> int:
        with self._lock:
            return self._epoch

    def leave(self) -> None:
        """Stop heartbeating and leave the group (-1; -2 for a static member)."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._lock:
            joined = self._epoch > JOIN_EPOCH
            epoch = STATIC_LEAVE_EPOCH if self.instance_id else LEAVE_EPOCH
        if not joined:
            return
        request = pb.ConsumerGroupHeartbeatRequest(
            group_id=self.group.group_id, member_id=self.member_id, member_epoch=epoch
        )
        if self.instance_id:
            request.instance_id = self.instance_id
        try:
            self.group.heartbeat(request)
        except TierlogError as error:  # the session timeout removes it anyway
            log.warning("group %s: leaving failed: %s", self.group.group_id, error)
        self.group.generation = ("", -1)

    # -- the heartbeat thread ---------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            if not self._waiting_for_the_application():
                self._beat()
            self._wake.wait(self._interval_s)
            self._wake.clear()

    def _waiting_for_the_application(self) -> bool:
        with self._lock:
            return self._lost

    def _beat(self) -> None:
        request = self._request()
        sent_at = time.monotonic()
        try:
            response = self.group.heartbeat(request)
        except TierlogError as error:
            reason = reason_of(error)
            if reason in _FENCED:
                log.warning("group %s: fenced (%s): partitions lost", self.group.group_id, reason)
                with self._lock:
                    self._fenced_locked()
            else:
                log.info("group %s: heartbeat failed: %s", self.group.group_id, error)
            return
        assignment = frozenset(
            TopicPartition(entry.topic, partition)
            for entry in response.assignment
            for partition in entry.partitions
        )
        with self._lock:
            if self._stopping.is_set() and response.member_epoch < 0:
                return
            if self._lost:
                return  # fenced meanwhile: the application drops everything first
            self._epoch = response.member_epoch
            self._renewed_at = sent_at
            self._session_s = response.session_timeout_ms / 1000
            self._interval_s = max(response.heartbeat_interval_ms, 1) / 1000
            self._send_subscription = False
            self._answered = None if assignment == self._owned else assignment
            self.group.generation = (self.member_id, response.member_epoch)

    def _fenced_locked(self) -> None:
        """Out of the group: nothing owned any more once the application dropped it
        all, and then a new join (epoch 0)."""
        self._lost = True
        self._epoch = JOIN_EPOCH
        self._send_subscription = True
        self._answered = None
        self.group.generation = ("", -1)

    def _request(self) -> pb.ConsumerGroupHeartbeatRequest:
        with self._lock:
            request = pb.ConsumerGroupHeartbeatRequest(
                group_id=self.group.group_id,
                member_id=self.member_id,
                member_epoch=self._epoch,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                client_id=self.client_id,
            )
            if self.instance_id:
                request.instance_id = self.instance_id
            if self.server_assignor:
                request.server_assignor = self.server_assignor
            if self._send_subscription:
                if self._subscription.pattern is not None:
                    request.subscribed_topic_regex = self._subscription.pattern
                else:
                    request.subscribed_topic_names.names.extend(self._subscription.topics)
            request.owned.SetInParent()  # present even when empty: "I own nothing"
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(self._owned):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            request.owned.topics.extend(
                pb.TopicPartitions(topic=topic, partitions=parts)
                for topic, parts in by_topic.items()
            )
            return request
