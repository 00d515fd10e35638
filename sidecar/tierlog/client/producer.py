"""The producer: ``send`` records, get futures of where they were stored.

Kafka's ``KafkaProducer`` over tierlog's gRPC API.  ``send`` partitions the record
(Kafka's default partitioner: murmur2 of the key, sticky for null keys, over the
partition count from Metadata), encodes it into its partition's open batch in the
``RecordAccumulator`` and returns a ``RecordFuture`` (``tierlog.client.futures``: one
result per batch, the record's metadata made on demand); a ``callback`` given to
``send`` runs when the record is stored or failed, as Kafka's ``send(record,
callback)``.  The ``Sender`` thread builds (compresses, checksums), stamps and sends
the batches, and retries idempotently (see ``tierlog.client.sender``).  With a
``transactional.id`` it is Kafka's transactional producer: ``init_transactions`` once,
then ``begin_transaction``, ``send``..., ``commit_transaction`` or
``abort_transaction`` (``tierlog.client.transactions``).  ``send`` blocks only while
``buffer.memory`` is full, at most ``max.block.ms``.  ``flush`` sends everything
appended so far at once and waits for it; ``close`` flushes and stops the thread.

::

    with Producer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 10}) as producer:
        metadata = producer.send("orders", b"value", key=b"key").result()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType

from tierlog.client.accumulator import MemoryBlocked, RecordAccumulator
from tierlog.client.cluster import NO_ANSWER, Cluster
from tierlog.client.config import ProducerConfig
from tierlog.client.errors import IllegalProducerStateError, RequestTimedOutError
from tierlog.client.futures import Callback, RecordFuture, RecordMetadata
from tierlog.client.groups import ConsumerGroupMetadata, OffsetAndMetadata
from tierlog.client.idempotence import IdempotenceManager
from tierlog.client.record_fields import checked_record_fields
from tierlog.client.sender import Sender
from tierlog.client.transactions import TransactionManager
from tierlog.storage.errors import UnknownTopicOrPartitionError
from tierlog.storage.records import NO_TIMESTAMP, Header
from tierlog.storage.topic_partition import TopicPartition

__all__ = ["Callback", "Producer", "RecordFuture", "RecordMetadata"]

_BYTES_OR_NONE = frozenset({bytes, type(None)})


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Producer:
    def __init__(
        self, config: ProducerConfig | Mapping[str, object], *, cluster: Cluster | None = None
    ) -> None:
        self.config = (
            config if isinstance(config, ProducerConfig) else ProducerConfig.from_properties(config)
        )
        self._own_cluster = cluster is None
        self.cluster = cluster or Cluster.for_client(self.config)
        self.idempotence = (
            IdempotenceManager(
                self.config.max_in_flight_requests_per_connection,
                transactional=bool(self.config.transactional_id),
            )
            if self.config.enable_idempotence
            else None
        )
        self.accumulator = RecordAccumulator(
            self.config,
            wall_clock_ms,
            idempotence=self.idempotence,
            known_leader=self.cluster.known_leader_address,
        )
        # ``send`` takes the mutex itself: ``with`` on a Condition is a Python-level call,
        # once per record.
        self._mutex = threading.RLock()
        self._lock = threading.Condition(self._mutex)
        self._closed = False
        self.transactions: TransactionManager | None = None
        if self.config.transactional_id:
            assert self.idempotence is not None  # ProducerConfig: transactional is idempotent
            self.transactions = TransactionManager(
                self.config, self.cluster, self.idempotence, self._lock
            )
        self._sender = Sender(
            self.config,
            self.accumulator,
            self.idempotence,
            self.cluster,
            self._lock,
            wall_clock_ms,
            self.transactions,
        )
        self._sender.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] = (),
        partition: int | None = None,
        timestamp: int | None = None,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Queue one record; the future completes (and ``callback(metadata, error)`` runs)
        when the broker stored it or it failed for good.  Raises at once for an unknown
        topic or partition or a record too large for ``max.request.size``; after
        ``max.block.ms`` for ``buffer.memory`` full or no broker answering for the
        topic's metadata; ``TypeError`` for a field of the wrong type
        (``tierlog.client.record_fields``), before anything is queued."""
        if self._closed:
            raise IllegalProducerStateError("the producer is closed")
        if (
            value.__class__ is not bytes
            or key.__class__ not in _BYTES_OR_NONE
            or headers
            or timestamp is not None
            or partition is not None
        ):  # anything but the plainest record: check every field before encoding any
            key, value, headers = checked_record_fields(key, value, headers, timestamp, partition)
        partition_count = self._partition_count(topic)
        if partition is not None and partition >= partition_count:
            partition_count = self._check_partition_exists(topic, partition)
        deadline_ms: int | None = None
        with self._mutex:
            if self.transactions is not None:
                self.transactions.check_can_send()
            while True:
                result = self.accumulator.append(
                    topic,
                    key,
                    value,
                    NO_TIMESTAMP if timestamp is None else timestamp,
                    headers,
                    partition_count,
                    partition,
                    deadline_ms,
                )
                if not isinstance(result, MemoryBlocked):
                    break
                deadline_ms = result.deadline_ms
                self._lock.notify_all()  # every partition is ready while an append waits
                self._lock.wait(max(0.0, (deadline_ms - wall_clock_ms()) / 1000))
            batch, index, batch_is_full, new_batch_created, _size = result
            if callback is not None:
                batch.result.add_callback_while_open(index, callback)
            # Wake the sender when this record opened a batch or filled its own; not for
            # every record while an earlier full batch waits for its turn to go (Kafka's
            # ``batchIsFull`` says so then too), which would wake it for nothing.
            if new_batch_created or (batch_is_full and batch.is_full):
                self._lock.notify_all()
        return RecordFuture(batch.result, index)

    # -- transactions (KIP-98; ``tierlog.client.transactions``) -----------------------------

    def _transactional(self) -> TransactionManager:
        if self.transactions is None:
            raise IllegalProducerStateError("transactions need a transactional.id")
        if self._closed:
            raise IllegalProducerStateError("the producer is closed")
        return self.transactions

    def init_transactions(self) -> None:
        """Get this transactional id's producer id and epoch from its coordinator, fencing
        any older producer of the id (its open transaction is aborted). Call once, first."""
        self._transactional().init()

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent until its end commit or abort together."""
        self._transactional().begin()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata,
    ) -> None:
        """Commit a consumer's ``offsets`` with the current transaction (Kafka's
        ``sendOffsetsToTransaction``, consume-transform-produce): the group's offsets move
        if and only if the transaction commits. ``group_metadata`` is the consumer's
        ``group_metadata()``: a member fenced since is refused (``UNKNOWN_MEMBER_ID``,
        ``ILLEGAL_GENERATION``, ``FENCED_MEMBER_EPOCH``; abort the transaction).
        Outside a transaction: ``IllegalProducerStateError``."""
        self._transactional().send_offsets(offsets, group_metadata)

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Send every record of the transaction, then commit it: returns once every
        partition it wrote has its commit marker. A record that failed raises its error
        (abort then); ``ProducerFencedError`` means a newer producer took the id over."""
        transactions = self._transactional()
        transactions.before_commit()
        if not self.flush(timeout_s):
            raise RequestTimedOutError("the transaction's records were not all sent in time")
        transactions.end(commit=True)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """End the transaction aborted: its records stay in the log, marked aborted, and a
        read_committed consumer never sees them."""
        transactions = self._transactional()
        error = transactions.before_abort()
        if error is not None:  # what is still queued will not be sent (Kafka's abort too)
            self._sender.fail_queued(error)
        if not self.flush(timeout_s):
            raise RequestTimedOutError("the transaction's records were not all answered in time")
        transactions.end(commit=False)

    def _partition_count(self, topic: str) -> int:
        """The topic's partition count, asking again every ``retry.backoff.ms`` while no
        broker answers, for up to ``max.block.ms`` (Kafka's ``send`` waits for metadata
        alike): a producer started beside its brokers, or while one restarts, waits
        rather than failing its first records."""
        try:  # the path of every record: no clock read unless a broker fails to answer
            return self.cluster.owners(topic).partition_count
        except NO_ANSWER:
            deadline = time.monotonic() + self.config.max_block_ms / 1000
        while True:
            time.sleep(self.config.retry_backoff_ms / 1000)
            try:
                return self.cluster.owners(topic).partition_count
            except NO_ANSWER:
                if time.monotonic() >= deadline:
                    raise

    def _check_partition_exists(self, topic: str, partition: int) -> int:
        """The topic's partition count, asked again (partitions may have been added since
        it was cached); ``UNKNOWN_TOPIC_OR_PARTITION`` if ``partition`` is still past it."""
        count = self.cluster.owners(topic, refresh=True).partition_count
        if partition >= count:
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of {topic} does not exist: the topic has {count}"
            )
        return count

    def metrics(self) -> dict[str, float]:
        """Kafka's ``producer-metrics`` by name: ``record-send-rate``,
        ``request-latency-avg``, ``buffer-available-bytes``, ... (``client_metrics``)."""
        with self._lock:
            return self._sender.metrics.snapshot(
                self.config.buffer_memory, self.accumulator.free_memory_bytes
            )

    def flush(self, timeout_s: float | None = None) -> bool:
        """Send everything appended so far now, and wait until each is stored or failed;
        False if ``timeout_s`` passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            pending = set(self.accumulator.incomplete_batches)
            self.accumulator.begin_flush()
            self._lock.notify_all()
            try:
                while pending.intersection(self.accumulator.incomplete_batches):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._lock.wait(0.1 if remaining is None else min(remaining, 0.1))
            finally:
                self.accumulator.end_flush()
        return True

    def close(self, timeout_s: float | None = None) -> None:
        """Send what is queued (waiting at most ``timeout_s``), then stop; records still
        unacknowledged then fail with ``RequestTimedOutError`` (they may or may not
        have been stored)."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self.accumulator.close()
            self._lock.notify_all()
        self.flush(timeout_s)
        self._sender.stop(timeout_s)
        with self._lock:
            abandoned = self.accumulator.incomplete_batches
        closed = RequestTimedOutError("the producer closed before the record was acknowledged")
        for batch in abandoned:
            batch.result.complete(-1, -1, closed)
        if self._own_cluster:
            self.cluster.close()
