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
``fetch.min.bytes``, and returns as soon as one of them brought records.  A fetch
answers whole batches from the one holding the position: records before it are
skipped, control batches (transaction markers) are skipped without being returned,
and CRCs are checked when ``check.crcs`` says so.  Positions move as records are
returned, so a seek discards what was buffered.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import grpc

from tierlog.api.errors import NotLeaderOrFollowerError
from tierlog.api.v1 import log_service_pb2
from tierlog.client.cluster import Cluster, ClusterClient
from tierlog.client.config import ConsumerConfig
from tierlog.client.errors import NoOffsetForPartitionError, TierlogError, is_retriable, reason_of
from tierlog.client.producer_batch import TopicPartition
from tierlog.client.rpc import error_from_rpc
from tierlog.storage.errors import CorruptRecordError
from tierlog.storage.records import Header, crc_is_valid, decode_records, iter_batches

__all__ = ["Consumer", "ConsumerRecord", "OffsetAndTimestamp"]

EARLIEST = -2
LATEST = -1


@dataclass(frozen=True)
class ConsumerRecord:
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
        self._buffers: dict[TopicPartition, deque[ConsumerRecord]] = {}

    # --- assignment and positions -----------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (positions of those kept are kept)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        self._positions = {tp: self._positions.get(tp) for tp in wanted}
        self._buffers = {tp: self._buffers.get(tp, deque()) for tp in wanted}

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
        self._buffers[tp].clear()

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
        self._buffers[tp].clear()
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

    def _take_buffered(self) -> list[ConsumerRecord]:
        taken: list[ConsumerRecord] = []
        for tp, buffer in self._buffers.items():
            while buffer and len(taken) < self.config.max_poll_records:
                record = buffer.popleft()
                taken.append(record)
                self._positions[tp] = record.offset + 1
        return taken

    def _fetch(self, max_wait_ms: int) -> None:
        """One long-poll Fetch per assigned partition with nothing buffered, all at once;
        back as soon as one brings records (or all answered)."""
        wanted = [tp for tp, buffer in self._buffers.items() if not buffer]
        if not wanted:
            return
        per_partition = min(self.config.max_partition_fetch_bytes, self.config.fetch_max_bytes)
        timeout_s = self._timeout_s + max_wait_ms / 1000
        requests = []
        for tp in wanted:
            position = self.position(tp)
            try:
                stub = self.cluster.log_stub(self.cluster.leader(tp))
            except TierlogError as error:
                self._handle_fetch_error(tp, error)
                continue
            request = log_service_pb2.FetchRequest(
                topic=tp.topic,
                partition=tp.partition,
                offset=position,
                max_bytes=per_partition,
                max_wait_ms=max_wait_ms,
                min_bytes=self.config.fetch_min_bytes,
            )
            requests.append((tp, position, stub, request))
        arrived = threading.Event()
        lock = threading.Lock()
        pending = [len(requests)]

        def done(call: grpc.Future[log_service_pb2.FetchResponse]) -> None:
            with lock:
                pending[0] -= 1
                everyone = pending[0] == 0
            if everyone or (
                not call.cancelled() and call.exception() is None and call.result().record_batches
            ):
                arrived.set()

        calls: list[tuple[TopicPartition, int, grpc.Future[log_service_pb2.FetchResponse]]] = []
        for tp, position, stub, request in requests:
            fetch = stub.Fetch.future(request, timeout=timeout_s)
            calls.append((tp, position, fetch))
            fetch.add_done_callback(done)
        if calls:
            arrived.wait(timeout_s)
        for tp, position, call in calls:
            if not call.done():
                call.cancel()
                continue
            try:
                response = call.result()
            except grpc.FutureCancelledError:
                continue
            except grpc.RpcError as rpc_error:
                self._handle_fetch_error(tp, error_from_rpc(rpc_error))
                continue
            if self._positions.get(tp) == position:
                self._buffer(tp, position, response.record_batches)

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

    def _buffer(self, tp: TopicPartition, position: int, data: bytes) -> None:
        buffer = self._buffers[tp]
        next_offset = position
        for header in iter_batches(data):
            if self.config.check_crcs and not crc_is_valid(data, header):
                raise CorruptRecordError(
                    f"{tp}: batch at offset {header.base_offset} fails its CRC"
                )
            next_offset = max(next_offset, header.next_offset)
            if header.is_control:
                continue
            for record in decode_records(data, header):
                if record.offset >= position:
                    buffer.append(
                        ConsumerRecord(
                            tp.topic,
                            tp.partition,
                            record.offset,
                            record.timestamp,
                            record.key,
                            record.value,
                            record.headers,
                        )
                    )
        if not buffer:  # only control batches or records before the position: skip them
            self._positions[tp] = next_offset
