"""The consumer: assigned partitions, positions it keeps itself, ``poll`` over Fetch long polls.

Kafka's ``KafkaConsumer`` with ``assign`` and ``seek`` (the sidecar has no group
coordinator, so no committed offsets): ``subscribe(topic)`` assigns every partition
of a topic.  A partition without a position gets one from ``auto.offset.reset``
(``earliest``/``latest`` via ListOffsets; ``none`` raises
``NoOffsetForPartitionError``), and so does one whose position fell out of the log
(``OFFSET_OUT_OF_RANGE``).

``poll`` returns buffered records first; when none are buffered it sends one Fetch to
the owner of each assigned partition at once, each a long poll of at most
``fetch.max.wait.ms`` (or what is left of the poll's timeout) for
``fetch.min.bytes``, and returns as soon as one of them brought records (asking again
those that answered empty while its timeout lasts).  A fetch
answers whole batches from the one holding the position: records before it are
skipped, control batches (transaction markers) are skipped without being returned,
and CRCs are checked when ``check.crcs`` says so.  Positions move as records are
returned, so a seek discards what was buffered.

Fetches are pipelined: as soon as a fetch brought batches, the next one for that
partition (from after its last batch) is sent, before the records are even decoded,
so it is on its way while this process decodes and the application works through the
records; a fetch still in flight when a poll returns stays in flight for the next
poll; a seek drops it.  The calls are blocking ones made on a pool of fetch threads
(``MAX_FETCH_THREADS``): gRPC's future calls start a thread per call whenever none of
the channel's calls is in flight, which with one partition is every fetch and costs
milliseconds each.  Records are decoded straight from the fetched bytes into rows
(``decode_record_rows``: runs of records laid out alike at C speed) and become
``ConsumerRecord`` tuples without a Python-level call.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from operator import add
from typing import NamedTuple

import grpc

from tierlog.api.errors import NotLeaderOrFollowerError
from tierlog.api.v1 import log_service_pb2
from tierlog.client.cluster import Cluster, ClusterClient
from tierlog.client.config import ConsumerConfig
from tierlog.client.errors import NoOffsetForPartitionError, TierlogError, is_retriable, reason_of
from tierlog.client.producer_batch import TopicPartition
from tierlog.client.rpc import error_from_rpc
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records import (
    BatchHeader,
    Header,
    crc_is_valid,
    decode_record_rows,
    iter_batches,
)

__all__ = ["Consumer", "ConsumerRecord", "OffsetAndTimestamp"]

EARLIEST = -2
LATEST = -1
# Fetch calls running at once (each a long poll of one partition, at most
# fetch.max.wait.ms); a consumer of more partitions queues the rest behind them.
MAX_FETCH_THREADS = 32


class ConsumerRecord(NamedTuple):
    """One record as ``poll`` returns it: a named tuple (as kafka-python's), because one is
    made per record and a tuple subclass is made from the decoder's rows by C-level calls,
    several times cheaper than any class with an ``__init__``."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


class Consumer(ClusterClient):
    def __init__(
        self, config: ConsumerConfig | Mapping[str, object], *, cluster: Cluster | None = None
    ) -> None:
        self.config = (
            config if isinstance(config, ConsumerConfig) else ConsumerConfig.from_properties(config)
        )
        self._own_cluster = cluster is None
        self.cluster = cluster or Cluster.for_client(self.config)
        self._timeout_s = self.config.request_timeout_ms / 1000
        self._positions: dict[TopicPartition, int | None] = {}
        self._buffers: dict[TopicPartition, _Buffered] = {}
        self._in_flight: dict[TopicPartition, _InFlightFetch] = {}
        self._fetch_threads: ThreadPoolExecutor | None = None

    # --- assignment and positions -----------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (positions of those kept are kept)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in set(self._in_flight) - set(wanted):
            self._drop_fetch(tp)
        self._positions = {tp: self._positions.get(tp) for tp in wanted}
        self._buffers = {tp: self._buffers.get(tp, _Buffered()) for tp in wanted}

    def subscribe(self, topic: str) -> list[TopicPartition]:
        """Assign every partition of ``topic``; the partitions."""
        count = self.cluster.owners(topic, refresh=True).partition_count
        partitions = [TopicPartition(topic, p) for p in range(count)]
        self.assign(partitions)
        return partitions

    def assignment(self) -> list[TopicPartition]:
        return list(self._positions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._check_assigned(tp)
        self._positions[tp] = offset
        self._buffers[tp] = _Buffered()
        self._drop_fetch(tp)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] = ()) -> None:
        for tp in list(partitions) or self.assignment():
            self.seek(tp, self._list_offset(tp, EARLIEST).offset)

    def seek_to_end(self, partitions: Iterable[TopicPartition] = ()) -> None:
        for tp in list(partitions) or self.assignment():
            self.seek(tp, self._list_offset(tp, LATEST).offset)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is at or after each one (None: no such record)."""
        found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, timestamp in timestamps.items():
            if timestamp < 0:
                raise ValueError(f"a timestamp in ms since the epoch, not {timestamp}")
            answer = self._list_offset(tp, timestamp)
            found[tp] = None if answer.offset < 0 else answer
        return found

    def seek_to_timestamp(
        self, timestamp_ms: int, partitions: Iterable[TopicPartition] = ()
    ) -> None:
        """Each partition to its first record at or after ``timestamp_ms`` (its end if none)."""
        chosen = list(partitions) or self.assignment()
        for tp, found in self.offsets_for_times(dict.fromkeys(chosen, timestamp_ms)).items():
            self.seek(tp, self._list_offset(tp, LATEST).offset if found is None else found.offset)

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``tp``."""
        self._check_assigned(tp)
        position = self._positions[tp]
        if position is None:
            position = self._reset(tp)
        return position

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._list_offset(tp, EARLIEST).offset for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._list_offset(tp, LATEST).offset for tp in partitions}

    def _check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self._positions:
            raise ValueError(f"{tp} is not assigned to this consumer")

    def _list_offset(self, tp: TopicPartition, timestamp: int) -> OffsetAndTimestamp:
        request = log_service_pb2.ListOffsetsRequest(
            topic=tp.topic, partition=tp.partition, timestamp_ms=timestamp
        )
        response = self.cluster.call_leader(
            tp, lambda stub: stub.ListOffsets(request, timeout=self._timeout_s)
        )
        return OffsetAndTimestamp(response.offset, response.timestamp_ms)

    def _reset(self, tp: TopicPartition) -> int:
        policy = self.config.auto_offset_reset
        if policy == "none":
            raise NoOffsetForPartitionError(f"{tp} has no position and auto.offset.reset is none")
        offset = self._list_offset(tp, EARLIEST if policy == "earliest" else LATEST).offset
        self._positions[tp] = offset
        self._buffers[tp] = _Buffered()
        self._drop_fetch(tp)
        return offset

    # --- poll -------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` records, waiting at most ``timeout_ms`` for some."""
        deadline = time.monotonic() + timeout_ms / 1000
        for tp in self.assignment():
            self.position(tp)
        while True:
            records = self._take_buffered()
            if records:
                return records
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            self._fetch(max(0, min(self.config.fetch_max_wait_ms, remaining_ms)))
            if remaining_ms <= 0:
                return self._take_buffered()

    def close(self) -> None:
        for fetch in self._in_flight.values():
            fetch.call.cancel()
        self._in_flight.clear()
        super().close()  # closing its channels ends the calls still running
        if self._fetch_threads is not None:  # none outlives the consumer
            self._fetch_threads.shutdown(wait=True, cancel_futures=True)

    def _take_buffered(self) -> list[ConsumerRecord]:
        taken: list[ConsumerRecord] = []
        room = self.config.max_poll_records
        for tp, buffered in self._buffers.items():
            if room and buffered:
                chunk = buffered.take(room)
                taken += chunk
                room -= len(chunk)
                self._positions[tp] = chunk[-1].offset + 1
        return taken

    def _drop_fetch(self, tp: TopicPartition) -> None:
        fetch = self._in_flight.pop(tp, None)
        if fetch is not None:
            fetch.call.cancel()

    def _send_fetch(self, tp: TopicPartition, offset: int, max_wait_ms: int) -> None:
        """A Fetch for ``tp`` from ``offset``, left in flight (``_in_flight``)."""
        try:
            stub = self.cluster.log_stub(self.cluster.leader(tp))
        except TierlogError as error:
            self._handle_fetch_error(tp, error)
            return
        request = log_service_pb2.FetchRequest(
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
            max_bytes=min(self.config.max_partition_fetch_bytes, self.config.fetch_max_bytes),
            max_wait_ms=max_wait_ms,
            min_bytes=self.config.fetch_min_bytes,
        )
        call = self._fetcher().submit(
            stub.Fetch, request, timeout=self._timeout_s + max_wait_ms / 1000
        )
        self._in_flight[tp] = _InFlightFetch(offset, call)

    def _fetcher(self) -> ThreadPoolExecutor:
        """The threads that make the Fetch calls (started on first use)."""
        if self._fetch_threads is None:
            self._fetch_threads = ThreadPoolExecutor(
                MAX_FETCH_THREADS, thread_name_prefix="tierlog-consumer-fetch"
            )
        return self._fetch_threads

    def _fetch(self, max_wait_ms: int) -> None:
        """A Fetch in flight for each assigned partition with nothing buffered (sent now
        unless one is on its way already), waited for until one answers or
        ``max_wait_ms`` (and the request timeout) passed."""
        sent_now = False
        for tp, buffered in self._buffers.items():
            if not buffered and tp not in self._in_flight:
                self._send_fetch(tp, self.position(tp), max_wait_ms)
                sent_now = True
        waiting = [
            (tp, fetch)
            for tp, fetch in self._in_flight.items()
            if not self._buffers[tp]  # a prefetch for a partition with records waits
        ]
        if not waiting:
            return
        # Back at the first answer: if it brought nothing, ``poll`` asks again for the
        # rest of its time.  (Not peeking at ``record_batches`` here: every read of a
        # bytes field copies it.)
        arrived = threading.Event()
        for _tp, fetch in waiting:
            fetch.call.add_done_callback(lambda _call: arrived.set())
        # A fetch sent now may take its whole long poll and the round trip; one already
        # in flight is not waited for beyond what this poll has left.
        arrived.wait(max_wait_ms / 1000 + (self._timeout_s if sent_now else 0.0))
        for tp, fetch in waiting:
            if not fetch.call.done():
                continue  # still on its way: the next poll takes it
            del self._in_flight[tp]
            try:
                response = fetch.call.result()
            except CancelledError:
                continue
            except grpc.RpcError as rpc_error:
                self._handle_fetch_error(tp, error_from_rpc(rpc_error))
                continue
            self._take(tp, fetch.offset, response.record_batches)

    def _handle_fetch_error(self, tp: TopicPartition, error: TierlogError) -> None:
        reason = reason_of(error)
        if isinstance(error, NotLeaderOrFollowerError):
            self.cluster.moved(tp, error.leader_address)
        elif reason == "OFFSET_OUT_OF_RANGE":
            self._positions[tp] = None
            self.position(tp)  # auto.offset.reset, or NoOffsetForPartitionError
        elif is_retriable(error):
            self.cluster.invalidate(tp.topic)
        else:
            raise error

    def _take(self, tp: TopicPartition, position: int, data: bytes) -> None:
        """Buffer a fetch's records, with the next fetch already on its way.

        Pipelining: the next fetch is sent from after the last batch (its headers are
        cheap to walk) *before* the records are decoded, so the sidecar reads and sends
        it while this process decodes; neither waits for the other.  A fetch that
        fails its checks drops that prefetch, as the position stays where it was.
        """
        batches = list(iter_batches(data))
        if batches and batches[-1].next_offset > position:
            self._send_fetch(tp, batches[-1].next_offset, self.config.fetch_max_wait_ms)
        try:
            self._buffer(tp, position, data, batches)
        except BaseException:
            self._drop_fetch(tp)
            raise

    def _buffer(
        self, tp: TopicPartition, position: int, data: bytes, batches: list[BatchHeader]
    ) -> None:
        """Buffer the records at or after ``position`` of ``batches`` (of ``data``)."""
        records: list[ConsumerRecord] = []
        next_offset = position
        topic_partition = (tp.topic, tp.partition)
        for header in batches:
            if self.config.check_crcs and not crc_is_valid(data, header):
                raise CorruptRecordError(
                    f"{tp}: batch at offset {header.base_offset} fails its CRC"
                )
            next_offset = max(next_offset, header.next_offset)
            if header.is_control:
                continue
            rows = decode_record_rows(data, header)
            if header.base_offset < position:
                rows = [row for row in rows if row[0] >= position]
            records += map(_new_record, map(add, repeat(topic_partition), rows))
        if records:
            self._buffers[tp] = _Buffered(records)
        else:  # only control batches or records before the position: skip them
            self._positions[tp] = next_offset


# ``ConsumerRecord`` from a (topic, partition, *row) tuple, without a Python-level call.
_new_record = functools.partial(tuple.__new__, ConsumerRecord)


@dataclass
class _InFlightFetch:
    offset: int
    call: Future[log_service_pb2.FetchResponse]


class _Buffered:
    """A partition's fetched records not yet returned by ``poll``."""

    __slots__ = ("_next", "_records")

    def __init__(self, records: list[ConsumerRecord] | None = None) -> None:
        self._records = records or []
        self._next = 0

    def __bool__(self) -> bool:
        return self._next < len(self._records)

    def take(self, count: int) -> list[ConsumerRecord]:
        chunk = self._records[self._next : self._next + count]
        self._next += len(chunk)
        return chunk
