"""One partition's Subscribe stream, read by a thread of its own into the consumer's queue.

A sequence of Fetch long polls has one request in flight: the sidecar reads and
sends the next answer only once the consumer asked, so each answer's round trip
(~5 ms for 1 MiB on loopback) comes on top of decoding it.  A stream has the
sidecar read and send the next message while the consumer decodes this one
(measured on loopback: ~200 MiB/s of 1 MiB Fetches one after another, 500+ MiB/s
of the same messages on one stream).

Back pressure: the reader holds at most ``PREFETCH`` messages the consumer has not
taken (``release`` gives one back); beyond that it stops reading, gRPC's flow
control window fills and the sidecar waits.  Messages and the stream's end go to
the consumer's queue as ``Arrival``s, so one wait serves all its partitions.

Each message is a long poll of ``fetch.max.wait.ms`` (then sent even when empty),
so a sidecar that sent nothing for longer than that plus ``request.timeout.ms``
has stopped answering: ``stalled`` tells the consumer, which cancels the stream.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import NamedTuple

import grpc

from tierlog.api.v1 import log_service_pb2, log_service_pb2_grpc
from tierlog.client.errors import TierlogError
from tierlog.client.rpc import error_from_rpc
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["PREFETCH", "Arrival", "PartitionStream"]

# Messages a partition's reader holds that the consumer has not taken yet.
PREFETCH = 2


class Arrival(NamedTuple):
    """A message of ``stream``, or its end: ``message`` None, with the error if it failed."""

    stream: PartitionStream
    message: log_service_pb2.SubscribeResponse | None
    error: TierlogError | None = None


class PartitionStream:
    """``request``'s Subscribe call, its messages put on ``arrivals``."""

    def __init__(
        self,
        tp: TopicPartition,
        stub: log_service_pb2_grpc.LogServiceStub,
        request: log_service_pb2.SubscribeRequest,
        arrivals: queue.SimpleQueue[Arrival],
    ) -> None:
        self.tp = tp
        self._arrivals = arrivals
        self._call = stub.Subscribe(request)
        self._credits = threading.Semaphore(PREFETCH)
        self._cancelled = threading.Event()
        # When the reader began waiting for the sidecar (None: it is not waiting on it).
        self._waiting_since: float | None = None
        self._reader = threading.Thread(
            target=self._read, name=f"tierlog-consumer-{tp.topic}-{tp.partition}", daemon=True
        )
        self._reader.start()

    def release(self) -> None:
        """The consumer took one of this stream's messages: room for one more."""
        self._credits.release()

    def stalled(self, limit_s: float) -> bool:
        """Whether the reader has waited on the sidecar for longer than ``limit_s``."""
        since = self._waiting_since
        return since is not None and time.monotonic() - since > limit_s

    def cancel(self) -> None:
        """End the call; the reader puts nothing more."""
        self._cancelled.set()
        self._call.cancel()
        self._credits.release()  # a reader waiting for room wakes to see the end

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the reader thread of a cancelled stream to end."""
        self._reader.join(timeout_s)

    def _read(self) -> None:
        try:
            while True:
                self._credits.acquire()
                if self._cancelled.is_set():
                    return
                self._waiting_since = time.monotonic()
                message = next(self._call, None)
                self._waiting_since = None
                if self._cancelled.is_set():
                    return
                self._arrivals.put(Arrival(self, message))
                if message is None:
                    return
        except grpc.RpcError as rpc_error:
            if not self._cancelled.is_set():
                self._arrivals.put(Arrival(self, None, error_from_rpc(rpc_error)))
