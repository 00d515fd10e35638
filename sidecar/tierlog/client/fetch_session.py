"""The consumer's fetch session with one broker: all its partitions there on one stream.

Kafka's consumer sends one fetch per broker for all its partitions; a consumer that
held a Subscribe stream and a reader thread per partition ran 1,008 threads for 1,000
partitions and, its streams counted as the broker's queued requests, left no room for
anybody else's calls. A ``SessionStream`` is one ``FetchSession`` call: partitions are
added (from the consumer's position, with a generation of their own) and forgotten as
the assignment, seeks and errors say, and a reader thread hands each message to the
consumer (onto its queue) as an ``Arrival``, so one wait serves every broker. Per broker: one
reader thread, and gRPC's thread that sends the requests.

Answers carry their partition's generation: those to an add the consumer replaced (a
seek) or forgot are dropped (``current``), so nothing read before a seek is returned
after it. Changes are gathered and sent together (``flush``).

Back pressure: the broker sends only the messages granted (``credits``): ``PREFETCH``
at first, then one each time the consumer takes one (``release``), so the next message
is on its way while one is decoded and at most ``PREFETCH`` wait here. With
``fetch.max.wait.ms`` each message is due within that long (then sent even when empty),
so a session whose granted message is later than that plus ``request.timeout.ms`` has
stopped answering: ``stalled`` tells the consumer, which cancels it.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import grpc

from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.client.errors import TierlogError
from tierlog.client.rpc import error_from_rpc
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["PREFETCH", "Arrival", "SessionStream"]

# Messages a session has asked for that the consumer has not taken yet.
PREFETCH = 2


class Arrival(NamedTuple):
    """A message of ``session``, or its end: ``message`` None, with the error if it failed."""

    session: SessionStream
    message: log_service_pb2.FetchSessionResponse | None
    error: TierlogError | None = None


class SessionStream:
    """A ``FetchSession`` call to ``address`` whose messages are handed to ``deliver``;
    ``settings`` is the session's long poll (max_wait_ms, min_bytes, max_bytes,
    isolation_level)."""

    def __init__(
        self,
        address: str,
        stub: log_service_pb2_grpc.LogServiceStub,
        settings: log_service_pb2.FetchSessionRequest,
        deliver: Callable[[Arrival], None],
    ) -> None:
        self.address = address
        self._settings = settings
        self._deliver = deliver
        self._requests: queue.SimpleQueue[log_service_pb2.FetchSessionRequest | None] = (
            queue.SimpleQueue()
        )
        self._changes = self._request()
        self._generations: dict[TopicPartition, int] = {}  # in the session -> its add's
        self._next_generation = itertools.count(1)
        self._outstanding = 0  # messages granted and not taken
        self._asked_since = 0.0  # when the oldest of them was due to start coming
        self._cancelled = threading.Event()
        self._call = stub.FetchSession(self._feed())
        self._grant(PREFETCH)
        self._reader = threading.Thread(
            target=self._read, name=f"tierlog-fetch-session-{address}", daemon=True
        )
        self._reader.start()

    @property
    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._generations)

    def add(
        self, tp: TopicPartition, offset: int, leader_epoch: int, partition_max_bytes: int
    ) -> None:
        """Read ``tp`` from ``offset`` (again, if it was read already), once flushed."""
        generation = next(self._next_generation)
        self._generations[tp] = generation
        added = self._changes.add.add(
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
            partition_max_bytes=partition_max_bytes,
            generation=generation,
        )
        if leader_epoch >= 0:  # a broker in another epoch fails the partition (KIP-320)
            added.current_leader_epoch = leader_epoch

    def forget(self, tp: TopicPartition) -> None:
        """Stop reading ``tp`` (its answers still on the way are not ``current``)."""
        if self._generations.pop(tp, None) is not None:
            self._changes.forget.add(topic=tp.topic, partition=tp.partition)

    def left(self, tp: TopicPartition) -> None:
        """The broker dropped ``tp`` from the session (it answered an error)."""
        self._generations.pop(tp, None)

    def current(self, data: log_service_pb2.FetchSessionPartitionData) -> bool:
        """Whether ``data`` answers the partition's latest add."""
        tp = TopicPartition(data.topic, data.partition)
        return self._generations.get(tp) == data.generation

    def flush(self) -> None:
        """Send the changes gathered since the last request."""
        if self._changes.add or self._changes.forget:
            self._send(self._changes)

    def release(self) -> None:
        """The consumer took a message: ask for one more (with the changes gathered)."""
        self._outstanding -= 1
        self._asked_since = time.monotonic()
        self._grant(1)

    def stalled(self, limit_s: float) -> bool:
        """Whether a message asked for is later than ``limit_s``."""
        return self._outstanding > 0 and time.monotonic() - self._asked_since > limit_s

    def cancel(self) -> None:
        """End the call; the reader puts nothing more."""
        self._cancelled.set()
        # Cancelled first, then the feed ended: gRPC sends no half-close for a cancelled
        # call, so the broker sees the cancel alone, not a close of the client's side.
        self._call.cancel()
        self._requests.put(None)

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the reader thread of a cancelled session to end."""
        self._reader.join(timeout_s)

    def _grant(self, credits: int) -> None:
        if not self._outstanding:
            self._asked_since = time.monotonic()
        self._outstanding += credits
        self._changes.credits = credits
        self._send(self._changes)

    def _send(self, request: log_service_pb2.FetchSessionRequest) -> None:
        self._requests.put(request)
        self._changes = self._request()

    def _request(self) -> log_service_pb2.FetchSessionRequest:
        request = log_service_pb2.FetchSessionRequest()
        request.CopyFrom(self._settings)
        return request

    def _feed(self) -> Iterator[log_service_pb2.FetchSessionRequest]:
        while (request := self._requests.get()) is not None:
            yield request

    def _read(self) -> None:
        try:
            for message in self._call:
                if self._cancelled.is_set():
                    return
                self._deliver(Arrival(self, message))
            if not self._cancelled.is_set():  # the broker ended it (shutting down)
                self._deliver(Arrival(self, None))
        except grpc.RpcError as rpc_error:
            if not self._cancelled.is_set():
                self._deliver(Arrival(self, None, error_from_rpc(rpc_error)))
