"""Kafka's ``Sender``: the producer's background thread, between the accumulator and gRPC.

One thread owns the sending; every piece of producer state (the accumulator, the
idempotence bookkeeping) is touched only under the producer's one lock, by the user
threads that append and by this thread.  Each turn of the loop:

1. settles the outcomes the connections reported (success, retry, or failure for
   good, as the idempotence docstring says), then fails queued batches, never sent
   or waiting to be retried, past ``delivery.timeout.ms``;
2. gets a producer id first if the idempotent producer has none (``InitProducerId``;
   a transactional producer's comes from ``init_transactions``), and a transactional
   producer adds the partitions it is about to write to its transaction;
3. asks the accumulator which partitions are ready, finds each one's owner
   (``Cluster``), drains the batches of each owner and writes them on that owner's
   ``ProduceConnection``, one request per partition: its one batch for an idempotent
   producer, as Kafka's, else its full batches together within ``max.request.size``;
4. sleeps until the accumulator's next deadline, an append, or an outcome.

A ``ProduceConnection`` is one ``ProduceStream`` to one sidecar, on ``grpc.aio``: its
writes and reads run on the producer's one ``IoLoop`` thread, which is also the only
place its stream and its requests in flight change.  Requests are written in order and
answered in order, so a partition's batches reach the log in sequence order without
waiting for each other (Kafka's pipelining over one connection, up to five requests per
partition).  When the stream breaks or an answer takes longer than
``request.timeout.ms``, every batch in flight on it fails with a retriable error: it
may or may not have been stored, and its retry, the same bytes under the same
(producer id, epoch, sequence), is stored once either way.  Every retry is logged as a
warning naming the error (``NOT_ENOUGH_REPLICAS``...), as Kafka's producer logs it.
Each request names the
partition's leader epoch from the metadata; a partition whose owner said
``NOT_LEADER_OR_FOLLOWER``, ``FENCED_LEADER_EPOCH``, ``UNKNOWN_LEADER_EPOCH`` (or
``UNKNOWN_TOPIC_OR_PARTITION``) has its metadata refreshed before the retry goes out.
A leader that goes silent (paused, cut off) answers nothing, so the sender asks another
broker who leads while requests wait or retries queue (``_follow_moving_leaders``) and
moves them to a new leader as soon as there is one, without the old one's back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter

import grpc

from tierlog.api.errors import NotLeaderOrFollowerError
from tierlog.api.v1 import log_service_pb2
from tierlog.client.accumulator import RecordAccumulator
from tierlog.client.client_metrics import ProducerMetrics
from tierlog.client.cluster import Cluster, TopicOwners
from tierlog.client.config import ProducerConfig
from tierlog.client.errors import (
    RETRIABLE_REASONS,
    NetworkError,
    RequestTimedOutError,
    TierlogError,
    reason_of,
    with_reason,
)
from tierlog.client.futures import ProduceRequestResult
from tierlog.client.idempotence import IdempotenceManager
from tierlog.client.io_loop import IoLoop
from tierlog.client.produce_wire import (
    ProduceStream,
    encode_produce_stream_request,
    produce_stream,
)
from tierlog.client.producer_batch import ProducerBatch
from tierlog.client.rpc import error_from_proto, error_from_rpc
from tierlog.client.transactions import TransactionManager
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["ProduceConnection", "Sender"]

log = logging.getLogger(__name__)

_ACKS = {"all": log_service_pb2.ACKS_ALL, "1": log_service_pb2.ACKS_LEADER, "0": None}
Outcome = log_service_pb2.ProduceResponse | TierlogError
Batches = tuple[ProducerBatch, ...]  # one request's: one partition's, in sequence order
_MANY = 1 << 20  # batches of a partition in one request: max.request.size bounds them
CLOSE_GRACE_S = 1.0  # how long a closing stream waits for the sidecar to end it


@dataclass(frozen=True)
class _Settlement:
    """A batch's outcome, applied to its records' futures once the lock is let go."""

    result: ProduceRequestResult
    base_offset: int = -1
    log_append_time: int = -1
    error: BaseException | None = None


class ProduceConnection:
    """One ``ProduceStream`` to one sidecar; see the module docstring."""

    def __init__(
        self,
        address: str,
        io: IoLoop,
        cluster: Cluster,
        on_outcome: Callable[[Batches, Outcome, float | None], None],
        request_timeout_s: float,
    ) -> None:
        self.address = address
        self._io = io
        self._cluster = cluster
        self._on_outcome = on_outcome
        self._request_timeout_s = request_timeout_s
        self._lock = threading.Lock()
        self._channel: grpc.aio.Channel | None = None
        self._call: ProduceStream | None = None
        self._requests: asyncio.Queue[bytes | None] | None = None
        self._in_flight: deque[tuple[Batches, float]] = deque()  # each request's
        self._broken_by: TierlogError | None = None  # why the sender broke the stream
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, request: bytes, batches: Batches) -> None:
        """Write ``request`` (a ``ProduceStreamRequest``'s wire bytes) for ``batches``."""
        self._io.call_soon(self._enqueue, request, batches, time.monotonic())

    # --- on the I/O loop: every change to the stream and what it has in flight --------

    def _enqueue(self, request: bytes, batches: Batches, sent: float) -> None:
        if self._requests is None:
            self._open()
        assert self._requests is not None
        with self._lock:
            self._in_flight.append((batches, sent))
        self._requests.put_nowait(request)

    def _open(self) -> None:
        if self._channel is None:
            self._channel = self._cluster.open_stream_channel(self.address)
        requests: asyncio.Queue[bytes | None] = asyncio.Queue()
        call = produce_stream(self._channel, self._cluster.security.call_metadata())
        with self._lock:
            self._requests, self._call, self._broken_by = requests, call, None
        for work in (self._write(call, requests), self._read(call, requests)):
            task = asyncio.get_running_loop().create_task(work)
            self._tasks.add(task)  # the loop holds its tasks weakly
            task.add_done_callback(self._tasks.discard)

    async def _write(self, call: ProduceStream, requests: asyncio.Queue[bytes | None]) -> None:
        with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
            while (request := await requests.get()) is not None:
                await call.write(request)
            await call.done_writing()

    async def _read(self, call: ProduceStream, requests: asyncio.Queue[bytes | None]) -> None:
        failure: TierlogError = NetworkError(f"the produce stream to {self.address} ended")
        try:
            async for response in call:
                self._cluster.note_answer(self.address)
                with self._lock:
                    batches, sent = self._in_flight.popleft()
                latency_s = time.monotonic() - sent
                if response.WhichOneof("result") == "error":
                    self._on_outcome(batches, error_from_proto(response.error), latency_s)
                else:
                    self._on_outcome(batches, response.produced, latency_s)
        except grpc.RpcError as error:
            failure = error_from_rpc(error)
        except asyncio.CancelledError:
            failure = NetworkError(f"the produce stream to {self.address} was cancelled")
        finally:
            requests.put_nowait(None)  # ends the writer
        with self._lock:
            failure = self._broken_by or failure
            lost = [batches for batches, _sent in self._in_flight]
            self._in_flight.clear()
            if self._call is call:
                self._call, self._requests = None, None
        if lost:
            log.info(
                "produce stream to %s failed (%s): %d requests in flight",
                self.address,
                failure,
                len(lost),
            )
        for batches in lost:
            self._on_outcome(batches, failure, None)  # no answer: no latency

    # --- from the sender --------------------------------------------------------------

    def waiting_s(self) -> float:
        """How long its oldest request in flight has waited for its answer (0: none)."""
        with self._lock:
            return time.monotonic() - self._in_flight[0][1] if self._in_flight else 0.0

    def partitions_in_flight(self) -> set[TopicPartition]:
        with self._lock:
            return {batches[0].topic_partition for batches, _sent in self._in_flight}

    def expire(self) -> None:
        """Break the stream if its oldest request waited past ``request.timeout.ms``."""
        if self.waiting_s() >= self._request_timeout_s:
            self.abandon(
                RequestTimedOutError(
                    f"no answer from {self.address} within {self._request_timeout_s:.1f}s"
                )
            )

    def abandon(self, failure: TierlogError) -> None:
        """Break the stream: each request in flight on it fails with ``failure`` (a
        retriable one: stored or not, its retry is stored once)."""
        with self._lock:
            if not self._in_flight or self._call is None:
                return
            self._broken_by = failure
            call = self._call
        self._io.call_soon(call.cancel)

    def close(self) -> None:
        """Half-close the stream, then cancel it (the producer flushed what it meant to)."""
        self._io.run(self._close())

    async def _close(self) -> None:
        call = self._call
        if self._requests is not None:
            self._requests.put_nowait(None)  # the writer half-closes after what is queued
        if call is not None:
            # The sidecar ends the stream once it has answered all it was sent: let it,
            # for a little while, so that a producer's close is an OK stream in the
            # sidecar's metrics, not a cancelled one; then cancel whatever is left.
            with contextlib.suppress(TimeoutError, grpc.RpcError):
                await asyncio.wait_for(call.code(), CLOSE_GRACE_S)
            call.cancel()
        if self._channel is not None:
            await self._channel.close()


class Sender:
    """The producer's background loop; see the module docstring.  ``lock`` guards the
    accumulator and ``idempotence``, and is notified on every change worth waking for."""

    IDLE_WAIT_S = 0.05  # at most this long between checks while anything is in flight

    def __init__(
        self,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        idempotence: IdempotenceManager | None,
        cluster: Cluster,
        lock: threading.Condition,
        clock: Callable[[], int],
        transactions: TransactionManager | None = None,
    ) -> None:
        self.config = config
        self.transactions = transactions
        self.accumulator = accumulator
        self.idempotence = idempotence
        self.cluster = cluster
        self.lock = lock
        self.clock = clock
        self._acks = _ACKS[config.acks]
        self._connections: dict[str, ProduceConnection] = {}
        self._outcomes: deque[tuple[Batches, Outcome, float | None]] = deque()
        self.metrics = ProducerMetrics()  # recorded and read under ``lock``
        self._in_flight: dict[TopicPartition, int] = {}  # requests, per partition
        # Kafka's one batch per partition per request holds for an idempotent producer:
        # a retry must go out as its first attempt went, batch by batch, for the sidecar
        # to know each one's duplicate.  Without idempotence, a partition's full batches
        # share a request (within max.request.size): the per-request work, most of the
        # producer's own CPU at 64 KiB batches, is paid once for them.
        self._batches_per_request = 1 if idempotence is not None else _MANY
        self._next_leader_check = 0.0  # monotonic: see _follow_moving_leaders
        # Who leads is asked on a thread of its own: an answer from a silent broker takes
        # up to request.timeout.ms, and the loop must go on expiring batches and breaking
        # stalled attempts meanwhile. At most one question is out at a time.
        self._leader_checks = ThreadPoolExecutor(1, thread_name_prefix="tierlog-producer-leaders")
        self._leader_check: _LeaderCheck | None = None
        # Partitions whose last attempt failed in a way a leader change explains (under
        # ``lock``): while their batches wait to retry, who leads them is asked again.
        self._leader_in_doubt: set[TopicPartition] = set()
        self._running = True
        self._thread = threading.Thread(target=self._run, name="tierlog-producer", daemon=True)
        self._io = IoLoop("tierlog-producer-io")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        with self.lock:
            self._running = False
            self.lock.notify_all()
        self._thread.join(timeout_s)
        self._leader_checks.shutdown(wait=False, cancel_futures=True)
        for connection in self._connections.values():
            connection.close()
        self._io.close()

    @property
    def in_flight_count(self) -> int:
        return sum(self._in_flight.values())

    # --- the loop ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self.lock:
                if not self._running:
                    return
            try:
                self._run_once()
            except Exception:  # never let the sender die: the producer would hang
                log.exception("the producer's sender failed; going on")
                time.sleep(self.config.retry_backoff_ms / 1000)

    def _run_once(self) -> None:
        resolutions: list[_Settlement] = []
        with self.lock:
            self._settle(resolutions)
            for batch in self.accumulator.expired_batches():
                expired = self._expired_error(batch)
                self._fail(batch, expired)
                self._resolve_failed(batch, resolutions, expired)
            needs_producer_id = self.idempotence is not None and self.idempotence.needs_producer_id
            check = self.accumulator.ready()
            if resolutions:
                self.lock.notify_all()
        _resolve(resolutions)
        for connection in list(self._connections.values()):
            connection.expire()
        self._follow_moving_leaders()
        # A transactional producer's id comes from init_transactions, not from here.
        needs_producer_id = needs_producer_id and self.transactions is None
        if needs_producer_id and check.next_check_delay_ms is not None:
            self._init_producer_id()
            return
        sent = self._send_ready(check.ready) if check.ready else 0
        with self.lock:
            if self._outcomes or not self._running:
                return
            if check.next_check_delay_ms is None:
                wait_s = self.IDLE_WAIT_S if self.in_flight_count else 1.0
            else:
                wait_s = check.next_check_delay_ms / 1000
                if check.ready and not sent:
                    wait_s = self.IDLE_WAIT_S  # ready but held back: wait for an outcome
                if self.in_flight_count:
                    wait_s = min(wait_s, self.IDLE_WAIT_S)
            if wait_s > 0:
                self.lock.wait(wait_s)

    def _follow_moving_leaders(self) -> None:
        """While a broker leaves a request unanswered for ``retry.backoff.max.ms`` (paused,
        cut off, or only slow, or waiting for a follower that is), or batches wait to be
        sent again after a failure a leader change explains (a lost connection, a timeout,
        NOT_LEADER_OR_FOLLOWER...), ask a broker every ``retry.backoff.ms`` who leads
        those partitions, on the leader-check thread (the loop goes on meanwhile).
        A batch to retry whose partition has a new leader goes at once, without its
        back-off (``RecordAccumulator``, KIP-951); a stream whose waiting partitions have
        one is broken, so its requests go again, same bytes and sequences, to the new
        leader instead of waiting out ``request.timeout.ms`` (the broker drops a retry it
        stored already).  A slow leader that still leads is left alone."""
        if self._leader_check is not None:
            if self._leader_check.answer.done():
                check, self._leader_check = self._leader_check, None
                self._move_off_old_leaders(check)
            return
        stall_s = self.config.retry_backoff_max_ms / 1000
        stalled = [c for c in list(self._connections.values()) if c.waiting_s() >= stall_s]
        with self.lock:
            retrying = self._leader_in_doubt.intersection(self.accumulator.retrying_partitions)
        if not stalled and not retrying:
            return
        now = time.monotonic()
        if now < self._next_leader_check:
            return
        self._next_leader_check = now + self.config.retry_backoff_ms / 1000
        waiting = {connection: connection.partitions_in_flight() for connection in stalled}
        every = {tp for partitions in waiting.values() for tp in partitions} | retrying
        topics = sorted({tp.topic for tp in every})
        answer = self._leader_checks.submit(self.cluster.refresh, topics)
        answer.add_done_callback(lambda _answer: self._wake())
        self._leader_check = _LeaderCheck(answer, waiting)

    def _wake(self) -> None:
        with self.lock:
            self.lock.notify_all()

    def _move_off_old_leaders(self, check: _LeaderCheck) -> None:
        """Break the streams whose waiting partitions a fresh answer says are led elsewhere."""
        try:
            owners = check.answer.result()
        except TierlogError as error:
            log.debug("no metadata while requests wait (%s: %s)", reason_of(error), error)
            return
        for connection, partitions in check.waiting.items():
            if self._connections.get(connection.address) is not connection:
                continue  # broken and replaced since the question was asked
            moved = sorted(
                tp for tp in partitions if _led_elsewhere(tp, owners, connection.address)
            )
            if moved:
                log.info(
                    "%s moved from %s while their requests waited: sending them again",
                    ", ".join(map(str, moved)),
                    connection.address,
                )
                connection.abandon(
                    NetworkError(f"{moved[0]} is led elsewhere now, not by {connection.address}")
                )

    def _init_producer_id(self) -> None:
        request = log_service_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
        timeout_s = self.config.request_timeout_ms / 1000
        try:
            response = self.cluster.any_broker(
                lambda address: self.cluster.log_stub(address).InitProducerId(
                    request, timeout=timeout_s
                )
            )
        except TierlogError as error:
            log.warning("InitProducerId failed (%s: %s); retrying", reason_of(error), error)
            time.sleep(self.config.retry_backoff_ms / 1000)
            return
        with self.lock:
            assert self.idempotence is not None
            self.idempotence.set_producer_id_and_epoch(
                response.producer_id, response.producer_epoch
            )
            self.lock.notify_all()

    def _send_ready(self, ready: frozenset[TopicPartition]) -> int:
        if self.transactions is not None:  # a partition goes out once in the transaction
            ready, refused = self.transactions.add_partitions(ready)
            if refused:
                self._fail_unsent(refused)
        by_leader: dict[str, list[TopicPartition]] = {}
        epochs: dict[TopicPartition, int] = {}  # each request carries its leader's epoch
        for tp in sorted(ready):
            try:
                leader = self.cluster.leader(tp)
            except TierlogError as error:
                log.info("no owner known for %s yet (%s); will retry", tp, error)
                continue
            by_leader.setdefault(leader.address, []).append(tp)
            epochs[tp] = leader.epoch
        sent = 0
        for address, partitions in by_leader.items():
            with self.lock:
                if not self.config.enable_idempotence:
                    limit = self.config.max_in_flight_requests_per_connection
                    partitions = [tp for tp in partitions if self._in_flight.get(tp, 0) < limit]
                drained = self.accumulator.drain(
                    partitions, batches_per_partition=self._batches_per_request
                )
                requests = [tuple(group) for _tp, group in groupby(drained, _partition_of)]
                for batches in requests:
                    tp = batches[0].topic_partition
                    self._in_flight[tp] = self._in_flight.get(tp, 0) + 1
            request_sizes = []
            for batches in requests:
                for batch in batches:
                    if batch.sent_to != address:  # a new leader: its own back-off
                        batch.sent_to, batch.attempts_at_leader = address, 0
                request = self._request(batches, epochs[batches[0].topic_partition])
                self._connection(address).send(request, batches)
                request_sizes.append(len(request))
            with self.lock:  # once for all of this broker's requests
                for batches, size in zip(requests, request_sizes, strict=True):
                    self.metrics.request_sent(
                        size,
                        [batch.estimated_size_bytes for batch in batches],
                        sum(batch.record_count for batch in batches),
                    )
            sent += len(drained)
        return sent

    def _fail_unsent(self, refused: dict[TopicPartition, TierlogError]) -> None:
        """Fail the queued batches of partitions the transaction could not take."""
        resolutions: list[_Settlement] = []
        with self.lock:
            for batch in self.accumulator.take_queued(refused):
                error = refused[batch.topic_partition]
                self._fail(batch, error)
                self._resolve_failed(batch, resolutions, error)
            self.lock.notify_all()
        _resolve(resolutions)

    def fail_queued(self, error: TierlogError) -> None:
        """Fail every batch not in flight with ``error`` (a transaction being aborted)."""
        with self.lock:
            partitions = self.accumulator.queued_partitions
        self._fail_unsent(dict.fromkeys(partitions, error))

    def _connection(self, address: str) -> ProduceConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = ProduceConnection(
                address,
                self._io,
                self.cluster,
                self._on_outcome,
                self.config.request_timeout_ms / 1000,
            )
            self._connections[address] = connection
        return connection

    def _request(self, batches: Batches, leader_epoch: int) -> bytes:
        """The stream request for one partition's ``batches``, built (compressed,
        checksummed) here, outside the lock, and written in wire format: a request is up
        to max.request.size, copied once so (``tierlog.client.produce_wire``). It names
        the leader epoch the metadata gave, so a broker that leads in another epoch
        refuses it (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) rather than appending."""
        tp = batches[0].topic_partition
        acks = log_service_pb2.ACKS_NONE if self._acks is None else self._acks
        return encode_produce_stream_request(
            tp.topic, tp.partition, acks, [batch.close() for batch in batches], leader_epoch
        )

    def _on_outcome(self, batches: Batches, outcome: Outcome, latency_s: float | None) -> None:
        """From a connection's reader, on the I/O loop: hand a request's outcome (and how
        long its answer took) to the sender."""
        with self.lock:
            self._outcomes.append((batches, outcome, latency_s))
            self.lock.notify_all()

    # --- outcomes (under the lock) ----------------------------------------------------

    def _settle(self, resolutions: list[_Settlement]) -> None:
        while self._outcomes:
            batches, outcome, latency_s = self._outcomes.popleft()
            if latency_s is not None:
                self.metrics.requests.record(latency_s * 1000)
            tp = batches[0].topic_partition
            self._in_flight[tp] = max(0, self._in_flight.get(tp, 0) - 1)
            if isinstance(outcome, log_service_pb2.ProduceResponse):
                # The request's batches were appended together, in order: each starts
                # where the one before it ended.
                base_offset, append_time = outcome.base_offset, outcome.log_append_time_ms
                for batch in batches:
                    self._succeeded(batch, base_offset, append_time, resolutions)
                    if base_offset >= 0:
                        base_offset += batch.record_count
            elif reason_of(outcome) == "DUPLICATE_SEQUENCE_NUMBER":
                for batch in batches:
                    self._succeeded(batch, -1, -1, resolutions)
            else:
                # Last first: a retry without a sequence goes back to the front of its
                # queue, so the batches stand there again in the order they were sent.
                for batch in reversed(batches):
                    self._failed_attempt(batch, outcome, resolutions)

    def _succeeded(
        self,
        batch: ProducerBatch,
        base_offset: int,
        append_time: int,
        resolutions: list[_Settlement],
    ) -> None:
        if self.idempotence is not None:
            self.idempotence.on_success(batch, base_offset if base_offset >= 0 else None)
        self._leader_in_doubt.discard(batch.topic_partition)
        resolutions.append(_Settlement(batch.result, base_offset, append_time))
        self.accumulator.deallocate(batch)

    def _failed_attempt(
        self,
        batch: ProducerBatch,
        error: TierlogError,
        resolutions: list[_Settlement],
    ) -> None:
        tp = batch.topic_partition
        reason = reason_of(error)
        if isinstance(error, NotLeaderOrFollowerError) or reason in _STALE_METADATA_REASONS:
            self._leader_in_doubt.add(tp)
        if isinstance(error, NotLeaderOrFollowerError):
            self.cluster.moved(tp, error.leader_address)
        elif reason in _STALE_METADATA_REASONS:
            # The leader may have moved (a broker that is gone leaves nobody to say
            # NOT_LEADER_OR_FOLLOWER): ask a broker again, as Kafka's producer does after
            # a disconnection.
            self.cluster.invalidate(tp.topic)
        batch.last_error_reason = reason
        if self._may_retry(batch, reason):
            # Named as it happens, as Kafka's producer logs each retry: a cause that lasts
            # (too few in-sync replicas) is not first heard of at delivery.timeout.ms.
            log.warning(
                "Got error produce response on topic-partition %s, retrying (%d attempts "
                "left). Error: %s",
                tp,
                self.config.retries - batch.attempts,
                with_reason(error),
            )
            self.metrics.records_retried.record(batch.record_count)
            self.accumulator.reenqueue(batch)
            return
        self._fail(batch, error)
        if reason in _SEQUENCING_REASONS and self._past_delivery_timeout(batch):
            # The producer's own sequencing, which it would have retried: what the
            # records' callers meet is the delivery timeout (Kafka's expiry), not it.
            error = self._expired_error(batch)
        self._resolve_failed(batch, resolutions, error)

    def _may_retry(self, batch: ProducerBatch, reason: str) -> bool:
        if batch.attempts >= self.config.retries or self._past_delivery_timeout(batch):
            return False
        if self.idempotence is not None:
            return self.idempotence.can_retry(batch, reason)
        return reason in RETRIABLE_REASONS

    def _past_delivery_timeout(self, batch: ProducerBatch) -> bool:
        return self.clock() - batch.created_ms >= self.config.delivery_timeout_ms

    def _fail(self, batch: ProducerBatch, error: TierlogError) -> None:
        self.metrics.records_failed.record(batch.record_count)
        if self.transactions is not None:
            self.transactions.on_batch_failed(error)
        if self.idempotence is not None and batch.has_sequence:
            if isinstance(error, (NetworkError, RequestTimedOutError)):
                self.idempotence.on_expired(batch)  # stored or not: unknown
            else:
                self.idempotence.on_failed(batch, reason_of(error), adjust_sequences=True)
        self.accumulator.deallocate(batch)

    def _expired_error(self, batch: ProducerBatch) -> TierlogError:
        cause = batch.last_error_reason
        return RequestTimedOutError(
            f"{batch.record_count} record(s) for {batch.topic_partition} expired after "
            f"delivery.timeout.ms ({self.config.delivery_timeout_ms})"
            + (f"; the last attempt failed with {cause}" if cause else "")
        )

    @staticmethod
    def _resolve_failed(
        batch: ProducerBatch, resolutions: list[_Settlement], error: BaseException
    ) -> None:
        resolutions.append(_Settlement(batch.result, error=error))


_partition_of = attrgetter("topic_partition")
# What the broker answers an idempotent producer's sequences with, which it retries.
_SEQUENCING_REASONS = frozenset({"OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID"})
# Answers after which the partition's leader is looked up again before the retry.
_STALE_METADATA_REASONS = frozenset(
    {
        "UNKNOWN_TOPIC_OR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "NETWORK_EXCEPTION",
        "REQUEST_TIMED_OUT",
    }
)


@dataclass(frozen=True)
class _LeaderCheck:
    """A question of who leads, out on the leader-check thread, and the partitions each
    stalled connection was waiting on when it was asked."""

    answer: Future[dict[str, TopicOwners]]
    waiting: dict[ProduceConnection, set[TopicPartition]]


def _led_elsewhere(tp: TopicPartition, owners: dict[str, TopicOwners], address: str) -> bool:
    """Whether ``owners`` (a fresh answer) names a leader of ``tp`` other than ``address``."""
    topic = owners.get(tp.topic)
    if topic is None or tp.partition >= topic.partition_count:
        return False
    return topic.leaders[tp.partition] not in ("", address)


def _resolve(resolutions: list[_Settlement]) -> None:
    """Complete the batches' results, outside the lock (their callbacks may send)."""
    for settlement in resolutions:
        settlement.result.complete(
            settlement.base_offset, settlement.log_append_time, settlement.error
        )
